"""Probes tfx_dist's private TensorFlow/Keras surface without the op libraries: imports
tfx_dist/_tf_compat (every private module it names) and runs each run-time replacement's installer
on its own, printing one line per failure: the installer, the error, the private name involved.

    TFX_ALLOW_UNTESTED_TENSORFLOW=1 python scripts/private_surface_probe.py

Part of the tf-nightly report (scripts/nightly_report.sh): it says what breaks even when the ops do
not build. Exit code: the number of failures (0: the private surface is all there).
"""

from __future__ import annotations

import re
import sys
import traceback


def _where(error: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "tfx_dist" in f.filename]
    frame = frames[-1] if frames else None
    return f"{frame.filename.split('tfx_dist/', 1)[-1]}:{frame.lineno}" if frame else "?"


def main() -> int:
    try:
        from tfx_dist._tf_compat import replacements
    except Exception as error:  # noqa: BLE001 (a report, not a program that goes on)
        print(f"- importing tfx_dist._tf_compat: `{type(error).__name__}: {error}` "
              f"at `tfx_dist/{_where(error)}`")
        return 1
    failures = 0
    for installer in replacements._installers:  # pylint: disable=protected-access
        try:
            installer()
        except Exception as error:  # noqa: BLE001
            failures += 1
            names = sorted(set(re.findall(r"'([\w.]+)'", str(error))))
            print(f"- `{installer.__module__}.{installer.__name__}`: `{type(error).__name__}: {error}` "
                  f"at `tfx_dist/{_where(error)}` (private names: {', '.join(names) or '-'})")
    if not failures:
        print(f"- every private import and all {len(replacements._installers)} replacements install")
    return failures


if __name__ == "__main__":
    sys.exit(main())
