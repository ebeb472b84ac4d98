#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/setup.py --dev
exec .venv/bin/python -m pytest "$@"
