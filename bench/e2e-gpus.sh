#!/usr/bin/env bash
# The end-to-end acceptance run (DESIGN.md section 9) spread over the GPUs of one machine:
# a shared queue of jobs, one (model, shape) each, longest first, one worker per GPU. A job
# runs stof first (bench/e2e.lua: default plan, the search with TUNE_S seconds, its resume,
# the tuned plan), then peers.py e2e for the same model and shape on the same GPU (SDPA in
# every mode, max-autotune included), then FlexAttention in FLEX_MODES. A job that would end
# after DEADLINE_S (from the start) is skipped and logged as such.
#   bash bench/e2e-gpus.sh NGPU [MODELS [SHAPES]]
#   bash bench/e2e-gpus.sh 4
# Needs build-gpu/ (make gpu-build) and .peers/peers.py (a copy of shared/bench/peers.py).
# Writes $OUT/e2e-stof.jsonl, $OUT/e2e-peers.jsonl, per-job logs and $OUT/progress.log, then
# the tables of bench/e2e_report.py. Workers start with setsid: they outlive a caller that
# returns early (wait.sh-style polling of progress.log then collects them). VERIFY="command"
# is run by GPU 0's worker before it takes a job (correctness checks before the timing, in
# the same run), its output in $OUT/verify.log.
set -u
ngpu=${1:?number of GPUs}
models=${2:-t5,llama,bert-large,bert-base,gpt2,vit}
shapes=${3:-16x2048,8x512,1x128}
out=${OUT:-/tmp/e2e}; mkdir -p "$out"
q=$out/.queue; mkdir -p "$q"; : > "$q/taken"; : > "$out/progress.log"; date +%s > "$q/t0"
: "${TUNE_S:=30}" "${DEADLINE_S:=1500}" "${MODES:=eager,default,reduce-overhead,max-autotune}"
: "${FLEX_MODES:=eager,default,reduce-overhead}"
export TUNE_S DEADLINE_S MODES FLEX_MODES
# the queue: every (model, shape) with stof and SDPA, then the FlexAttention jobs
{
  IFS=, read -ra ms <<< "$models"; IFS=, read -ra ss <<< "$shapes"
  for m in "${ms[@]}"; do for s in "${ss[@]}"; do echo "case $m $s"; done; done
  for m in "${ms[@]}"; do for s in "${ss[@]}"; do echo "flex $m $s"; done; done
} > "$q/jobs"
if [ "${E2E_WORKER:-}" = "" ]; then
  for g in $(seq 0 $((ngpu - 1))); do
    E2E_WORKER=$g OUT=$out setsid bash "$0" "$@" > "$out/worker$g.log" 2>&1 < /dev/null &
  done
  # wait for every worker to say it is idle, then the tables
  while [ "$(grep -c idle "$out/progress.log")" -lt "$ngpu" ]; do sleep 5; done
  cat "$out"/stof-*.jsonl > "$out/e2e-stof.jsonl" 2>/dev/null
  cat "$out"/peers-*.jsonl "$out"/flex-*.jsonl > "$out/e2e-peers.jsonl" 2>/dev/null
  python3 bench/e2e_report.py "$out/e2e-stof.jsonl" "$out/e2e-peers.jsonl"
  exit 0
fi
# a worker
g=$E2E_WORKER; t0=$(cat "$q/t0")
export CUDA_VISIBLE_DEVICES=$g STOF_CACHE_DIR=/tmp/stof-cache-$g TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$g PYTHONUNBUFFERED=1
log() { echo "$(( $(date +%s) - t0 )) gpu$g $*" >> "$out/progress.log"; }
if [ "$g" = 0 ] && [ -n "${VERIFY:-}" ]; then
  log "start verify"; bash -c "$VERIFY" > "$out/verify.log" 2>&1; log "end verify rc=$?"
fi
while true; do
  job=$(flock "$q/lock" bash -c 'n=$(wc -l < "$1/taken"); l=$(sed -n "$((n + 1))p" "$1/jobs"); [ -n "$l" ] && echo "$l" >> "$1/taken"; echo "$l"' _ "$q")
  [ -z "$job" ] && break
  read -r kind m s <<< "$job"
  # a rough cost: what the H100 run of the seventh session took per job (seconds)
  case $kind-$m in case-t5) est=420;; case-llama) est=300;; case-bert-large) est=240;; case-*) est=170;;
                   flex-t5) est=160;; flex-llama) est=120;; flex-*) est=80;; esac
  if (( $(date +%s) - t0 + est > DEADLINE_S )); then log "SKIP $kind $m $s"; continue; fi
  log "start $kind $m $s"
  if [ "$kind" = case ]; then
    timeout 400 build-gpu/stof run bench/e2e.lua "$m" "$s" bigbird 30 "$TUNE_S" "$out/tune-$m-$s.jsonl" \
      > "$out/stof-$m-$s.jsonl" 2> "$out/stof-$m-$s.err"
    timeout 900 python3 .peers/peers.py e2e --models "$m" --shapes "$s" --masks bigbird --attn sdpa \
      --modes "$MODES" --out "$out/peers-$m-$s.jsonl" > "$out/peers-$m-$s.log" 2>&1
  else
    timeout 900 python3 .peers/peers.py e2e --models "$m" --shapes "$s" --masks bigbird --attn flex \
      --modes "$FLEX_MODES" --out "$out/flex-$m-$s.jsonl" > "$out/flex-$m-$s.log" 2>&1
  fi
  log "end $kind $m $s rc=$?"
done
log idle
