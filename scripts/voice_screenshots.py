"""Take the documentation's pictures of voice: the microphone listening, a reply being read aloud, and the
speech models in the model library.

    .venv/bin/python scripts/voice_screenshots.py   # offscreen: assets/voice-listening.png, voice-reading.png,
                                                    # voice-models.png

All real: the window, the bundled models, and the test suite's private PulseAudio server
(tests/sound_server.py) as the sound card: espeak-ng says two sentences into its microphone, with a
breath between, and the picture is taken once the first is in the box while the second is still
being said (the level bar moving). Needs voice (setup.py --voice), espeak-ng and pulseaudio.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SAID = ("the second question faster?",
        "And why does it stay fast after the app restarts, even with a long document attached?")
_sound = None


def _speech(scratch: Path) -> Path:
    import numpy as np

    from engine.voice.audio import encode_audio, read_audio

    parts = []
    for i, text in enumerate(SAID):
        wav = scratch / f"said-{i}.wav"
        subprocess.run([shutil.which("espeak-ng") or "espeak-ng", "-v", "en-us", "-w", str(wav), text], check=True)
        parts += [read_audio(wav.read_bytes(), max_seconds=60).samples, np.zeros(16000, np.float32)]
    out = scratch / "said.wav"
    out.write_bytes(encode_audio(np.concatenate(parts), 16000, "wav"))
    return out


def take(out: Path, scratch: Path, theme: str) -> None:
    global _sound
    from app.core.settings import Settings
    from app.window.selftest import wait_until
    from offscreen_pictures import open_window
    from sound_server import start_for_session

    if _sound is None:  # before the first window asks Qt for its audio devices
        _sound = start_for_session()
        if _sound.missing:
            raise RuntimeError("pulseaudio is not installed (Debian: apt-get install pulseaudio pulseaudio-utils)")
    s = Settings(theme=theme)
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 60})
    win = open_window(s)
    if win.voice is None:
        raise RuntimeError("voice is not installed: python3 scripts/setup.py --voice")
    suffix = "-dark" if theme == "dark" else ""
    win.send("Why is the sky blue?")
    if not wait_until(lambda: win.stream is None, 120.0):
        raise RuntimeError("the reply did not end")
    reply = win.chat.widget(win.store.messages(win.current)[-1].id)
    reply.btn_speak.click()
    wait_until(lambda: False, 2.5)
    if not win.grab().save(str(out / f"voice-reading{suffix}.png")):
        raise RuntimeError("could not write the reading picture")
    win.voice.read_aloud.stop()
    win.chat.set_input_text("Can you explain how a prefix cache makes")
    win.voice.mic_button.click()
    player = _sound.say(_speech(scratch))
    if not wait_until(lambda: "faster" in win.chat.input_text(), 60.0):
        raise RuntimeError("nothing was dictated: " + " | ".join(win.info.messages()))
    wait_until(lambda: False, 1.0)
    if not win.grab().save(str(out / f"voice-listening{suffix}.png")):
        raise RuntimeError("could not write the listening picture")
    player.wait(timeout=30)
    win.voice.mic_button.click()
    win.show_library()  # the speech models below the language models, with their fit
    speech = win.models_dock.speech
    if not wait_until(lambda: speech.models and not speech.scanning and not win.models_dock.library_view.scanning,
                      60.0):
        raise RuntimeError("the library did not list the speech models: " + speech.status.text())
    wait_until(lambda: False, 1.0)
    if not win.grab().save(str(out / f"voice-models{suffix}.png")):
        raise RuntimeError("could not write the library picture")
    win.close()


def main() -> int:
    from offscreen_pictures import take_pictures

    return take_pictures(__doc__ or "", lambda out, scratch, t, _args: take(out, scratch, t), prefix="hearth-voice-")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
