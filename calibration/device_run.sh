#!/usr/bin/env bash
# One prepared GPU run (issue 48, point 8), within 8 minutes of wall time:
#   1. the harness (python -m calibration.run_gpu): copy, KV write, paged + contiguous attention,
#      GEMMs, in priority order, on 45 % of the budget;
#   2. the decoder-layer suite (python -m calibration.layer_suite): a Llama-style layer over our
#      paged kernel in CUDA graphs, Llama-3.1-8B TP 1 and 70B TP 4 / TP 8 shards; then the harness
#      again (it resumes) on whatever time is left;
#   3. the summary (python -m calibration.device_summary): paging overhead at block 16 and the
#      paged kernel's achieved bandwidth -> summary.json; stage exit codes -> meta.json.
# Everything goes to one folder (default calibration/data/<gpu>/). Rerunning resumes.
#
#   calibration/device_run.sh [--out DIR] [--budget-s 450] [--reps N] [--allow-cpu]
#
# --budget-s: wall seconds for the whole run; stages stop starting points at their share and are
# killed 20 s past it at the latest (450 -> at most 470 s). --allow-cpu: tests only, tiny grid
# under the Triton interpreter, labelled cpu, into a temporary folder unless --out is given.
# Python: $PYTHON, else python3.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() { echo "usage: calibration/device_run.sh [--out DIR] [--budget-s S] [--reps N] [--allow-cpu]" >&2; }
OUT="" BUDGET=450 REPS=0 CPU=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { usage; exit 2; }; OUT="$2"; shift 2 ;;
    --budget-s) [ $# -ge 2 ] || { usage; exit 2; }; BUDGET="$2"; shift 2 ;;
    --reps) [ $# -ge 2 ] || { usage; exit 2; }; REPS="$2"; shift 2 ;;
    --allow-cpu) CPU="--allow-cpu"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "device_run.sh: unknown argument $1" >&2; usage; exit 2 ;;
  esac
done
for v in "$BUDGET" "$REPS"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "device_run.sh: --budget-s and --reps take whole seconds / counts, got $v" >&2; exit 2; }
done
[ "$BUDGET" -ge 60 ] || { echo "device_run.sh: --budget-s $BUDGET is too short (60 at least)" >&2; exit 2; }

PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$SECONDS
HARD=$((BUDGET + 20))   # nothing runs past this many seconds after START
elapsed() { echo $((SECONDS - START)); }

if [ -n "$CPU" ]; then  # (the Python side turns on TRITON_INTERPRET only when there is no GPU)
  [ -n "$OUT" ] || OUT="$(mktemp -d "${TMPDIR:-/tmp}/kvsim-device-run-cpu.XXXXXX")"
fi
if [ -z "$OUT" ]; then
  GPU="$("$PY" -c 'import torch
from calibration.run_gpu import gpu_key
p = torch.cuda.get_device_properties(0)
print(gpu_key(p.name, p.total_memory / 1e9))')" || { echo "device_run.sh: no CUDA GPU (--allow-cpu for a test run)" >&2; exit 2; }
  OUT="calibration/data/$GPU"
fi
echo "device run -> $OUT (budget ${BUDGET}s, hard limit ${HARD}s)"

# 1. harness, first pass: about 45 % of the budget, most useful points first
H=$((BUDGET * 45 / 100 - $(elapsed))); [ "$H" -ge 1 ] || H=1
t=$SECONDS
timeout -k 5 $((H + 40)) "$PY" -m calibration.run_gpu --out "$OUT" --budget-s "$H" --reps "$REPS" $CPU
RC_H=$? S_H=$((SECONDS - t))
if [ "$RC_H" -eq 2 ]; then exit 2; fi  # refused (no GPU, another GPU's folder, calibration/data on CPU)

# 2. layer suite: may use the rest (less 15 s for the summary); it usually finishes early
stage() {  # NAME MODULE: run a stage on what is left; sets RC_<NAME> and S_<NAME>
  local left=$((BUDGET - 15 - $(elapsed))) kill=$((HARD - 5 - $(elapsed))) t=$SECONDS rc=125
  if [ "$left" -gt 0 ] && [ "$kill" -gt 0 ]; then
    timeout -k 3 "$kill" "$PY" -m "$2" --out "$OUT" --budget-s "$left" --reps "$REPS" $CPU
    rc=$?
  else
    echo "$2 not started: budget spent"
  fi
  printf -v "RC_$1" %s "$rc"; printf -v "S_$1" %s $((SECONDS - t))
}
stage L calibration.layer_suite

# 2b. harness, second pass: resumes on whatever time the layer suite left
RC_R=125 S_R=0
if "$PY" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("harness", {}).get("not_run", 1) else 1)' "$OUT/meta.json"; then
  stage R calibration.run_gpu
fi

# 3. summary (standard library only; a second or less)
"$PY" -m calibration.device_summary "$OUT" --budget-s "$BUDGET" \
  --stage "harness=$RC_H:$S_H" --stage "layer_suite=$RC_L:$S_L" \
  --stage "harness_resume=$RC_R:$S_R" || exit 1
echo "device run done in $(elapsed)s: $OUT (meta.json, summary.json, *.csv)"
if [ -z "$CPU" ]; then
  echo "next: commit $OUT, then: kvsim calibrate fit $OUT"
fi
for rc in "$RC_H" "$RC_L" "$RC_R"; do
  case "$rc" in 0|124|125|137) ;; *) exit 1 ;; esac  # budget kills still leave data
done
exit 0
