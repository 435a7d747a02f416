#!/usr/bin/env bash
# Generate the data, train the bundled Game of 24 model and evaluate it, all into OUTDIR.
#
#   bash training/game24/gpu_run.sh OUTDIR           # one CUDA GPU: 170 s of training, then two evaluations
#   bash training/game24/gpu_run.sh OUTDIR --smoke   # CPU, a few steps: checks the pipeline only
#
# OUTDIR gets: train.log, train_summary.json (with the data's SHA-256), data_sha256.txt,
# eval_val.json and eval_val.log (validation puzzles 850-899 and 1000-1049), eval_test.json and
# eval_test.log (test puzzles 900-999), and model.tar (the model directory, to unpack into
# thoughttree/models/). The two evaluations run at the same time on the one GPU.
# STEPS=N fixes the step count instead of the time budget (TRAIN_SECONDS, default 170).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || ( $# -eq 2 && "$2" != "--smoke" ) ]]; then
    echo "usage: bash training/game24/gpu_run.sh OUTDIR [--smoke]" >&2
    exit 2
fi
out=$1
smoke=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
model="$out/game24"

if [[ -n "$smoke" ]]; then
    train_args=(--steps 3 --batch-size 8 --warmup 2 --log-every 1 --device cpu)
    eval_args=(--device cpu --dtype float32 --limit 2 --samples 2 --batch-size 64)
elif [[ -n "${STEPS:-}" ]]; then
    train_args=(--steps "$STEPS")
    eval_args=()
else
    train_args=(--time-budget-s "${TRAIN_SECONDS:-170}" --warmup 200)
    eval_args=()
fi

start=$(date +%s)
"$python" "$root/training/game24/train.py" --out "$model" --summary "$out/train_summary.json" \
    "${train_args[@]}" 2>&1 | tee "$out/train.log"
"$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["data_sha256"])' \
    "$out/train_summary.json" > "$out/data_sha256.txt"
pids=()
for range in val test; do
    "$python" "$root/training/game24/evaluate.py" --model "$model" --range "$range" --out "$out/eval_$range.json" \
        "${eval_args[@]}" > "$out/eval_$range.log" 2>&1 &
    pids+=($!)
done
failed=0
for i in 0 1; do
    wait "${pids[$i]}" || failed=1
done
for range in val test; do
    echo "== evaluation on the $range range (eval_$range.log) =="
    cat "$out/eval_$range.log"
done
if (( failed )); then
    echo "an evaluation failed; see eval_val.log and eval_test.log in $out" >&2
    exit 1
fi
tar -C "$out" -cf "$out/model.tar" game24
rm -r "$model"
echo "done in $(( $(date +%s) - start ))s; files in $out:"
ls -l "$out"
