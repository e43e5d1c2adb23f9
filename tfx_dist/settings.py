"""Every tfx_dist setting, declared once.

Each setting has one environment variable, a default and a meaning. Code reads a
setting through :func:`get`; constructor arguments override the environment.
The README's settings table is generated from ``SETTINGS``
(``python -m tfx_dist.settings --markdown``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Setting:
    env: str
    default: object
    parse: Callable[[str], object]
    meaning: str


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {text!r}")


SETTINGS = {
    setting.env: setting
    for setting in (
        Setting("TFX_FUSION_BUCKET_BYTES", 4 << 20, int,
                "Bytes per fusion bucket: the fused reductions split a gradient list "
                "into buckets of about this size and reduce each in one pass."),
        Setting("TFX_REDUCE_THREADS", 0, int,
                "Threads that reduce buckets on the CPU; 0 uses TensorFlow's "
                "intra-op thread pool."),
        Setting("TFX_JOB_SECRET", "", str,
                "Secret shared by the processes of one job (tfx-dist-run sets a fresh "
                "`secrets.token_hex(32)` per job); empty when no launcher set one."),
    )
}


def get(env: str, override: object = None) -> object:
    """Returns the value of setting ``env``: ``override`` if given, else the environment, else the default."""
    setting = SETTINGS[env]
    if override is not None:
        return override
    text = os.environ.get(env)
    if text is None:
        return setting.default
    try:
        return setting.parse(text)
    except ValueError as e:
        raise ValueError(f"Invalid value for environment variable {env}: {text!r} "
                         f"({e}). Meaning: {setting.meaning}") from None


def markdown_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.env}` | `{s.default}` | {s.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        print(markdown_table())
