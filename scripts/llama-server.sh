#!/usr/bin/env bash
# Builds llama.cpp's llama-server (a real peer for the black-box tests) from
# the source in ../shared/peers/llama.cpp and prints the binary's path on
# stdout (progress goes to stderr).
#   scripts/llama-server.sh
# shared/ is read-only, so the source is copied to
#   ${TOKENSCOPE_PEERS_CACHE:-$HOME/.cache/tokenscope}/llama.cpp-<commit>/src
# and built into .../build with Ninja and ccache (the cache build.sh uses).
# A finished build for the same commit and the same source is reused at once;
# a build that failed or was interrupted is redone from a fresh copy.
# TOKENSCOPE_LLAMA_SRC overrides the source directory.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "llama-server.sh: $*" >&2; exit 1; }

src="${TOKENSCOPE_LLAMA_SRC:-$(pwd)/../shared/peers/llama.cpp}"
[ -f "$src/CMakeLists.txt" ] && [ -f "$src/examples/server/server.cpp" ] ||
  die "no llama.cpp source at $src (expected ../shared/peers/llama.cpp; set TOKENSCOPE_LLAMA_SRC)"
src="$(cd "$src" && pwd)"
for tool in cmake ninja c++ flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (bash scripts/setup.sh installs it)"
done

# The commit: from git when the source is a checkout, else from the README
# beside it (../shared/peers/README.md names it).
commit=""
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -e "$src/.git" ]; then
  commit="$(git -C "$src" rev-parse HEAD)"
elif [ -f "$src/../README.md" ]; then
  commit="$(tr -s '\n' ' ' < "$src/../README.md" | grep -oE 'commit[[:space:]]+[0-9a-f]{40}' | head -1 | awk '{print $2}' || true)"
fi
[ -n "$commit" ] || die "cannot tell the llama.cpp commit of $src (no .git, no 'commit <sha>' in $src/../README.md)"

# A hash of the source tree's names and contents: a changed source under the
# same commit name is rebuilt, never served stale.
source_hash="$(cd "$src" && find . -type f ! -path './.git/*' -print0 | LC_ALL=C sort -z |
               xargs -0 sha256sum | sha256sum | cut -c1-16)"

cache="${TOKENSCOPE_PEERS_CACHE:-$HOME/.cache/tokenscope}"
dir="$cache/llama.cpp-$commit"
bin="$dir/build/bin/llama-server"
stamp="$dir/built.stamp"
mkdir -p "$dir"

# One build at a time per cache directory (two worktrees may ask at once).
exec 9>"$dir/.lock"
flock 9

if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$source_hash" ]; then
  echo "$bin"
  exit 0
fi

echo "llama-server.sh: building llama-server $commit in $dir" >&2
start=$(date +%s)
rm -rf "$dir/src" "$dir/build" "$stamp"
cp -r "$src" "$dir/src.tmp"
chmod -R u+w "$dir/src.tmp"  # the copy keeps shared/'s read-only modes
mv "$dir/src.tmp" "$dir/src"

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-2G}"
# Paths relative to the cache directory, so another cache location (CI) hits.
export CCACHE_BASEDIR="$dir"
export CCACHE_NOHASHDIR=true
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

log="$dir/build.log"
{
  cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_CCACHE=OFF "${launcher[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_LLGUIDANCE=OFF -DLLAMA_BUILD_TESTS=OFF -DGGML_NATIVE=OFF &&
  cmake --build "$dir/build" -j "${JOBS:-$(nproc)}" --target llama-server
} > "$log" 2>&1 || { tail -40 "$log" >&2; die "build failed (full log: $log)"; }

[ -x "$bin" ] || die "the build finished but $bin is missing (log: $log)"
"$bin" --version > /dev/null 2>&1 || die "$bin does not run ('$bin --version' failed)"
echo "$source_hash" > "$stamp"
echo "llama-server.sh: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
