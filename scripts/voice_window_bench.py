"""Read-aloud in the real window (offscreen), as a user with "Read every reply aloud" on gets it.

    .venv/bin/python scripts/voice_window_bench.py [--questions 8] [--json]

The window on the bundled model, its speaker a null device of the tests' private PulseAudio server
(tests/sound_server.py), whose monitor is recorded. For each question: the reply streams while its
sentences are spoken on the read-aloud worker, as in daily use. Printed per question and as
medians:
- ``first_audio_ms``: the reply's first sentence complete (the sentence cutter gave it out) to its
  audio ready to play (the issue's measure; the model is still writing beside it);
- ``sent_to_audio_ms``: Enter to that first audio, against ``reference_ms``: the same question asked
  with read-aloud off, Enter to the reply's end, plus the whole reply spoken once it has ended (a
  window without streaming speech, whose model does not share the cores with a voice);
- ``stop``: Stop pressed mid-reading to the last sound that reached the speaker, read from a
  recording of it (its clock read back from when the recorder stopped), and the time Stop itself took.
Needs voice (setup.py --voice), espeak-ng and pulseaudio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("Why is the sky blue?", "How do I boil an egg?", "What is a cat?", "Why do we sleep?",
             "What is rain?", "How does a bicycle stay up?", "What is bread made of?", "Why do leaves fall?")
SILENT = 64  # a 16-bit sample this quiet is silence


def _pump(app, seconds: float, until=None) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until is not None and until():
            return True
        time.sleep(0.002)
    return until is None


def _recorded(path: Path):
    import numpy as np
    data = path.read_bytes()
    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=len(QUESTIONS))
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from sound_server import SPEAKER_RATE, start_for_session

    sound = start_for_session()  # before Qt looks for audio devices
    if sound.missing:
        raise SystemExit("pulseaudio is not installed (Debian: apt-get install pulseaudio pulseaudio-utils)")
    import numpy as np
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    os.environ["HEARTH_DATA_DIR"] = tempfile.mkdtemp(prefix="hearth-voice-bench-")
    from app.core.settings import Settings, SettingsFile
    from app.window.main_window import MainWindow
    from engine.voice.sentences import speakable_sentences

    s = Settings()
    s.voice["speak_replies"] = True
    s.sampling.update({"temperature": 0.0, "seed": 0, "max_tokens": 96})
    SettingsFile().save(s)
    win = MainWindow()
    win.show()
    win.start()
    if not _pump(app, 120, lambda: win.host.ready) or win.voice is None:
        raise SystemExit("the model did not load, or voice is not installed: " + " | ".join(win.info.messages()))
    ra = win.voice.read_aloud
    rows = []
    for q in QUESTIONS[: a.questions]:
        # the reference first: the same question with read-aloud off, then the whole reply spoken once it ended
        win.settings.voice["speak_replies"] = False
        win.new_conversation()
        sent = time.perf_counter()
        win.send(q)
        _pump(app, 120, lambda: win.stream is None)
        reply_ms = (time.perf_counter() - sent) * 1e3
        said = " ".join(speakable_sentences(win.store.messages(win.current)[-1].content))
        t0 = time.perf_counter()
        ra.kit.voice().speak(said)
        reference_ms = reply_ms + (time.perf_counter() - t0) * 1e3
        win.settings.voice["speak_replies"] = True
        win.new_conversation()
        sent = time.perf_counter()
        win.send(q)
        _pump(app, 120, lambda: win.stream is None)
        _pump(app, 120, lambda: not ra.active)
        if not ra.audio_at:
            continue
        rows.append({"question": q, "first_audio_ms": round((ra.audio_at[0] - ra.sentence_at[0]) * 1e3, 1),
                     "sent_to_audio_ms": round((ra.audio_at[0] - sent) * 1e3, 1),
                     "reference_ms": round(reference_ms, 1)})
    # Stop mid-reading: how long until the speaker is silent, from a recording of it
    out = Path(os.environ["HEARTH_DATA_DIR"]) / "speaker.raw"
    rec = sound.listen(out)
    _pump(app, 0.5)
    widget = win.chat.widget(win.store.messages(win.current)[-1].id)
    widget.btn_speak.click()
    _pump(app, 30, lambda: bool(ra.audio_at))
    _pump(app, 3.0)  # past this server's start-up latency: the voice is being heard
    pressed = time.perf_counter()
    win.chat.stop_requested.emit()
    stop_call_ms = (time.perf_counter() - pressed) * 1e3
    _pump(app, 1.5)
    ended = time.perf_counter()
    rec.terminate()
    rec.wait(timeout=10)
    audio = _recorded(out)
    loud = np.flatnonzero(np.abs(audio) > SILENT)
    win.close()
    sound.stop()
    stop = {"stop_call_ms": round(stop_call_ms, 2)}
    if loud.size:
        # the recording's clock, read back from its end (the recorder stopped at ``ended``, 20 ms latency)
        last_sound = ended - (audio.size - loud[-1]) / SPEAKER_RATE
        stop["sound_after_stop_ms"] = round((last_sound - pressed) * 1e3, 1)
        stop["heard_before_stop_s"] = round(loud.size / SPEAKER_RATE, 2)
    med = {k: round(statistics.median(r[k] for r in rows), 1) for k in ("first_audio_ms", "sent_to_audio_ms",
                                                                         "reference_ms")} if rows else {}
    result = {"rows": rows, **med, "sooner_x": round(med["reference_ms"] / med["sent_to_audio_ms"], 2) if rows
              else None, "stop": stop}
    print(json.dumps(result, indent=None if a.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
