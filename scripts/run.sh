#!/usr/bin/env bash
# The main job: set everything up, build, and benchmark the built-in default
# target (the simulator, started in-process on a loopback port and driven over
# real HTTP) with a bundled workload of about a minute. Extra arguments go to
# tokenscope bench (e.g. --target http://host:8000 to measure a real server).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
out="runs/bench-$(date +%Y%m%d-%H%M%S)"
# The bundled workload (README.md): a chat service shaped like the Azure 2023
# conversation trace (lognormal prompts of mean 1,155 tokens and outputs of
# mean 211), 16 system prompts of 512 tokens shared by all users, Poisson
# arrivals at 12 req/s for 60 s (the first 5 s are warm-up), on Llama-3-8B and
# one H100, with an interactive SLO (TTFT 1 s and TPOT 100 ms at p99). The run
# directory gets report.html, the run's page (docs/report.md).
exec build/release/src/cli/tokenscope bench \
  --model llama-3-8b --gpu h100-sxm \
  --arrival poisson --rate 12 --duration-s 60 --warmup-s 5 \
  --input-len lognormal:1155:0.9:max=7000 --output-len lognormal:211:0.8:max=1000 \
  --prefix-groups 16 --prefix-tokens 512 --seed 1 \
  --slo ttft_ms=1000,tpot_ms=100,p=99 \
  --report --out "$out" "$@"
