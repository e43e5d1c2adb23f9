"""Every tfx_dist setting, declared once.

Each setting has one environment variable, a default and a meaning. Code reads a
setting through :func:`get`; constructor arguments override the environment.
The README's settings table is generated from ``SETTINGS``
(``python -m tfx_dist.settings --update-readme README.md``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings


@dataclasses.dataclass(frozen=True)
class Setting:
    env: str
    default: object
    parse: _Parser
    meaning: str
    # Former names of the variable, still read (with a warning, once per
    # process) when the current one is not set.
    deprecated: tuple[str, ...] = ()


class _Parser:
    """Turns a variable's text into its value, or raises ValueError saying
    what is allowed. ``check`` validates a value given in code (a
    constructor argument) by the same rule; ``bad`` holds values that must be
    refused (tests/test_settings.py tries each, for every setting)."""

    allowed = ""
    bad: tuple = ()

    def __call__(self, text: str):
        raise NotImplementedError

    def check(self, value):
        return self(str(value))


class _Number(_Parser):
    """An int or float in [low, high] (``low_open``: low itself excluded), finite."""

    def __init__(self, kind, low, high=None, low_open=False):
        self.kind, self.low, self.high, self.low_open = kind, low, high, low_open
        self.word = "an integer" if kind is int else "a finite number"
        above = f"> {low}" if low_open else f">= {low}"
        self.allowed = f"{self.word} {above}" + (
            "" if high is None else f" and <= {high}" if kind is int else f" and <= {high:g}")
        bad = ["lots", "", str(low - 1)] + (["1.5"] if kind is int else ["nan", "inf", "-inf"])
        if low_open:
            bad.append(str(low))
        if high is not None:
            bad.append(str(high * 10))
        self.bad = tuple(bad)

    def __call__(self, text: str):
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise ValueError(f"not {self.word}") from None
        self._in_range(value)
        return value

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"not a number: {type(value).__name__}")
        if self.kind is int and value != int(value):
            raise ValueError("not an integer")
        value = self.kind(value) if math.isfinite(value) else value
        self._in_range(value)
        return value

    def _in_range(self, value):
        if not math.isfinite(value):
            raise ValueError("not finite")
        if value < self.low or (self.low_open and value == self.low):
            raise ValueError("too small")
        if self.high is not None and value > self.high:
            raise ValueError("too large")


class _Bool(_Parser):
    # An empty value is refused rather than read as false or as the default:
    # it is what an unset shell or template variable gives (TFX_SHM=$UNSET),
    # and either reading would silently change the job; "unset" is the way
    # to ask for the default.
    allowed = "1/0, true/false, yes/no, on/off (unset for the default)"
    bad = ("maybe", "2", "tru", "", " ")

    def __call__(self, text: str) -> bool:
        if text.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if text.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError("an empty value" if not text.strip() else "not a boolean")

    def check(self, value):
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        return self(str(value))


class _Choice(_Parser):
    def __init__(self, *choices: str):
        self.choices = choices
        self.allowed = "one of " + ", ".join(choices)
        self.bad = ("", "bogus", choices[0] + "x")

    def __call__(self, text: str) -> str:
        if text.lower() not in self.choices:
            raise ValueError("not a choice")
        return text.lower()


class _Text(_Parser):
    """Printable text (a secret), at most 4096 characters."""

    allowed = "printable text (no control characters), at most 4096 characters"
    bad = ("tab\there", "new\nline", "x" * 4097)

    def __call__(self, text: str) -> str:
        if len(text) > 4096 or not text.isprintable():
            raise ValueError("not allowed")
        return text


# Longer than any job should wait for one thing: also keeps deadlines far from
# the clocks' overflow (TFX_TIMEOUT_S=inf used to raise OverflowError).
_MAX_TIMEOUT_S = 1e7


SETTINGS = {
    setting.env: setting
    for setting in (
        Setting("TFX_LOCAL_FUSION_BYTES", 4 << 20, _Number(int, 1, 1 << 40),
                "Local fusion (devices of one process): the fused reductions split a "
                "gradient list into buckets of about this size and reduce each in one pass. "
                "Formerly `TFX_FUSION_BUCKET_BYTES`.",
                deprecated=("TFX_FUSION_BUCKET_BYTES",)),
        Setting("TFX_CPU_ISA", "auto", _Choice("auto", "baseline"),
                "Instructions of the CPU reduction kernel (TfxFusedReduce): `auto` uses "
                "AVX2 where the CPU has it; `baseline` keeps to what the library was built "
                "for (to compare, or to rule the AVX2 path out). Read once per process."),
        Setting("TFX_JOB_SECRET", "", _Text(),
                "Secret shared by the processes of one job (tfx-dist-run sets a fresh "
                "`secrets.token_hex(32)` per job); empty when no launcher set one."),
        # Cross-process collective runtime (tfx_dist.comm).
        Setting("TFX_TIMEOUT_S", 300.0, _Number(float, 0, _MAX_TIMEOUT_S, low_open=True),
                "Seconds any wait of the collective runtime (rendezvous, negotiation, "
                "one collective) may take before failing with an error naming the peer."),
        # The runtime's options (TFX_TIMEOUT_S, TFX_COMM_FUSION_BYTES,
        # TFX_CYCLE_TIME_MS, TFX_SHM, TFX_CHUNK_BYTES, TFX_HIERARCHICAL, TFX_HIERARCHICAL_MIN_STRIPE_BYTES)
        # have their defaults here
        # only: tfx_dist.comm passes every one to the C API explicitly, since
        # these are the ones users read (README table) and override.
        Setting("TFX_COMM_FUSION_BYTES", 64 << 20, _Number(int, 0, 1 << 40),
                "Cross-process fusion: all-reduce (and all-to-all) requests ready in the same "
                "negotiation cycle are packed into buckets of at most this many bytes. "
                "Formerly `TFX_FUSION_THRESHOLD_BYTES`.",
                deprecated=("TFX_FUSION_THRESHOLD_BYTES",)),
        Setting("TFX_ALLTOALL_FUSION", True, _Bool(),
                "All-to-alls ready in the same negotiation cycle share one exchange, within "
                "TFX_COMM_FUSION_BYTES (HybridStrategy's tables' forward exchanges among them); "
                "and HybridStrategy sends the gradient rows of all its sharded tables in one "
                "all-to-all (ids, one for rows) per step. 0: one exchange per tensor and per table."),
        # At most a second: every collective waits up to one cycle, so a
        # minute (accepted before) stalled each of them for a minute.
        Setting("TFX_CYCLE_TIME_MS", 0.0, _Number(float, 0, 1000),
                "Minimum time between two negotiation cycles of the cross-process "
                "runtime (0-1000 ms); larger values fuse more requests at the cost of latency."),
        Setting("TFX_COMPRESSION", "none", _Choice("none", "float16", "bfloat16"),
                "Wire compression for float32 cross-process all-reduce: none, float16 "
                "or bfloat16."),
        Setting("TFX_SHM", True, _Bool(),
                "Use shared memory between processes on the same host (else TCP)."),
        Setting("TFX_WIRE_PROTECTION", "integrity", _Choice("none", "integrity", "encrypt"),
                "Protection of the TCP connections (collectives' data and control, "
                "parameter-server service) after the "
                "authenticated handshake (AES-256-GCM, a key per connection and direction "
                "derived from the job secret and the handshake's nonces, frames numbered): "
                "`integrity` authenticates every frame (payload in clear), `encrypt` also "
                "hides it, `none` sends plain bytes. A changed, dropped, reordered or "
                "replayed frame is an error naming the peer. Shared memory needs none. "
                "Costs: BENCHMARKS.md."),
        Setting("TFX_PARTIAL_BATCH_SYNC", "auto", _Choice("auto", "always"),
                "Multi-worker input: `auto` skips TensorFlow's per-step all-reduce of "
                "\"this worker still has data\" when every worker provably reads as many "
                "batches as the others (DATA or OFF sharding, or AUTO without files); "
                "`always` keeps it."),
        Setting("TFX_DIRECT_INPUT", "auto", _Choice("auto", "off"),
                "Input of every strategy: `auto` lets a worker whose replicas all run on "
                "its host CPU iterate its dataset directly, one element per replica in "
                "order, instead of through TensorFlow's multi-device iterator (a second "
                "pipeline with prefetch and autotuning threads per device, there only to "
                "move elements to the memory they are already in); `off` keeps the "
                "multi-device iterator."),
        Setting("TFX_HIERARCHICAL", "auto", _Choice("auto", "on", "off"),
                "Cross-process all-reduce through hosts: reduce within each host "
                "(shared memory), run the ring between hosts (local rank i of every "
                "host over 1/L of the buffer), then share the result within each host. "
                "`auto` does when there are two hosts or more and one has several "
                "processes (for buckets of at least TFX_HIERARCHICAL_MIN_STRIPE_BYTES per "
                "process of a host); `on` whenever there is more than one process; `off` keeps "
                "the flat ring (whose order follows the hosts in every mode)."),
        Setting("TFX_TIMELINE", "", _Text(),
                "Timeline: a Chrome trace (chrome://tracing, Perfetto) of every collective "
                "of the cross-process runtime, one file per rank: `%r` in the path is "
                "replaced by the rank; without it rank 0 writes the path as given and rank r "
                "`<stem>.rank<r><ext>` (docs/timeline.md). Empty: no timeline. "
                "`HOROVOD_TIMELINE` sets it."),
        Setting("TFX_TIMELINE_MARK_CYCLES", False, _Bool(),
                "Timeline: also mark each negotiation cycle that ran collectives "
                "(`HOROVOD_TIMELINE_MARK_CYCLES` sets it)."),
        Setting("TFX_HIERARCHICAL_MIN_STRIPE_BYTES", 0, _Number(int, 0, 1 << 40),
                "Under TFX_HIERARCHICAL=auto, an all-reduce bucket goes through hosts only "
                "when each process of the widest host carries at least this many bytes of it "
                "across (the bucket divided by the processes per host); smaller buckets take "
                "the flat ring. 0: every bucket goes through hosts, which measured never "
                "slower on 2 simulated hosts x 2 and x 4, 4 KiB to 64 MiB (BENCHMARKS.md); "
                "raise it where many processes share few cores and small buckets lose."),
        Setting("TFX_HYBRID_SHARD_MIN_BYTES", 4 << 20, _Number(int, 0, 1 << 50),
                "HybridStrategy: a `ShardedEmbedding` table whose rows take at least this "
                "many bytes (input_dim * output_dim * 4) is sharded over the workers; a "
                "smaller one is replicated on every worker (its gradient all-reduced). A "
                "layer's `placement=` argument overrides the rule."),
        # Preemption and resume (tfx_dist.fault_tolerance).
        Setting("TFX_CHECKPOINT_DIR", "", _Text(),
                "Preemption and resume: the checkpoint directory of `tfx_dist.BackupAndRestore` / "
                "`tfx_dist.fault_tolerance.StepCheckpoint` when none is given in code "
                "(`ckpt-<step>/` folders and `LATEST.json`, docs/reliability.md)."),
        Setting("TFX_PREEMPTION_GRACE_S", 20.0, _Number(float, 0, 3600, low_open=True),
                "Preemption: seconds from a SIGTERM to the end of the worker's save; a worker "
                "still saving then exits with 128 + the signal (the previous checkpoint stays "
                "the one to resume from). Below Kubernetes's default 30 s grace period."),
        Setting("TFX_PREEMPTION_CHECK_STEPS", 1, _Number(int, 1, 1 << 30),
                "Preemption: the workers agree whether to stop every this many steps (one "
                "all-reduce of an int32 per check)."),
        Setting("TFX_RESTART_COUNT", 0, _Number(int, 0, 1 << 30),
                "Set by `tfx-dist-run` in each worker: 0 in a job's first run, then 1, 2, ... after "
                "each restart (on top of an engine's own count, e.g. SLURM_RESTART_COUNT)."),
        Setting("TFX_CHUNK_BYTES", 128 << 10, _Number(int, 1, 1 << 40),
                "Pipelining granularity of the ring collectives: a received chunk is "
                "forwarded as soon as it has been reduced."),
        # Elastic jobs (tfx_dist.elastic, tfx-dist-run --elastic).
        Setting("TFX_ELASTIC_DRIVER", "", _Text(),
                "Set by `tfx-dist-run --elastic` in each worker: `host:port` of the elastic driver "
                "that says each generation's members (empty: no driver; `membership.reset()` then "
                "rebuilds the communicator with the same members)."),
        Setting("TFX_ELASTIC_WORKER", "", _Text(),
                "Set by `tfx-dist-run --elastic` in each worker and parameter server: the name the "
                "elastic driver knows this process by (`w0`, ..., `ps0`, ...)."),
        Setting("TFX_ALLOW_UNTESTED_TENSORFLOW", False, _Bool(),
                "Run on a TensorFlow or Keras outside the tested range with a warning instead of "
                "`UnsupportedTensorFlowError` (the tf-nightly report uses it; results unchecked)."),
    )
}


def get(env: str, override: object = None) -> object:
    """Returns the value of setting ``env``: ``override`` if given, else the
    environment, else the default. A value outside what the setting allows
    (type, range, finite) is one ValueError naming the variable, the value and
    what is allowed, whether it came from the environment or from code."""
    setting = SETTINGS[env]
    if override is not None:
        try:
            return setting.parse.check(override)
        except ValueError as e:
            raise ValueError(_invalid(f"Invalid value for {env} (given in code)", override, setting,
                                      e)) from None
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
        raise ValueError(_invalid(f"Invalid value for environment variable {env}", text, setting,
                                  e)) from None


def _invalid(what: str, value, setting: Setting, why: ValueError) -> str:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "...'"
    return (f"{what}: {shown} ({why}); allowed: {setting.parse.allowed}. "
            f"Meaning: {setting.meaning}")


_warned: set = set()


def _warn_deprecated(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"The environment variable {old} is deprecated; set {new} instead "
                      f"({old} is read while {new} is not set).", FutureWarning, stacklevel=3)


def markdown_table() -> str:
    rows = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.env}` | `{s.default}` | {s.parse.allowed} | {s.meaning} |")
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
