#!/usr/bin/env bash
# Set up (idempotent) and start Hearth with the bundled model. This is the README's run command.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/setup.py
exec .venv/bin/python -m engine chat "$@"
