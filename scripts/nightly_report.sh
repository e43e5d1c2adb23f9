#!/usr/bin/env bash
# The early warning (`make tf-nightly`): the smoke set against the newest tf-nightly on PyPI, and a
# report of what breaks, with the private TensorFlow function or field involved, in
# build/compat/tfnightly/report.md. Never gates anything: exits 0 whatever broke.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=build/compat/tfnightly
mkdir -p "$WORK"
rm -f "$WORK/results.xml"
# A fresh tf-nightly each run (TFX_COMPAT_REFRESH=0 reuses the environment); its version is
# outside the tested range, so the version check only warns.
VENVS=${TFX_COMPAT_VENVS:-build/compat/venvs}
TFX_ALLOW_UNTESTED_TENSORFLOW=1 bash scripts/compat.sh nightly smoke 2>&1 | tee "$WORK/compat.log"
python3 scripts/nightly_report.py "$WORK" > "$WORK/report.md"
# The private surface on its own (no op libraries needed): what breaks even where the ops do not build.
{
    echo
    echo "## Private TensorFlow / Keras surface (scripts/private_surface_probe.py)"
    echo
    TFX_ALLOW_UNTESTED_TENSORFLOW=1 PYTHONPATH=$PWD TF_CPP_MIN_LOG_LEVEL=3 \
        "$VENVS/tfnightly/bin/python" scripts/private_surface_probe.py 2>/dev/null
} >> "$WORK/report.md"
cat "$WORK/report.md"
exit 0
