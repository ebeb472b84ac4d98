#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# --hf: the transformers backend's tests (torch CPU wheel, transformers, bitsandbytes) run too.
python3 scripts/setup.py --dev --hf
# Lint and type check first: a cheap, clear failure before the long suite.
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
