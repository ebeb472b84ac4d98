#!/usr/bin/env bash
# Hearth on a real NVIDIA GPU: one prepared check that prints ONE JSON line on stdout.
#
#   bash scripts/gpu_check.sh prepare [KIT]   # here, with PyPI: fills KIT (default .gpukit/)
#   bash scripts/gpu_check.sh [KIT]           # on the GPU machine: no network needed
#
# The GPU machine is taken to have nvcc 13, CMake, ninja, torch (CUDA) and nvidia-smi, and nothing
# of Hearth's but this working tree. KIT carries the rest: llama-cpp-python's source without the
# vendored models/docs/tests (~10 MB), the two pure-Python wheels that machine lacks, and models/
# (the bundled SmolLM2 GGUF; the Qwen2.5-Coder 0.5B/1.5B Q4_K_M pair when `python -m engine
# models fetch-bench-pair` has assembled it here; a model left out is reported as skipped).
# Keep KIT out of git: echo /.gpukit/ >> .git/info/exclude
#
# There, llama.cpp is compiled for the card's own architecture only (compute capability from
# nvidia-smi; a few minutes on 16 cores), then scripts/gpu_check.py measures with every layer
# on the GPU: runtime and device, decode tok/s and roofline fraction (model bytes x tok/s over
# the card's measured copy bandwidth) for the bundled model and the 1.5B, prefill tok/s, prefix
# cache warm/cold, the exact and fast profiles (speed, batch invariance), speculative speedup (0.5B
# draft and n-gram, with identical), the planner's GPU figure against NVML, bitsandbytes int8/NF4 tok/s on torch CUDA,
# and the model on an RPC worker on the GPU over loopback against the GPU in-process (bench rpc --gpu-check).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
    exec python3 scripts/gpu_check.py prepare "${2:-.gpukit}"
fi
export PYTHONUNBUFFERED=1
exec python3 scripts/gpu_check.py run "${1:-.gpukit}"
