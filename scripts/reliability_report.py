"""Renders RELIABILITY.md from the rows `make reliability` collects.

Each row is one JSON line written by the `reliability` fixture
(tests/conftest.py): the test's id, the case tried ("fault: ...",
"bad input: ...", "attack: ..."), what happened, seconds until it was
detected, and what was lost. Rows are grouped by that prefix into one table
per area.

    python scripts/reliability_report.py LOG.jsonl RELIABILITY.md [--long-ran 0|1] [--pytest-rc N]

A partial run (some tests only, e.g. the long ones) is merged into the
existing report instead of replacing it: its rows replace the rows of the
same tests, the other rows stay as they were, and the header says which rows
came from which run:

    python scripts/reliability_report.py LOG.jsonl RELIABILITY.md --merge "the long runs (...)"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time

AREAS = (("fault", "Faults (processes killed, stopped, missing)"),
         ("bad input", "Bad input (settings, shapes, malformed configuration and frames)"),
         ("attack", "Attacks (on the rendezvous, the wire and the servers)"),
         ("soak", "Soak and stress (long runs)"))


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _detected(value) -> str:
    if isinstance(value, str):  # a row read back from an existing report
        return value
    if value is None:
        return "n/a"
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.1f} s"


def _rerun(test_id: str) -> str:
    return f"`python3 -m pytest '{test_id}'`"


_INTRO = ("Every fault, bad input and attack below was tried on real processes over real sockets on "
          "loopback by a test marked `@pytest.mark.reliability`; each row is what that test saw and "
          "asserted. Regenerate the whole file with `make reliability` (runs `pytest -m reliability` "
          "with `TFX_RELIABILITY_LONG=1`, then `scripts/reliability_report.py`); rerun one row with "
          "its command.")


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def _when(rows) -> str:
    times = [r["time"] for r in rows if isinstance(r.get("time"), (int, float))]
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max(times, default=time.time())))


def _failed(pytest_rc) -> str:
    return "" if pytest_rc in (None, 0) else f" **pytest exited with {pytest_rc}: some case failed.**"


def render(rows: list[dict], long_ran: bool, pytest_rc: int | None, provenance: str | None = None) -> str:
    generated = provenance or (
        f"Generated {_when(rows)} on {_machine()}; {len(rows)} rows; "
        + ("long runs included (`TFX_RELIABILITY_LONG=1`)." if long_ran else
           "**long runs (soak, minutes of fuzzing) not included in this generation** "
           "(`make reliability` includes them).") + _failed(pytest_rc))
    lines = ["# Reliability report", "", _INTRO, "", generated, ""]
    for prefix, title in AREAS:
        mine = [r for r in rows if r["case"].lower().startswith(prefix + ":")]
        if not mine:
            continue
        lines += [f"## {title}", "", "| what was tried | what happened | detected after | what was lost | rerun |",
                  "|---|---|---|---|---|"]
        for r in sorted(mine, key=lambda r: r["case"]):
            case = r["case"].split(":", 1)[1].strip()
            lines.append(f"| {_cell(case)} | {_cell(r['outcome'])} | {_detected(r['detected_s'])} | "
                         f"{_cell(r['lost'])} | {_rerun(r['test'])} |")
        lines.append("")
    other = [r for r in rows if not any(r["case"].lower().startswith(p + ":") for p, _ in AREAS)]
    if other:
        lines += ["## Other", "", "| what was tried | what happened | detected after | what was lost | rerun |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_cell(r['case'])} | {_cell(r['outcome'])} | {_detected(r['detected_s'])} | "
                  f"{_cell(r['lost'])} | {_rerun(r['test'])} |" for r in other]
    return "\n".join(lines).rstrip() + "\n"


_ROW = re.compile(r"^\| (.*) \| (.*) \| (.*) \| (.*) \| `python3 -m pytest '(.*)'` \|$")


def read_report(text: str) -> tuple[list[str], list[dict]]:
    """An existing RELIABILITY.md: its header paragraphs after the intro, and its rows."""
    titles = {title: prefix for prefix, title in AREAS}
    header, rows, area, in_header = [], [], None, True
    for line in text.splitlines():
        if line.startswith("## "):
            in_header = False
            area = titles.get(line[3:].strip())
            continue
        if in_header:
            if line and not line.startswith("# ") and line != _INTRO:
                header.append(line)
            continue
        m = _ROW.match(line)
        if m:
            case, outcome, detected, lost, test = (c.replace("\\|", "|") for c in m.groups())
            rows.append({"test": test, "case": f"{area}: {case}" if area else case, "outcome": outcome,
                         "detected_s": detected, "lost": lost, "time": None})
    return header, rows


def merge(old_text: str, new_rows: list[dict], what: str, pytest_rc: int | None) -> str:
    """The existing report with ``new_rows`` in place of its rows of the same tests."""
    header, old_rows = read_report(old_text)
    # A test run twice (e.g. in two streams) gives its row twice: keep the latest.
    new_rows = list({(r["test"], r["case"]): r for r in sorted(new_rows, key=lambda r: r["time"])}.values())
    tests = {r["test"] for r in new_rows}
    kept = [r for r in old_rows if r["test"] not in tests]
    replaced = len(old_rows) - len(kept)
    note = (f"Merged {_when(new_rows)} on {_machine()}: {len(new_rows)} rows from {what}, run on their own "
            f"and merged by `scripts/reliability_report.py --merge` ({replaced} earlier rows of the same tests "
            f"replaced); every other row is from the generation described above, unchanged; "
            f"{len(kept) + len(new_rows)} rows in all." + _failed(pytest_rc))
    return render(kept + new_rows, True, None, provenance="\n\n".join(header + [note]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("output")
    parser.add_argument("--long-ran", type=int, default=1)
    parser.add_argument("--pytest-rc", type=int, default=None)
    parser.add_argument("--merge", metavar="WHAT", default=None,
                        help="merge the log's rows into the existing OUTPUT; WHAT says which run they are from")
    args = parser.parse_args()
    rows = []
    if os.path.exists(args.log):
        with open(args.log) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    if args.merge:
        with open(args.output) as f:
            text = merge(f.read(), rows, args.merge, args.pytest_rc)
    else:
        text = render(rows, bool(args.long_ran), args.pytest_rc)
    with open(args.output, "w") as f:
        f.write(text)
    print(f"wrote {args.output}: {len(rows)} rows")


if __name__ == "__main__":
    main()
