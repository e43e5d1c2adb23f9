"""scripts/reliability_report.py: rendering, and merging a partial run's rows
(e.g. the long runs) into an existing RELIABILITY.md."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import reliability_report as report  # noqa: E402


def _row(test, case, outcome, detected=None, t=1_800_000_000.0):
    return {"test": test, "case": case, "outcome": outcome, "detected_s": detected, "lost": "nothing",
            "time": t}


def test_merge_replaces_the_same_tests_rows_and_keeps_the_others():
    old = report.render([_row("t.py::a", "fault: a killed", "named", 0.004),
                         _row("t.py::b", "soak: old soak", "old | result"),
                         _row("t.py::c", "1000 calls", "flat")], long_ran=False, pytest_rc=None)
    header, rows = report.read_report(old)
    assert [r["test"] for r in rows] == ["t.py::a", "t.py::b", "t.py::c"]
    assert rows[0]["detected_s"] == "4 ms" and rows[1]["outcome"] == "old | result"
    merged = report.merge(old, [_row("t.py::b", "soak: new soak", "exact"),
                                _row("t.py::d", "soak: 2 GiB", "first run", t=1_800_000_000.0),
                                _row("t.py::d", "soak: 2 GiB", "exact", t=1_800_000_100.0)],
                          "the long runs", pytest_rc=1)
    _, rows = report.read_report(merged)
    assert sorted((r["test"], r["outcome"]) for r in rows) == [
        ("t.py::a", "named"), ("t.py::b", "exact"), ("t.py::c", "flat"), ("t.py::d", "exact")]
    assert header[0] in merged  # the earlier generation's line stays, with the merge said after it
    assert "2 rows from the long runs" in merged and "1 earlier rows of the same tests replaced" in merged
    assert "4 rows in all" in merged and "pytest exited with 1" in merged
    assert "| a killed | named | 4 ms |" in merged
