"""``python -m engine bench voice``: dictation and read-aloud against what a user would otherwise run.

- **Dictation.** Each sentence, said by espeak-ng (en-us), is fed in 100 ms
  chunks at the pace a microphone gives them, through the window's own path
  (engine/voice/listen.Dictation, cut at pauses). Latency: the audio's end to
  the text ready. The reference, side by side: faster-whisper transcribing the
  whole recording once it ends, as an app without live dictation does. Both
  report their word error rate against what was said. The last row is the
  first three sentences said in one go, with a 0.8 s breath between them.
- **Real-time factors**: Whisper's (the whole recording) and Piper's (each reply).
- **Other languages** (``--spoken DIR``, with a multilingual Whisper): each recording in DIR
  (``NAME.wav`` and ``NAME.txt``, what it says) dictated through the same live path, its language
  detected per stretch, scored by word error rate (character error rate for Chinese, written in
  Simplified); then each followed, after a pause, by an English sentence said by espeak-ng, as mixed
  dictation: both stretches must keep their own language. The reference is the same as above.
- **Read-aloud.** The bundled model's greedy replies to ``--prompts`` questions
  (default 10), each spoken as the window does: sentences cut as they end and
  spoken on a thread of their own while the reply still streams (so Piper and
  the model share the cores). First audio: the first sentence complete to its
  audio ready. Sent to first audio, against the reference: the reply streamed to
  its end and then spoken whole, as an app without streaming speech does. Then
  what was spoken is transcribed by Whisper, and the word error rate against the
  reply's speakable text says whether what is heard is what was written.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from queue import Queue
from typing import Any, Iterable, Iterator

import numpy as np

DICTATED = (
    "The weather was cold and windy, so we stayed inside and read books all afternoon.",
    "Please remind me to call my sister about the birthday party on Saturday.",
    "Can you explain how a prefix cache makes the second question faster?",
    "What is the difference between a list and a tuple in Python?",
    "Write a short email to my landlord asking when the heating will be fixed.",
)
QUESTIONS = (
    "Why is the sky blue? Answer in two sentences.", "How do I boil an egg? Answer in two sentences.",
    "What is a cat? Answer in two sentences.", "Why do we sleep? Answer in two sentences.",
    "What is rain? Answer in two sentences.", "How does a bicycle stay up? Answer in two sentences.",
    "What is bread made of? Answer in two sentences.", "Why do leaves fall? Answer in two sentences.",
    "What is the moon? Answer in two sentences.", "How do bees make honey? Answer in two sentences.",
)
CHUNK_S = 0.1
PARAGRAPH_PAUSE_S = 0.8


def _espeak(text: str, folder: Path) -> np.ndarray:
    from ..voice.audio import read_audio

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("bench voice needs espeak-ng to say its sentences (Debian: apt-get install espeak-ng)")
    out = folder / "said.wav"
    subprocess.run([exe, "-v", "en-us", "-w", str(out), text], check=True, capture_output=True, timeout=60)
    return read_audio(out.read_bytes(), max_seconds=120).samples


def _dictate_live(transcriber, samples: np.ndarray, chinese: str | None = None):
    """Fed at a microphone's pace; (the Dictation, ms from the audio's end to its text ready)."""
    from ..voice.audio import SAMPLE_RATE
    from ..voice.listen import Dictation

    d = Dictation(transcriber, chinese=chinese)
    step = int(CHUNK_S * SAMPLE_RATE)
    start = time.perf_counter()
    for i in range(0, len(samples), step):
        due = start + (i + step) / SAMPLE_RATE   # when this chunk has been recorded
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        d.feed(samples[i:i + step])
    ended = start + len(samples) / SAMPLE_RATE
    if (wait := ended - time.perf_counter()) > 0:
        time.sleep(wait)
    d.finish()
    return d, (time.perf_counter() - ended) * 1e3


def _dictation(kit, folder: Path) -> dict:
    from ..voice.audio import SAMPLE_RATE
    from ..voice.words import error_rate

    rows: list[dict[str, Any]] = []
    transcriber = kit.transcriber()
    pause = np.zeros(int(PARAGRAPH_PAUSE_S * SAMPLE_RATE), np.float32)
    said_alone = {said: _espeak(said, folder) for said in DICTATED}
    paragraph = " ".join(DICTATED[:3])  # three sentences with a breath between: dictation of some length
    said_alone[paragraph] = np.concatenate([x for said in DICTATED[:3] for x in (said_alone[said], pause)][:-1])
    for said, speech in said_alone.items():
        samples = np.concatenate([np.zeros(SAMPLE_RATE // 2, np.float32), speech,
                                  np.zeros(SAMPLE_RATE // 4, np.float32)])
        live, live_ms = _dictate_live(transcriber, samples)
        text = live.text
        t0 = time.perf_counter()
        whole = transcriber.transcribe(samples).text  # the reference: the whole recording, after it ends
        whole_ms = (time.perf_counter() - t0) * 1e3
        rows.append({"seconds": round(len(samples) / SAMPLE_RATE, 2), "said": said, "heard": text,
                     "wer": round(error_rate(said, text), 3), "ms_after_end": round(live_ms, 1),
                     "reference_wer": round(error_rate(said, whole), 3), "reference_ms": round(whole_ms, 1),
                     "whisper_rtf": round(whole_ms / 1e3 / (len(samples) / SAMPLE_RATE), 3)})
    one = rows[:-1]  # the single sentences; the paragraph is reported on its own
    return {"rows": rows, "wer": round(statistics.mean(r["wer"] for r in one), 3),
            "paragraph": {k: rows[-1][k] for k in ("seconds", "wer", "ms_after_end", "reference_ms")},
            "reference_wer": round(statistics.mean(r["reference_wer"] for r in one), 3),
            "ms_after_end": round(statistics.median(r["ms_after_end"] for r in one), 1),
            "reference_ms": round(statistics.median(r["reference_ms"] for r in one), 1),
            "sooner_x": round(statistics.median(r["reference_ms"] / max(r["ms_after_end"], 1e-3) for r in one), 2),
            "whisper_rtf": round(statistics.median(r["whisper_rtf"] for r in rows), 3)}


def _languages(spoken: Path, whisper: str | None, threads: int, folder: Path) -> dict:
    """Each recording in ``spoken`` dictated live with a multilingual Whisper, alone and followed by English."""
    from ..voice.audio import SAMPLE_RATE, read_audio
    from ..voice.fetch import whisper_base_path
    from ..voice.listen import Transcriber
    from ..voice.models import whisper_model
    from ..voice.words import error_rate

    base = whisper_base_path()
    spec = whisper or (str(base) if base else None)
    if spec is None:
        raise SystemExit("--spoken needs a multilingual Whisper: --whisper SPEC, or python -m engine models "
                         "fetch-whisper-base")
    transcriber = Transcriber(whisper_model(spec), threads=threads)
    if not transcriber.multilingual:
        raise SystemExit(f"{spec} hears English only: --spoken needs a multilingual Whisper")
    english = DICTATED[0]
    tail = _espeak(english, folder)
    pause = np.zeros(int(PARAGRAPH_PAUSE_S * SAMPLE_RATE), np.float32)
    edge = np.zeros(SAMPLE_RATE // 4, np.float32)
    rows: list[dict[str, Any]] = []
    for wav in sorted(spoken.glob("*.wav")):
        said = wav.with_suffix(".txt").read_text(encoding="utf-8").strip()
        speech = read_audio(wav.read_bytes(), max_seconds=120).samples
        alone = np.concatenate([edge, speech, edge])
        live, live_ms = _dictate_live(transcriber, alone, chinese="simplified")
        t0 = time.perf_counter()
        whole = transcriber.transcribe(alone, chinese="simplified")
        whole_ms = (time.perf_counter() - t0) * 1e3
        mixed, _ms = _dictate_live(transcriber, np.concatenate([edge, speech, pause, tail, edge]), chinese="simplified")
        first = "".join(mixed.texts[:-1]) if len(mixed.texts) > 1 else ""
        rows.append({"file": wav.name, "said": said, "heard": live.text, "languages": live.languages,
                     "error_rate": round(error_rate(said, live.text), 3), "ms_after_end": round(live_ms, 1),
                     "reference_error_rate": round(error_rate(said, whole.text), 3),
                     "reference_ms": round(whole_ms, 1), "reference_language": whole.language,
                     "mixed_languages": mixed.languages, "mixed_heard": mixed.texts,
                     "mixed_error_rate": round(error_rate(said, first), 3) if first else 1.0,
                     "mixed_english_wer": round(error_rate(english, mixed.texts[-1]), 3) if mixed.texts else 1.0})
    if not rows:
        raise SystemExit(f"no NAME.wav with its NAME.txt in {spoken}")
    return {"whisper": transcriber.model.name, "rows": rows,
            "error_rate": round(statistics.mean(r["error_rate"] for r in rows), 3),
            "reference_error_rate": round(statistics.mean(r["reference_error_rate"] for r in rows), 3),
            "ms_after_end": round(statistics.median(r["ms_after_end"] for r in rows), 1),
            "reference_ms": round(statistics.median(r["reference_ms"] for r in rows), 1),
            "mixed_error_rate": round(statistics.mean(r["mixed_error_rate"] for r in rows), 3),
            "mixed_english_wer": round(statistics.mean(r["mixed_english_wer"] for r in rows), 3),
            "mixed_kept_both_languages": sum(len(set(r["mixed_languages"])) > 1 for r in rows)}


def _reply_streams(a: argparse.Namespace, n: int) -> Iterator[Iterator[str]]:
    """The bundled model's greedy replies to the first ``n`` questions, each as its stream of text deltas."""
    from ..config import EngineConfig
    from ..engine import Engine
    from ..prompt.messages import Message
    from ..types import SamplingParams

    engine = Engine.open(EngineConfig(a.model, n_threads=a.threads))
    try:
        params = SamplingParams(temperature=0.0, max_tokens=min(a.tokens, 96))
        for q in QUESTIONS[:n]:
            yield (ev.text for ev in engine.stream([Message("user", q)], params) if ev.kind == "delta")
    finally:
        engine.close()


def _speak_while_streaming(voice, deltas: Iterable[str]) -> dict[str, Any]:
    """The window's read-aloud: sentences spoken on a thread of their own while the reply streams."""
    from ..voice.sentences import SentenceCutter

    cutter, queue = SentenceCutter(), Queue()  # type: ignore[var-annotated]
    times: dict[str, float] = {}
    spoken: list[np.ndarray] = []

    def speaker() -> None:
        while (sentence := queue.get()) is not None:
            spoken.append(voice.speak(sentence))
            times.setdefault("first_audio", time.perf_counter())
    thread = threading.Thread(target=speaker, daemon=True)
    thread.start()
    start, text, said = time.perf_counter(), "", []
    for delta in deltas:
        text += delta
        for sentence in cutter.feed(delta):
            times.setdefault("first_sentence", time.perf_counter())
            queue.put(sentence)
            said.append(sentence)
    times["reply_done"] = time.perf_counter()
    for sentence in cutter.finish():
        times.setdefault("first_sentence", time.perf_counter())
        queue.put(sentence)
        said.append(sentence)
    queue.put(None)
    thread.join()
    return {"reply": text, "said": said, "start": start, "audio": np.concatenate(spoken) if spoken else None, **times}


def _read_aloud(kit, streams: Iterable[Iterable[str]]) -> dict:
    """Each reply spoken while it streams, against speaking it once it has ended; then heard back."""
    from ..voice.audio import SAMPLE_RATE, resample16
    from ..voice.words import error_rate

    voice, transcriber = kit.voice(), kit.transcriber()
    rows: list[dict[str, Any]] = []
    for deltas in streams:
        live = _speak_while_streaming(voice, deltas)
        if live["audio"] is None:
            continue
        t0 = time.perf_counter()
        voice.speak(" ".join(live["said"]))  # the reference: the whole reply spoken once it has ended
        whole_ms = (time.perf_counter() - t0) * 1e3
        heard = transcriber.transcribe(
            resample16(live["audio"], voice.rate, SAMPLE_RATE).astype(np.float32) / 32768).text
        hearth_ms = (live["first_audio"] - live["start"]) * 1e3
        reference_ms = (live["reply_done"] - live["start"]) * 1e3 + whole_ms
        rows.append({"reply": live["reply"], "heard": heard, "wer": round(error_rate(" ".join(live["said"]), heard), 3),
                     "first_audio_ms": round((live["first_audio"] - live["first_sentence"]) * 1e3, 1),
                     "sent_to_audio_ms": round(hearth_ms, 1), "reference_ms": round(reference_ms, 1),
                     "piper_rtf": round(whole_ms / 1e3 / (len(live["audio"]) / voice.rate), 3)})
    return {"rows": rows, "round_trip_wer": round(statistics.mean(r["wer"] for r in rows), 3),
            "first_audio_ms": round(statistics.median(r["first_audio_ms"] for r in rows), 1),
            "sent_to_audio_ms": round(statistics.median(r["sent_to_audio_ms"] for r in rows), 1),
            "reference_ms": round(statistics.median(r["reference_ms"] for r in rows), 1),
            "sooner_x": round(statistics.median(r["reference_ms"] / r["sent_to_audio_ms"] for r in rows), 2),
            "piper_rtf": round(statistics.median(r["piper_rtf"] for r in rows), 3)}


def bench_voice(a: argparse.Namespace) -> dict:
    from ..voice.kit import VoiceChoice, VoiceKit
    from ..voice.models import require_voice

    require_voice()
    kit = VoiceKit(VoiceChoice(threads=a.threads or 0))
    t0 = time.perf_counter()
    kit.transcriber(), kit.voice()
    load_ms = (time.perf_counter() - t0) * 1e3
    with tempfile.TemporaryDirectory(prefix="hearth-bench-voice-") as tmp:
        dictation = _dictation(kit, Path(tmp))
        spoken = getattr(a, "spoken", None)
        languages = _languages(Path(spoken), getattr(a, "whisper", None), a.threads or 0, Path(tmp)) \
            if spoken else None
    streams = _reply_streams(a, max(1, min(a.prompts or len(QUESTIONS), len(QUESTIONS))))
    out = {"whisper": kit.transcriber().model.name, "piper": kit.voice().model.name,
           "load_ms": round(load_ms, 1), "dictation": dictation, "read_aloud": _read_aloud(kit, streams)}
    if languages is not None:
        out["languages"] = languages
    return out
