#!/usr/bin/env bash
# Installs requirements into a venv through one wheelhouse shared by every compat and wheel-check
# venv of this checkout, so that CI's minors and `make wheels` download each file once:
#
#   scripts/venv_install.sh VENV REQUIREMENT...
#
# `pip download` into the wheelhouse skips files already there; the install then reads the
# wheelhouse alone. pip's own HTTP cache is not relied on (it stays empty behind some indexes).
# TFX_COMPAT_WHEELHOUSE moves it (default build/compat/wheelhouse).
set -euo pipefail
VENV=${1:?usage: scripts/venv_install.sh VENV REQUIREMENT...}
shift
WHEELHOUSE=${TFX_COMPAT_WHEELHOUSE:-$(cd "$(dirname "$0")/.." && pwd)/build/compat/wheelhouse}
mkdir -p "$WHEELHOUSE"
PIP=("$VENV/bin/pip" --disable-pip-version-check)
nice "${PIP[@]}" download -q -d "$WHEELHOUSE" "$@"
nice "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" "$@"
