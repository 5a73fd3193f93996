#!/usr/bin/env bash
# Installs every Debian package that tokenscope's build, tests and benchmarks
# need, and only those that are missing. Safe to run again (idempotent).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang libclang-rt-14-dev            # libFuzzer and the clang sanitizer runtimes
  libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 time                        # benchmark scripts, peak-memory measurement
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
