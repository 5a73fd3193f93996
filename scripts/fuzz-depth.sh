#!/usr/bin/env bash
# Fuzzing depth, outside CI: runs libFuzzer targets until each has executed
# RUNS inputs (default 10 million) or spent SECONDS_PER_TARGET (default 3600),
# JOBS targets at a time (default 1), starting from and growing the committed
# corpus (fuzz/corpus/TARGET; new inputs are merged back, minimised, with
# -merge=1) with the target's dictionary (fuzz/dict/TARGET.dict, or the
# format's dictionary it names). A crash is saved under fuzz/failures/ and
# fails the script. Prints a Markdown table (target, executions, seconds,
# executions per second, corpus files before and after, coverage features,
# result) for docs/reliability.md.
#   scripts/fuzz-depth.sh [TARGET...]     (default: every target)
#   RUNS=10000000 SECONDS_PER_TARGET=3600 JOBS=1 scripts/fuzz-depth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-10000000}"
budget="${SECONDS_PER_TARGET:-3600}"
jobs="${JOBS:-1}"
all=(trace_azure trace_mooncake trace_sharegpt trace_native catalog_yaml tokenizer hf_tokenizer length_spec
     http_request openai_request multipart sse chunk_parser workload_yaml response access_trace nccl_tests event_names exposition proc_files export_run)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
bash scripts/build.sh fuzz >/dev/null
bin=build/fuzz/fuzz
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

dict_of() {  # the dictionary of a target, if any
  case "$1" in
    trace_azure) echo fuzz/dict/csv.dict ;;
    trace_mooncake|trace_sharegpt|trace_native|openai_request|chunk_parser|response|hf_tokenizer) echo fuzz/dict/json.dict ;;
    catalog_yaml|workload_yaml|profile_yaml) echo fuzz/dict/yaml.dict ;;
    http_request) echo fuzz/dict/http.dict ;;
    sse) echo fuzz/dict/sse.dict ;;
    *) [ -f "fuzz/dict/$1.dict" ] && echo "fuzz/dict/$1.dict" || true ;;
  esac
}

one() {
  local t="$1" dict seconds start end execs feats before after result
  mkdir -p "fuzz/corpus/$t" "$work/$t/new" "$work/$t/artifacts"
  before=$(find "fuzz/corpus/$t" -type f | wc -l)
  dict=$(dict_of "$t")
  start=$(date +%s)
  result=ok
  if ! "$bin/fuzz_$t" -runs="$runs" -max_total_time="$budget" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 ${dict:+-dict="$dict"} -artifact_prefix="$work/$t/artifacts/" \
       "$work/$t/new" "fuzz/corpus/$t" > "$work/$t/log" 2>&1; then
    result="CRASH"
    mkdir -p fuzz/failures
    cp "$work/$t/artifacts/"* fuzz/failures/ 2>/dev/null || true
    tail -n 40 "$work/$t/log" >&2
  fi
  end=$(date +%s)
  seconds=$((end - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t/log" | grep -o '[0-9]*$' | tail -1)
  feats=$(grep -o 'ft: [0-9]*' "$work/$t/log" | tail -1 | grep -o '[0-9]*' || echo 0)
  # Keep what is new, minimised: merge the new inputs into the committed corpus.
  "$bin/fuzz_$t" -merge=1 ${dict:+-dict="$dict"} "fuzz/corpus/$t" "$work/$t/new" > "$work/$t/merge.log" 2>&1 || true
  after=$(find "fuzz/corpus/$t" -type f | wc -l)
  echo "| fuzz_$t | ${execs:-0} | $seconds | $(( ${execs:-0} / (seconds > 0 ? seconds : 1) )) | $before | $after | ${feats:-0} | $result |" \
    > "$work/$t.row"
  [ "$result" = ok ]
}

echo "fuzzing depth: up to $runs executions or $budget s per target, $jobs at a time ($(date -u +%Y-%m-%d), $(nproc) cores)"
echo
echo "| target | executions | seconds | exec/s | corpus before | corpus after | features | result |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  one "$t" & pids+=($!); names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    cat "$work/${names[0]}.row"
    pids=("${pids[@]:1}"); names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "$work/${names[$i]}.row"
done
exit $failed
