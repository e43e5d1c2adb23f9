"""Writes the tf-nightly report (markdown, stdout) from a `scripts/compat.sh nightly` run.

    python3 scripts/nightly_report.py build/compat/tfnightly

Reads costs.txt (versions, steps), compat.log (C++ compile errors of the op libraries) and
results.xml (pytest's JUnit file). For each failing test: the error, the frame of
tfx_dist/_tf_compat (or tfx_dist) where it surfaced, and the private TensorFlow or Keras names
involved (private modules under tensorflow.python / keras.src, and `_field` names the error
message mentions).
"""

from __future__ import annotations

import collections
import os
import re
import sys
import xml.etree.ElementTree as ET

PRIVATE_MODULE = re.compile(r"(?:tensorflow/python|keras/src)/[\w/]+\.py")
PRIVATE_NAME = re.compile(r"'(_[A-Za-z]\w*)'")
OUR_FRAME = re.compile(r"(tfx_dist/[\w/]+\.py):(\d+)")
COMPILE_ERROR = re.compile(r"(custom_ops/[\w/.]+):(\d+):\d+: error: (.*)")


def _first_error_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if re.match(r"^E\s+\w+(Error|Exception)", line) or re.match(r"^\w+(Error|Exception):", line):
            return line.lstrip("E ").strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _failures(results_xml: str):
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                text = (node.get("message") or "") + "\n" + (node.text or "")
                yield f"{case.get('classname')}::{case.get('name')}", text


def _summary(work: str) -> tuple[str, dict]:
    versions, steps = "", {}
    path = os.path.join(work, "costs.txt")
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("versions "):
                versions = line.split(" ", 1)[1].strip()
            elif line.strip():
                step, seconds, rc = line.split()
                steps[step] = (int(seconds), int(rc))
    return versions, steps


def main(work: str) -> None:
    versions, steps = _summary(work)
    print(f"# tf-nightly early warning: {versions or 'versions unknown'}\n")
    print("Steps (seconds, exit code): " + ", ".join(f"{k} {s} s ({rc})" for k, (s, rc) in steps.items()))
    log = open(os.path.join(work, "compat.log"), errors="replace").read() \
        if os.path.exists(os.path.join(work, "compat.log")) else ""
    compile_errors = sorted(set(COMPILE_ERROR.findall(log)))
    if compile_errors:
        print("\n## The op libraries do not compile\n")
        for path, line, message in compile_errors:
            print(f"- `{path}:{line}`: {message}")
    results = os.path.join(work, "results.xml")
    if not os.path.exists(results):
        print("\nNo test ran (see the steps above and compat.log).")
        return
    total = sum(1 for _ in ET.parse(results).getroot().iter("testcase"))
    failures = list(_failures(results))
    print(f"\n## Smoke set: {total - len(failures)} of {total} passed\n")
    if not failures:
        return
    by_cause = collections.defaultdict(list)
    for test, text in failures:
        frames = [f"{p}:{n}" for p, n in OUR_FRAME.findall(text)]
        compat = [f for f in frames if "_tf_compat" in f]
        private = sorted(set(PRIVATE_MODULE.findall(text)) | set(PRIVATE_NAME.findall(text)))
        cause = (_first_error_line(text)[:300], (compat or frames or ["?"])[-1], ", ".join(private[:6]))
        by_cause[cause].append(test)
    print("| error | where in tfx_dist | private TensorFlow / Keras involved | tests |")
    print("|---|---|---|---|")
    for (error, where, private), tests in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        names = "<br>".join(t.split("::")[-1] for t in tests[:4]) + (
            f"<br>(+{len(tests) - 4} more)" if len(tests) > 4 else "")
        error = error.replace("|", "\\|")
        print(f"| `{error}` | `{where}` | {private or '-'} | {names} |")


if __name__ == "__main__":
    main(sys.argv[1])
