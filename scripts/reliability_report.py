"""Renders RELIABILITY.md from the rows `make reliability` collects.

Each row is one JSON line written by the `reliability` fixture
(tests/conftest.py): the test's id, the case tried ("fault: ...",
"bad input: ...", "attack: ..."), what happened, seconds until it was
detected, and what was lost. Rows are grouped by that prefix into one table
per area.

    python scripts/reliability_report.py LOG.jsonl RELIABILITY.md [--long-ran 0|1] [--pytest-rc N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

AREAS = (("fault", "Faults (processes killed, stopped, missing)"),
         ("bad input", "Bad input (settings, shapes, malformed configuration and frames)"),
         ("attack", "Attacks (on the rendezvous, the wire and the servers)"),
         ("soak", "Soak and stress (long runs)"))


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _detected(value) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.1f} s"


def _rerun(test_id: str) -> str:
    return f"`python3 -m pytest '{test_id}'`"


def render(rows: list[dict], long_ran: bool, pytest_rc: int | None) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max((r["time"] for r in rows), default=time.time())))
    lines = ["# Reliability report", "",
             "Every fault, bad input and attack below was tried on real processes over real sockets on "
             "loopback by a test marked `@pytest.mark.reliability`; each row is what that test saw and "
             "asserted. Regenerate the whole file with `make reliability` (runs `pytest -m reliability` "
             "with `TFX_RELIABILITY_LONG=1`, then `scripts/reliability_report.py`); rerun one row with "
             "its command.", "",
             f"Generated {date} on {machine}; {len(rows)} rows; "
             + ("long runs included (`TFX_RELIABILITY_LONG=1`)." if long_ran else
                "**long runs (soak, minutes of fuzzing) not included in this generation** "
                "(`make reliability` includes them).")
             + ("" if pytest_rc in (None, 0) else f" **pytest exited with {pytest_rc}: some case failed.**"),
             ""]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("output")
    parser.add_argument("--long-ran", type=int, default=1)
    parser.add_argument("--pytest-rc", type=int, default=None)
    args = parser.parse_args()
    rows = []
    if os.path.exists(args.log):
        with open(args.log) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    with open(args.output, "w") as f:
        f.write(render(rows, bool(args.long_ran), args.pytest_rc))
    print(f"wrote {args.output}: {len(rows)} rows")


if __name__ == "__main__":
    main()
