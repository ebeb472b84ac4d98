#!/usr/bin/env bash
# Set up (idempotent) and open the Hearth window with the bundled model. This is the README's run command.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/setup.py
exec .venv/bin/python -m app "$@"
