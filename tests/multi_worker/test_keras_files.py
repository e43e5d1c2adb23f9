"""Keras programs that write files, on real worker processes."""

import os

from workers import run_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "keras_files.py")


def _run(tmp_path, phase, tmp_env=False, timeout_s=150):
    env = {"PHASE": phase, "SHARED": str(tmp_path / "shared")}
    if tmp_env:  # each worker's own TMPDIR, to see what it leaves there
        (tmp_path / "tmp0").mkdir()
        (tmp_path / "tmp1").mkdir()
        per_rank = [{"TMPDIR": str(tmp_path / f"tmp{i}")} for i in range(2)]
    else:
        per_rank = None
    with open(SCRIPT) as f:
        return run_workers(f.read(), 2, str(tmp_path / phase), timeout_s=timeout_s,
                           extra_env=env, per_rank_env=per_rank)


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


def test_keras_file_callbacks_write_the_chiefs_files_only(tmp_path):
    # Keras's own callbacks, unchanged: only the chief's files appear in the
    # shared folder, the other worker's temporary folders are gone.
    results = [r.result for r in _run(tmp_path, "callbacks", tmp_env=True)]
    files = results[0]["files"]
    assert results[1]["files"] == files
    events = [f for f in files if f.startswith("tb/")]
    # Event files are named after the writing process: the chief's only.
    writers = {f.split(".")[-3] for f in events}
    assert writers == {str(results[0]["pid"])}, events
    assert {os.path.dirname(f) for f in events} == {"tb/train", "tb/validation"}
    assert sorted(set(files) - set(events)) == [
        "backup/latest.weights.h5", "backup/latest.weights.h5.bkp",
        "backup/training_metadata.json", "backup/training_metadata.json.bkp",
        "best.weights.h5", "ckpt/model_1.keras", "ckpt/model_2.keras", "log.csv"]
    csv = results[0]["csv"]
    assert len(csv) == 3 and csv[0].startswith("epoch,"), csv
    assert [line.split(",")[0] for line in csv[1:]] == ["0", "1"]
    for r in results:
        assert r["paths_restored"]
        assert r["temp_left"] == []
