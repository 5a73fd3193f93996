#!/usr/bin/env bash
# Configures and builds one configuration into build/<name>.
#   scripts/build.sh release   optimised build with tests and benchmarks (g++)
#   scripts/build.sh asan      unit tests under AddressSanitizer + UBSan (clang)
#   scripts/build.sh tsan      the server's tests under ThreadSanitizer (g++)
#   scripts/build.sh fuzz      libFuzzer targets (clang)
# Further arguments name the targets to build (default: all; fuzz: fuzz_all).
# Debug information is line tables only (-g1): enough for stack traces,
# sanitizer reports and perf annotate, and a third less compile time than -g
# (rebuild with -DCMAKE_BUILD_TYPE=Debug to inspect variables in gdb). The
# ASan build is clang at -O0: clang compiles it in about two thirds of g++'s
# time (g++'s UBSan instrumentation is the slow part) and -O0 in about half
# of -O1's; its tests take about a minute more than at -O1.
# The TSan build is g++ at -O0: a third less build time than -O1 (246 s
# against about 370 s cold), its tests about 30 s longer (docs/testing.md).
# Unity builds (CMAKE_UNITY_BUILD, batches of 8 sources per target) take the
# shared headers' parse and template instantiation once per batch instead of
# once per source: about half the compile time of a cold build
# (docs/testing.md). TOKENSCOPE_UNITY=OFF builds source by source (quicker
# rebuilds after editing one file).
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-release}"
shift || true
targets=("$@")
[ "$config" = fuzz ] && [ ${#targets[@]} -eq 0 ] && targets=(fuzz_all)
jobs="${JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-2G}"
# Paths relative to the checkout, so a fresh clone elsewhere (CI) hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
case "$config" in
  release)
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG") ;;
  asan)
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only"
           -DTOKENSCOPE_SANITIZE=ON -DTOKENSCOPE_BENCH=OFF) ;;
  tsan)
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DTOKENSCOPE_TSAN=ON -DTOKENSCOPE_BENCH=OFF) ;;
  fuzz)
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DTOKENSCOPE_FUZZ=ON
           -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG"
           -DTOKENSCOPE_TESTS=OFF -DTOKENSCOPE_BENCH=OFF) ;;
  *) echo "usage: $0 release|asan|tsan|fuzz" >&2; exit 2 ;;
esac
flags+=(-DCMAKE_UNITY_BUILD="${TOKENSCOPE_UNITY:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
cmake -S . -B "build/$config" -G Ninja "${flags[@]}" > "build-$config.cmake.log" 2>&1 || { cat "build-$config.cmake.log"; exit 1; }
rm -f "build-$config.cmake.log"
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "build/$config" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "build/$config" -j "$jobs"
fi
