"""The CUDA kernels, built on their own (scripts/gpu_check.sh): TfxFusedReduce's
and the embedding store's (lookup gather, sparse optimizers).

Where nvcc exists the check and benchmark programs must build; where a GPU
exists too, the checks must pass (the fused reduce: every dtype and
reduction, bit for bit against the host; the embedding kernels: every
optimizer against the CPU store, bit for bit but for FTRL with powf).
CPU-only machines skip what they cannot do.
"""

import os
import shutil
import subprocess

import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # build_ops.py
BUILT = os.path.join(ROOT, "build", "gpu_check", "fused_reduce_gpu_test")
EMBEDDING_BUILT = os.path.join(ROOT, "build", "gpu_check", "embedding_gpu_test")


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
    for program in (built, EMBEDDING_BUILT):
        assert os.access(program, os.X_OK), program
        assert os.access(program.replace("_test", "_bench"), os.X_OK), program


def test_gpu_check_refuses_unknown_targets():
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--build-only", "embeddings"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown argument 'embeddings'" in result.stderr


@pytest.mark.skipif(not _has_gpu(), reason="no GPU on this machine")
def test_gpu_kernel_matches_host(built):
    result = subprocess.run([built], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout.splitlines()[-1]


@pytest.mark.skipif(not _has_gpu(), reason="no GPU on this machine")
def test_embedding_gpu_kernels_match_cpu_store(built):
    result = subprocess.run([EMBEDDING_BUILT], capture_output=True, text=True, timeout=900)
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
