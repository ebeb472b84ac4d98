#!/usr/bin/env bash
# Smoke test of the packaged app (Linux): build the lite bundle from a clean
# checkout of HEAD, run its --self-test offscreen from a folder outside the repo
# with a bare environment (no venv on PATH), and record size and start-up times.
#
#   packaging/smoke.sh [--tarball] [--keep] [--voice]
#
# --voice builds the bundle with voice (build.py --voice; setup.py --voice first)
# and checks it speaks and hears: the bundle's Piper says a sentence to a file,
# its Whisper transcribes the file back, and the words must match.
#
# Exit 0 only if the build, the self-test and the user-data check all pass.
# Takes about 1-2 minutes on 2 cores (most of it PyInstaller); it is not part
# of the pytest suite or .ci/run. Uncommitted changes are NOT tested: it clones.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
py=${HEARTH_PYTHON:-$repo/.venv/bin/python}   # builds the bundle; never on the bundle's PATH
build_args=()
keep=0
voice=0
for a in "$@"; do
    case "$a" in
        --tarball) build_args+=(--tarball) ;;
        --keep) keep=1 ;;
        --voice) build_args+=(--voice); voice=1 ;;
        *) echo "usage: $0 [--tarball] [--keep] [--voice]" >&2; exit 2 ;;
    esac
done
"$py" -c "import PyInstaller" 2>/dev/null || {
    echo "smoke: PyInstaller is missing in $py (.venv/bin/pip install pyinstaller)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hearth-smoke.XXXXXX")
if [ "$keep" = 1 ]; then echo "smoke: keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
say() { echo "[smoke] $*"; }

say "cloning $(git -C "$repo" rev-parse --short HEAD) into $tmp/src"
git clone -q "$repo" "$tmp/src"
t_build0=$(date +%s.%N)
(cd "$tmp/src" && nice -n 5 "$py" packaging/build.py "${build_args[@]}")
t_build1=$(date +%s.%N)
bundle="$tmp/src/dist/Hearth"
[ "$voice" = 1 ] && bundle="$tmp/src/dist/lite-voice/Hearth"
[ -x "$bundle/Hearth" ] || { say "FAIL: no executable at $bundle/Hearth"; exit 1; }
snapshot() { (cd "$bundle" && find . -printf '%p %s\n' | sort); }
before=$(snapshot)

# A bare environment: no venv, no PYTHONPATH, a fresh HOME, run from outside the repo.
mkdir -p "$tmp/run" "$tmp/home"
bare=(env -i "HOME=$tmp/home" "PATH=/usr/local/bin:/usr/bin:/bin" "LANG=C.UTF-8"
      "TMPDIR=$tmp" "QT_QPA_PLATFORM=offscreen")
say "running $bundle/Hearth --self-test from $tmp/run"
t0=$(date +%s.%N)
set +e
(cd "$tmp/run" && "${bare[@]}" "HEARTH_TRACE_WINDOW_SHOWN=$tmp/shown" \
    timeout 300 "$bundle/Hearth" --self-test >"$tmp/selftest.out" 2>"$tmp/selftest.err")
rc=$?
set -e
t1=$(date +%s.%N)
json=$(grep '^{' "$tmp/selftest.out" | tail -n 1 || true)
echo "$json"
if [ "$rc" != 0 ] || [ -z "$json" ]; then
    say "FAIL: the self-test exited $rc"; tail -n 30 "$tmp/selftest.err" >&2; exit 1
fi

if [ "$voice" = 1 ]; then
    said="The weather is nice today, so we will walk to the park."
    say "voice: the bundle says a sentence, then hears it back"
    (cd "$tmp/run" && "${bare[@]}" timeout 300 "$bundle/Hearth" --engine voice say "$said" --out "$tmp/said.mp3" \
        >/dev/null 2>"$tmp/voice.err") || { say "FAIL: voice say"; tail -n 20 "$tmp/voice.err" >&2; exit 1; }
    heard=$(cd "$tmp/run" && "${bare[@]}" timeout 300 "$bundle/Hearth" --engine voice hear "$tmp/said.mp3" \
        2>"$tmp/voice.err") || { say "FAIL: voice hear"; tail -n 20 "$tmp/voice.err" >&2; exit 1; }
    say "voice: heard \"$heard\""
    SAID="$said" HEARD="$heard" "$py" -c '
import os, sys
from engine.voice.words import error_rate
wer = error_rate(os.environ["SAID"], os.environ["HEARD"])
print(f"[smoke] voice round trip: {wer:.0%} of the words wrong")
sys.exit(0 if wer <= 0.15 else 1)' || { say "FAIL: the bundle did not hear what it said"; exit 1; }
fi

# User data goes to the platform folders (here $HOME/.local/share and
# $HOME/.config), never next to the executable: start the real app (no
# --self-test, no HEARTH_DATA_DIR), let it load, close it with SIGTERM.
say "checking where a normal start writes its data"
(cd "$tmp/run" && exec "${bare[@]}" "$bundle/Hearth" >"$tmp/app.out" 2>&1) &
app_pid=$!
for _ in $(seq 1 60); do
    [ -e "$tmp/home/.local/share/Hearth" ] && [ -e "$tmp/home/.config/Hearth" ] && break
    sleep 0.5
done
sleep 2
kill -TERM "$app_pid" 2>/dev/null || true
wait "$app_pid" || true
after=$(snapshot)
data_ok=1
if [ "$before" != "$after" ]; then
    say "FAIL: the app wrote next to its executable:"; diff <(echo "$before") <(echo "$after") | head >&2 || true
    data_ok=0
fi
if ! ls "$tmp/home/.local/share/Hearth/"* >/dev/null 2>&1; then
    say "FAIL: nothing in $tmp/home/.local/share/Hearth"; cat "$tmp/app.out" >&2; data_ok=0
fi
say "user data: $(cd "$tmp/home" && find .local/share/Hearth .config/Hearth -type f 2>/dev/null | tr '\n' ' ')"

# Summary: size, and times measured from the moment the process was launched.
JSON="$json" T0="$t0" T1="$t1" TB0="$t_build0" TB1="$t_build1" SHOWN="$tmp/shown" BUNDLE="$bundle" \
"$py" - <<'PY'
import json, os
from pathlib import Path
r = json.loads(os.environ["JSON"])
t0 = float(os.environ["T0"])
shown = Path(os.environ["SHOWN"])
size = sum(f.stat().st_size for f in Path(os.environ["BUNDLE"]).rglob("*") if f.is_file() and not f.is_symlink())
m = r.get("metrics") or {}
summary = {
    "ok": r.get("ok"),
    "bundle_mb": round(size / 2**20, 1),
    "build_s": round(float(os.environ["TB1"]) - float(os.environ["TB0"]), 1),
    "launch_to_window_ms": round((float(shown.read_text()) - t0) * 1e3) if shown.is_file() else None,
    "window_shown_ms": r.get("window_shown_ms"),       # the window's own constructor + show()
    "model_ready_ms": r.get("model_ready_ms"),         # from the constructor to the model loaded
    "ttft_ms": m.get("ttft_ms"),                       # from Enter to the first token
    "decode_tok_s": m.get("decode_tok_s"),
    "torch_imported": r.get("torch_imported"),
    "self_test_process_s": round(float(os.environ["T1"]) - t0, 2),
}
print("[smoke] summary " + json.dumps(summary))
PY
[ "$data_ok" = 1 ] || exit 1
say "PASS"
