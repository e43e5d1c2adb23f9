"""Keras programs that write files, on real worker processes (issue 21)."""

import os

from workers import run_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "keras_files.py")


def _run(tmp_path, phase, check=True, timeout_s=150):
    with open(SCRIPT) as f:
        return run_workers(f.read(), 2, str(tmp_path / phase), timeout_s=timeout_s, check=check,
                           extra_env={"PHASE": phase, "SHARED": str(tmp_path / "shared")})


def test_every_worker_loads_the_chiefs_file_right_after_saving(tmp_path):
    # The chief's writes are slow on purpose: without the save barrier the
    # other worker loads a file that is missing or incomplete.
    results = [r.result for r in _run(tmp_path, "save_load")]
    for r in results:
        assert r["loads"] == [True] * 12
    rounds = sorted(os.listdir(tmp_path / "shared"))
    assert rounds == ["round0", "round1", "round2"]
    for name in rounds:
        assert not [f for f in os.listdir(tmp_path / "shared" / name) if "workertemp" in f]
