"""One dictation: the microphone's chunks go to a worker that transcribes each stretch of speech as
the speaker pauses, and each stretch's text comes back to the GUI thread as soon as it is written."""
from __future__ import annotations

from queue import Queue
from typing import Callable

import numpy as np
from PySide6.QtCore import QObject, Signal

from engine.voice.kit import VoiceKit
from engine.voice.listen import Dictation

from app.bridge.background import Background, error_text


class DictationRun(QObject):
    """Chunks in (``feed``, on the GUI thread); ``text`` per segment, then ``done`` or ``failed``."""
    text = Signal(str)
    done = Signal(bool)      # whether any speech was heard
    failed = Signal(str)

    def __init__(self, kit: VoiceKit, language: str | None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: Queue[np.ndarray | None] = Queue()
        self._ended = False
        self._bg = Background(self)
        self._bg.run(lambda report: self._work(kit, language, report), on_done=self.done.emit,
                     on_failed=lambda e: self.failed.emit(error_text(e)), on_progress=self.text.emit,
                     kind="dictation", name="hearth-dictation")

    def feed(self, samples: np.ndarray) -> None:
        self._queue.put(samples)

    def end(self) -> None:
        """The recording stopped: the last stretch is transcribed, then ``done``."""
        if not self._ended:
            self._ended = True
            self._queue.put(None)

    def cancel(self) -> None:
        """Drop it: nothing more comes back."""
        self._bg.drop("dictation")
        self._queue.put(None)

    def _work(self, kit: VoiceKit, language: str | None, report: Callable[..., bool]) -> bool:
        d = Dictation(kit.transcriber(), language=language)
        while (chunk := self._queue.get()) is not None:
            for text in d.feed(chunk):
                report(text)
        for text in d.finish():
            report(text)
        return d.heard_speech
