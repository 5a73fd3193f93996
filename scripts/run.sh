#!/usr/bin/env bash
# The main job: set everything up, build, and run tokenscope on the built-in
# default target with a bundled workload. Extra arguments go to tokenscope sim.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
out="runs/sim-$(date +%Y%m%d-%H%M%S)"
# The bundled workload (README.md): a chat service shaped like the
# Azure 2023 conversation trace (lognormal prompts of mean 1,155 tokens and
# outputs of mean 211), 16 system prompts of 512 tokens shared by all users,
# Poisson arrivals at 12 req/s for 5 minutes, on Llama-3-8B and one H100.
exec build/release/src/cli/tokenscope sim \
  --model llama-3-8b --gpu h100-sxm \
  --arrival poisson --rate 12 --duration-s 300 \
  --input-len lognormal:1155:0.9:max=7000 --output-len lognormal:211:0.8:max=1000 \
  --prefix-groups 16 --prefix-tokens 512 --seed 1 \
  --out "$out" "$@"
