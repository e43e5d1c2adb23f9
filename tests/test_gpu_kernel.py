"""The GPU kernel of TfxFusedReduce, built on its own (scripts/gpu_check.sh).

Where nvcc exists the check and benchmark programs must build; where a GPU
exists too, the check (every dtype and reduction, bit for bit against the
host) must pass. CPU-only machines skip what they cannot do.
"""

import os
import shutil
import subprocess

import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # build_ops.py
BUILT = os.path.join(ROOT, "build", "gpu_check", "fused_reduce_gpu_test")


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def built():
    if shutil.which("nvcc") is None and not os.environ.get("NVCC"):
        pytest.skip("no nvcc on this machine")
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--build-only"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return BUILT


def test_gpu_programs_build(built):
    assert os.access(built, os.X_OK)
    assert os.access(built.replace("_test", "_bench"), os.X_OK)


@pytest.mark.skipif(not _has_gpu(), reason="no GPU on this machine")
def test_gpu_kernel_matches_host(built):
    result = subprocess.run([built], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout.splitlines()[-1]


def test_cuda_arch_flags():
    import build_ops

    assert build_ops.cuda_arch_flags("80,90") == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90"]  # PTX of the newest, for newer GPUs
    assert build_ops.cuda_arch_flags(" 120, 75 ")[-1] == "-gencode=arch=compute_120,code=compute_120"
    for bad in ("", "8.0", "sm_90", "80;90"):
        with pytest.raises(ValueError, match="TFX_CUDA_ARCHS"):
            build_ops.cuda_arch_flags(bad)
