"""One dictation: the microphone's chunks go to a worker that transcribes each stretch of speech as
the speaker pauses, and each stretch's text comes back to the GUI thread as soon as it is written."""
from __future__ import annotations

import threading
from queue import Queue
from typing import Callable

import numpy as np
from PySide6.QtCore import QObject, Signal

from engine.voice import Dictation, VoiceKit

from app.bridge.background import Background, error_text


class DictationRun(QObject):
    """Chunks in (``feed``, on the GUI thread); ``text`` per segment, then ``done`` or ``failed``.
    A Whisper model from the Hub that is not in the cache yet is downloaded first (``downloading``);
    what the microphone sends meanwhile waits, and is transcribed once the model is here."""
    text = Signal(str)
    downloading = Signal(str, int, int)  # the model, bytes done, bytes in all
    done = Signal(bool)      # whether any speech was heard
    failed = Signal(str)

    def __init__(self, kit: VoiceKit, language: str | None, parent: QObject | None = None, *,
                 chinese: str | None = None) -> None:
        super().__init__(parent)
        self._queue: Queue[np.ndarray | None] = Queue()
        self._ended = False
        self._stop = threading.Event()  # cancel: a download in progress stops (its bytes are kept)
        self._bg = Background(self)
        self._bg.run(lambda report: self._work(kit, language, chinese, report), on_done=self.done.emit,
                     on_failed=lambda e: self.failed.emit(error_text(e)), on_progress=self._progress,
                     kind="dictation", name="hearth-dictation", cancel=self._stop)

    def _progress(self, *values) -> None:
        if values[0] == "text":
            self.text.emit(values[1])
        else:
            self.downloading.emit(*values[1:])

    def feed(self, samples: np.ndarray) -> None:
        self._queue.put(samples)

    def end(self) -> None:
        """The recording stopped: the last stretch is transcribed, then ``done``."""
        if not self._ended:
            self._ended = True
            self._queue.put(None)

    def cancel(self) -> None:
        """Drop it: nothing more comes back."""
        self._bg.drop("dictation")  # sets _stop
        self._queue.put(None)

    def _work(self, kit: VoiceKit, language: str | None, chinese: str | None, report: Callable[..., bool]) -> bool:
        spec = kit.choice.whisper or ""
        transcriber = kit.transcriber(progress=lambda done, total, _f: report("download", spec, done, total),
                                      cancel=self._stop)
        d = Dictation(transcriber, language=language, chinese=chinese)
        while (chunk := self._queue.get()) is not None:
            for text in d.feed(chunk):
                report("text", text)
        for text in d.finish():
            report("text", text)
        return d.heard_speech
