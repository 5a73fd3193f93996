#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time, two at a time.
#   fuzz/run.sh BUILD_DIR SECONDS
# Seeds: the small hand-written corpora in fuzz/corpus, plus the first rows of
# the public traces in ../shared/traces when they are present (copied to a
# temporary folder, never into the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir="$1"
seconds="${2:-30}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
shared="../shared/traces"
for t in trace_azure trace_mooncake trace_sharegpt trace_native catalog_yaml tokenizer hf_tokenizer gguf_tokenizer length_spec http_request response_reader openai_request multipart sse chunk_parser workload_yaml response access_trace nccl_tests event_names json_schema openapi task_replay profile_yaml exposition proc_files export_run report_run thresholds_yaml check_run activations run_cache kernels shard grid_yaml pools_yaml; do
  mkdir -p "$work/$t"
  cp fuzz/corpus/$t/* "$work/$t/" 2>/dev/null || true
done
if [ -d "$shared" ]; then
  { printf '\0'; head -c 4000 "$shared/AzureLLMInferenceTrace_conv.csv"; } > "$work/trace_azure/shared_head"
  { printf '\0'; head -n 20 "$shared/conversation_trace.jsonl"; } > "$work/trace_mooncake/shared_head"
  { printf '\0'; head -c 3000 "$shared/ShareGPT_V3_filtered_500.json"; echo '"}]}]'; } > "$work/trace_sharegpt/shared_head"
fi
# The canonical mapping builds its expositions from raw bytes: seeds from its own corpus only.
mkdir -p "$work/canonical" && { cp fuzz/corpus/canonical/* "$work/canonical/" 2>/dev/null || true; }
failed=0
run_one() {
  local t="$1"
  mkdir -p "$work/artifacts-$t"
  if ! "$bin_dir/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/artifacts-$t/" "$work/$t" > "$work/$t.log" 2>&1; then
    echo "FUZZ FAILURE in $t:"; tail -n 60 "$work/$t.log"
    mkdir -p fuzz/failures && cp "$work/artifacts-$t/"* fuzz/failures/ 2>/dev/null || true
    return 1
  fi
  echo "fuzz_$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$') runs, no failure"
}
targets=(trace_azure trace_mooncake trace_sharegpt trace_native catalog_yaml tokenizer hf_tokenizer gguf_tokenizer length_spec http_request response_reader
         openai_request multipart sse chunk_parser workload_yaml response access_trace nccl_tests event_names json_schema openapi task_replay profile_yaml exposition proc_files export_run report_run thresholds_yaml check_run activations run_cache kernels shard grid_yaml pools_yaml)
pids=()
targets+=(canonical)
for t in "${targets[@]}"; do
  run_one "$t" & pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed
