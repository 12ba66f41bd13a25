#!/usr/bin/env bash
# The GPU check as ONE prepared call on a lent, offline GPU machine (the project's standing order: whenever a
# session is lent one, run gpu.sh and the CUDA tests, commit what it writes under benchmarks/results/<date>/).
#
#   bash benchmarks/device-call.sh                # on the GPU machine, from the checkout's root; writes to $OUT
#   bash benchmarks/device-call.sh --dry-run      # the same sequence on this CPU at toy size (no device-setup)
#
# Brought along (see ../shared/gpu/README.md for the offline machine): .whl/ (the wheels its Python lacks),
# data/processed/ (MNIST), device-setup.sh. Order, each part under its own time limit so a slow part never costs
# the rest, everything logged under $OUT:
#   1. the CUDA tests of the fused and graphed step (first: if the fused solve does not capture, nothing after
#      it is worth timing)                                          -> cuda_tests.log     (TESTS_LIMIT, 150 s)
#   2. benchmarks/gpu.sh: step bench (fused/unfused/floored, levers, K = 1..16 packing), ops and kernels per
#      step, the train slice, the fidelity probe, the summary       -> gpu_*.json, gpu_sh.log (GPU_SH_LIMIT, 330 s)
#   3. the packed entropic-WGAN MLP (Reshetova et al.) at K = 1, 16, 150 -> ewgan_packed.json (EWGAN_LIMIT, 60 s)
# About 9 minutes at most with the defaults, inside a 15-minute device budget that includes the machine's start.
set -uo pipefail

DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=${OUT:?device-call: set OUT to the folder the results go to}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[device-call $(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/device_call.log"; }

if (( DRY )); then
  PY=$REPO/.venv/bin/python
  GPU_SH=(bash benchmarks/gpu.sh --dry-run --out "$OUT")
  EWGAN=(--device cpu --ks 1 2 --steps 2)
else
  # shellcheck disable=SC1091
  . ./device-setup.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 3; }
  PY=python3
  nvidia-smi > "$OUT/nvidia.txt" 2>&1 || true
  GPU_SH=(bash benchmarks/gpu.sh --out "$OUT")
  EWGAN=(--device cuda --ks 1 16 150 --steps 20)
fi
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
say "python $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())')"

timeout "${TESTS_LIMIT:-150}" "$PY" -m pytest -q -p no:cacheprovider tests/test_ot_fused.py tests/test_fast_step.py \
  tests/test_batched_sweep.py -k "cuda or fused or compiled_generator" > "$OUT/cuda_tests.log" 2>&1
say "CUDA tests rc $?: $(tail -1 "$OUT/cuda_tests.log")"

timeout "${GPU_SH_LIMIT:-330}" "${GPU_SH[@]}" > "$OUT/gpu_sh.log" 2>&1
say "gpu.sh rc $? (124: stopped by its limit; what it finished is in $OUT)"

timeout "${EWGAN_LIMIT:-60}" "$PY" benchmarks/ewgan_packed.py "${EWGAN[@]}" --out "$OUT/ewgan_packed.json" \
  > "$OUT/ewgan_packed.log" 2>&1
say "packed MLP rc $?: $(tail -1 "$OUT/ewgan_packed.log")"
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
