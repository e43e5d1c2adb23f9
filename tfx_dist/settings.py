"""Every tfx_dist setting, declared once.

Each setting has one environment variable, a default and a meaning. Code reads a
setting through :func:`get`; constructor arguments override the environment.
The README's settings table is generated from ``SETTINGS``
(``python -m tfx_dist.settings --update-readme README.md``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Setting:
    env: str
    default: object
    parse: Callable[[str], object]
    meaning: str
    # Former names of the variable, still read (with a warning, once per
    # process) when the current one is not set.
    deprecated: tuple[str, ...] = ()


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {text!r}")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return text.lower()
    return parse


SETTINGS = {
    setting.env: setting
    for setting in (
        Setting("TFX_LOCAL_FUSION_BYTES", 4 << 20, int,
                "Local fusion (devices of one process): the fused reductions split a "
                "gradient list into buckets of about this size and reduce each in one pass. "
                "Formerly `TFX_FUSION_BUCKET_BYTES`.",
                deprecated=("TFX_FUSION_BUCKET_BYTES",)),
        Setting("TFX_CPU_ISA", "auto", _choice("auto", "baseline"),
                "Instructions of the CPU reduction kernel (TfxFusedReduce): `auto` uses "
                "AVX2 where the CPU has it; `baseline` keeps to what the library was built "
                "for (to compare, or to rule the AVX2 path out). Read once per process."),
        Setting("TFX_JOB_SECRET", "", str,
                "Secret shared by the processes of one job (tfx-dist-run sets a fresh "
                "`secrets.token_hex(32)` per job); empty when no launcher set one."),
        # Cross-process collective runtime (tfx_dist.comm).
        Setting("TFX_TIMEOUT_S", 300.0, float,
                "Seconds any wait of the collective runtime (rendezvous, negotiation, "
                "one collective) may take before failing with an error naming the peer."),
        # The runtime's options (TFX_TIMEOUT_S, TFX_COMM_FUSION_BYTES,
        # TFX_CYCLE_TIME_MS, TFX_SHM, TFX_CHUNK_BYTES, TFX_HIERARCHICAL, TFX_HIERARCHICAL_MIN_STRIPE_BYTES)
        # have their defaults here
        # only: tfx_dist.comm passes every one to the C API explicitly, since
        # these are the ones users read (README table) and override.
        Setting("TFX_COMM_FUSION_BYTES", 64 << 20, int,
                "Cross-process fusion: all-reduce requests ready in the same "
                "negotiation cycle are packed into buckets of at most this many bytes. "
                "Formerly `TFX_FUSION_THRESHOLD_BYTES`.",
                deprecated=("TFX_FUSION_THRESHOLD_BYTES",)),
        Setting("TFX_CYCLE_TIME_MS", 0.0, float,
                "Minimum time between two negotiation cycles of the cross-process "
                "runtime; larger values fuse more requests at the cost of latency."),
        Setting("TFX_COMPRESSION", "none", str,
                "Wire compression for float32 cross-process all-reduce: none, float16 "
                "or bfloat16."),
        Setting("TFX_SHM", True, _bool,
                "Use shared memory between processes on the same host (else TCP)."),
        Setting("TFX_PARTIAL_BATCH_SYNC", "auto", _choice("auto", "always"),
                "Multi-worker input: `auto` skips TensorFlow's per-step all-reduce of "
                "\"this worker still has data\" when every worker provably reads as many "
                "batches as the others (DATA or OFF sharding, or AUTO without files); "
                "`always` keeps it."),
        Setting("TFX_DIRECT_INPUT", "auto", _choice("auto", "off"),
                "Input of every strategy: `auto` lets a worker whose replicas all run on "
                "its host CPU iterate its dataset directly, one element per replica in "
                "order, instead of through TensorFlow's multi-device iterator (a second "
                "pipeline with prefetch and autotuning threads per device, there only to "
                "move elements to the memory they are already in); `off` keeps the "
                "multi-device iterator."),
        Setting("TFX_HIERARCHICAL", "auto", _choice("auto", "on", "off"),
                "Cross-process all-reduce through hosts: reduce within each host "
                "(shared memory), run the ring between hosts (local rank i of every "
                "host over 1/L of the buffer), then share the result within each host. "
                "`auto` does when there are two hosts or more and one has several "
                "processes, for buckets of at least TFX_HIERARCHICAL_MIN_STRIPE_BYTES per "
                "process of a host; `on` whenever there is more than one process; `off` keeps "
                "the flat ring (whose order follows the hosts in every mode)."),
        Setting("TFX_TIMELINE", "", str,
                "Timeline: a Chrome trace (chrome://tracing, Perfetto) of every collective "
                "of the cross-process runtime, one file per rank: `%r` in the path is "
                "replaced by the rank; without it rank 0 writes the path as given and rank r "
                "`<stem>.rank<r><ext>` (docs/timeline.md). Empty: no timeline. "
                "`HOROVOD_TIMELINE` sets it."),
        Setting("TFX_TIMELINE_MARK_CYCLES", False, _bool,
                "Timeline: also mark each negotiation cycle that ran collectives "
                "(`HOROVOD_TIMELINE_MARK_CYCLES` sets it)."),
        Setting("TFX_HIERARCHICAL_MIN_STRIPE_BYTES", 2 << 10, int,
                "Under TFX_HIERARCHICAL=auto, an all-reduce bucket goes through hosts only "
                "when each process of the widest host carries at least this many bytes of it "
                "across (the bucket divided by the processes per host); smaller buckets take "
                "the flat ring, where one latency-bound phase beats three (measured on 2 "
                "simulated hosts: BENCHMARKS.md)."),
        Setting("TFX_CHUNK_BYTES", 128 << 10, int,
                "Pipelining granularity of the ring collectives: a received chunk is "
                "forwarded as soon as it has been reduced."),
    )
}


def get(env: str, override: object = None) -> object:
    """Returns the value of setting ``env``: ``override`` if given, else the environment, else the default."""
    setting = SETTINGS[env]
    if override is not None:
        return override
    text = os.environ.get(env)
    for old in setting.deprecated:
        if text is not None:
            break
        text = os.environ.get(old)
        if text is not None:
            _warn_deprecated(old, env)
            env = old
    if text is None:
        return setting.default
    try:
        return setting.parse(text)
    except ValueError as e:
        raise ValueError(f"Invalid value for environment variable {env}: {text!r} "
                         f"({e}). Meaning: {setting.meaning}") from None


_warned: set = set()


def _warn_deprecated(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"The environment variable {old} is deprecated; set {new} instead "
                      f"({old} is read while {new} is not set).", FutureWarning, stacklevel=3)


def markdown_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.env}` | `{s.default}` | {s.meaning} |")
    return "\n".join(rows)


_BEGIN, _END = "<!-- settings:begin -->", "<!-- settings:end -->"


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between the settings markers replaced by the table."""
    head, rest = readme.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    return f"{head}{_BEGIN}\n{markdown_table()}\n{_END}{tail}"


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        print(markdown_table())
    elif "--update-readme" in sys.argv:
        path = sys.argv[sys.argv.index("--update-readme") + 1]
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(readme_with_table(text))
    else:
        sys.exit("usage: python -m tfx_dist.settings --markdown | --update-readme README.md")
