"""``python -m engine voice hear FILE`` (speech to text) and ``voice say TEXT --out FILE`` (text to
speech), with the models Settings → Voice would use: a terminal's way to the same voice as the window,
and the packaged app's check that its voice works (``Hearth --engine voice ...``: packaging/smoke.sh)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

MAX_HEARD_S = 3 * 3600.0  # a file longer than this is refused from its header (3 h: ~700 MB of samples)


def add_voice_parser(sub) -> None:
    p = sub.add_parser("voice", help="voice: hear FILE (transcribe it) or say TEXT --out FILE (speak it)")
    p.add_argument("action", choices=["hear", "say"])
    p.add_argument("what", help="hear: an audio file (any format FFmpeg reads); say: the text ('-': stdin)")
    p.add_argument("--out", default=None, help="say: the file to write (.wav, .mp3, .opus, .aac, .flac)")
    p.add_argument("--whisper", default=None, help="hear: bundled (the default), a folder or a Hub repository")
    p.add_argument("--piper", default=None, help="say: bundled (the default), an .onnx voice or REPO:PATH.onnx")
    p.add_argument("--language", default=None, help="hear: the language spoken (default: detected)")
    p.add_argument("--chinese", choices=["simplified", "traditional"], default=None,
                   help="hear: the script Chinese is written in (default: as Whisper writes it)")
    p.add_argument("--speed", type=float, default=1.0, help="say: 0.25 to 4")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=cmd_voice)


def cmd_voice(a: argparse.Namespace) -> int:
    from ..errors import HearthError
    from ..voice.audio import FORMATS, encode_audio, read_audio
    from ..voice.kit import VoiceChoice, VoiceKit

    kit = VoiceKit(VoiceChoice(whisper=a.whisper, piper=a.piper, threads=a.threads))
    try:
        if a.action == "hear":
            sound = read_audio(Path(a.what).read_bytes(), max_seconds=MAX_HEARD_S)
            print(kit.transcriber().transcribe(sound.samples, language=a.language, chinese=a.chinese).text)
            return 0
        out = Path(a.out or "speech.wav")
        fmt = out.suffix.lstrip(".").lower()
        if fmt not in FORMATS or fmt == "pcm":
            print(f"error: --out must end in one of .{', .'.join(f for f in FORMATS if f != 'pcm')}",
                  file=sys.stderr)
            return 2
        voice = kit.voice()
        text = sys.stdin.read() if a.what == "-" else a.what
        out.write_bytes(encode_audio(voice.speak(text, speed=a.speed), voice.rate, fmt))
        print(out)
        return 0
    except (HearthError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
