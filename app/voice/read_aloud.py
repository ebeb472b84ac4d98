"""Reading a reply aloud while it is written: sentences are cut as they end, spoken on a worker, and
played in order; Stop (or a new reply) silences at once and drops what was still to be spoken."""
from __future__ import annotations

import threading
import time
from queue import Queue
from typing import Callable

from PySide6.QtCore import QObject, Signal

from engine.voice import SentenceCutter, VoiceKit

from app.bridge.background import Background, error_text
from app.voice.devices import Speaker


class ReadAloud(QObject):
    """One voice for the window: ``start`` a reply, ``feed`` its text as it streams, ``finish`` it;
    ``stop`` silences. Only the reply's text is fed, never its reasoning."""
    speaking = Signal(bool)     # started or stopped speaking (the buttons follow it)
    downloading = Signal(str, int, int)  # a Hub voice not in the cache yet: the voice, bytes done, bytes in all
    failed = Signal(str)

    def __init__(self, kit: VoiceKit, speaker: Speaker, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.kit, self.speaker = kit, speaker
        self.speed = 1.0
        self._bg = Background(self)
        self._queue: Queue[str | None] | None = None
        self._cutter = SentenceCutter()
        self.key: object = None          # what is being read (a reply's message id)
        self.sentence_at: list[float] = []  # when each sentence was complete (perf_counter), this reading
        self.audio_at: list[float] = []     # when each sentence's audio was ready
        speaker.drained.connect(self._maybe_done)
        speaker.failed.connect(self._fail)
        self._ended = True
        self._working = False

    @property
    def active(self) -> bool:
        return self._queue is not None

    def start(self, key: object) -> None:
        """Begin reading a new text (what was being read stops)."""
        self.stop()
        self.key, self._ended = key, False
        self._cutter = SentenceCutter()
        self.sentence_at, self.audio_at = [], []
        queue: Queue[str | None] = Queue()
        self._queue = queue
        self._working = True
        stop = threading.Event()  # a Stop while a voice downloads stops the download too (its bytes are kept)
        self._bg.run(lambda report: self._work(queue, report, stop), on_done=lambda _r: self._work_done(),
                     on_failed=lambda e: self._fail(error_text(e)), on_progress=self._progress, kind="speak",
                     name="hearth-read-aloud", cancel=stop)
        self.speaking.emit(True)

    def feed(self, text: str) -> None:
        if self._queue is not None:
            for sentence in self._cutter.feed(text):
                self._say(sentence)

    def finish(self) -> None:
        """The text is complete: the rest is spoken, then ``speaking(False)``."""
        if self._queue is not None and not self._ended:
            for sentence in self._cutter.finish():
                self._say(sentence)
            self._ended = True
            self._queue.put(None)

    def read(self, key: object, text: str) -> None:
        """Read a whole text (a finished reply's Speak button)."""
        self.start(key)
        self.feed(text)
        self.finish()

    def stop(self) -> None:
        """Silence now; nothing queued is spoken."""
        was = self._queue is not None
        self._bg.drop("speak")
        if self._queue is not None:
            self._queue.put(None)
        self._queue, self.key, self._ended, self._working = None, None, True, False
        self.speaker.stop()
        if was:
            self.speaking.emit(False)

    def _say(self, sentence: str) -> None:
        self.sentence_at.append(time.perf_counter())
        assert self._queue is not None
        self._queue.put(sentence)

    def _work(self, queue: Queue, report: Callable[..., bool], stop: threading.Event) -> None:
        kit = self.kit
        spec = kit.choice.piper or ""
        # loaded on first use, here on the worker (a Hub voice downloaded first)
        voice = kit.voice(progress=lambda done, total, _f: report("download", spec, done, total), cancel=stop)
        while (sentence := queue.get()) is not None:
            samples = voice.speak(sentence, speed=self.speed)
            if not report("audio", samples, voice.rate):
                return  # stopped: the rest is not spoken

    def _progress(self, what: str, *values) -> None:
        if what == "download":
            self.downloading.emit(*values)
            return
        samples, rate = values
        self.audio_at.append(time.perf_counter())
        self.speaker.play(samples, rate)

    def _work_done(self) -> None:
        self._working = False
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._queue is not None and self._ended and not self._working and not self.speaker.playing:
            self._queue, self.key = None, None
            self.speaking.emit(False)

    def _fail(self, why: str) -> None:
        self.stop()
        self.failed.emit(why)
