"""The microphone and the speaker, through QtMultimedia (PulseAudio/PipeWire, Core Audio, WASAPI).

:class:`Microphone` records 16 kHz mono 16-bit (Whisper's rate) from the
system's default input and hands each chunk on as float32 samples with its
level. :class:`Speaker` plays 16-bit mono at the voice's rate, pushed a little
at a time, so Stop silences it at once. Each says in one line what went wrong:
no device, permission refused, a device that disappears while in use.
"""
from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtMultimedia import QAudio, QAudioDevice, QAudioFormat, QAudioSink, QAudioSource, QMediaDevices

from engine.voice import SAMPLE_RATE, level_dbfs, pcm16_to_float

PUSH_MS = 20          # how often the speaker's buffer is topped up
SILENT_DEVICE_S = 2.0  # a microphone that hands over nothing this long has stopped (unplugged, taken away)
FIRST_DATA_S = 6.0     # ... and one that has not started within this (some servers take 1-2 s to start)
SINK_BUFFER_MS = 120  # the speaker's own buffer: what still plays after Stop (Qt's reset drops it)


def _format(rate: int) -> QAudioFormat:
    fmt = QAudioFormat()
    fmt.setSampleRate(rate)
    fmt.setChannelCount(1)
    fmt.setSampleFormat(QAudioFormat.SampleFormat.Int16)
    return fmt


def microphone_permission() -> str | None:
    """Why the microphone may not be used (None: it may). Asks where the system asks (macOS)."""
    from PySide6.QtCore import QCoreApplication, Qt
    try:
        from PySide6.QtCore import QMicrophonePermission
    except ImportError:  # a Qt without the permission API: nothing to ask
        return None
    app = QCoreApplication.instance()
    if app is None:
        return None
    permission = QMicrophonePermission()
    status = app.checkPermission(permission)
    if status == Qt.PermissionStatus.Undetermined:
        app.requestPermission(permission, lambda _p: None)
        return "Hearth asked for the microphone: allow it, then press the microphone again"
    if status == Qt.PermissionStatus.Denied:
        return "Hearth may not use the microphone: allow it in the system's privacy settings"
    return None


class Microphone(QObject):
    """The default input, recording while started."""
    chunk = Signal(object)   # float32 samples at 16 kHz
    level = Signal(float)    # the chunk's loudness, dBFS
    failed = Signal(str)     # one line: why recording stopped or could not start

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._source: QAudioSource | None = None
        self._io = None
        self._device = QAudioDevice()
        self._devices = QMediaDevices(self)
        self._devices.audioInputsChanged.connect(self._inputs_changed)
        self._last_data = 0.0
        self.sending = False
        self._watch = QTimer(self)  # not every system says when a device goes: one that stops sending has gone
        self._watch.setInterval(500)
        self._watch.timeout.connect(self._check_alive)

    @property
    def recording(self) -> bool:
        return self._source is not None

    def start(self) -> bool:
        """Start recording; False (and ``failed``) when there is no microphone or no permission."""
        why = microphone_permission()
        device = QMediaDevices.defaultAudioInput()
        if why is None and device.isNull():
            why = "No microphone was found: connect one, or check the system's sound settings"
        elif why is None and not device.isFormatSupported(_format(SAMPLE_RATE)):
            why = f"The microphone {device.description()!r} cannot record 16 kHz mono"
        if why is not None:
            self.failed.emit(why)
            return False
        self._device = device
        self._source = QAudioSource(device, _format(SAMPLE_RATE), self)
        self._source.stateChanged.connect(self._state_changed)
        self._io = self._source.start()
        if self._io is None:
            self._give_up(f"The microphone {device.description()!r} could not be opened")
            return False
        self._io.readyRead.connect(self._read)
        self._last_data, self.sending = time.monotonic(), False
        self._watch.start()
        return True

    def stop(self) -> None:
        """Stop recording; what was recorded up to now has been handed on."""
        if self._source is None:
            return
        self._read()
        self._watch.stop()
        source, self._source, self._io = self._source, None, None
        source.stateChanged.disconnect(self._state_changed)
        source.stop()
        source.deleteLater()

    def _read(self) -> None:
        if self._io is None:
            return
        data = bytes(self._io.readAll().data())
        if data:
            self._last_data, self.sending = time.monotonic(), True
            samples = pcm16_to_float(data)
            self.level.emit(level_dbfs(samples))
            self.chunk.emit(samples)

    def _state_changed(self, state) -> None:
        if self._source is not None and state == QAudio.State.StoppedState and \
                self._source.error() != QAudio.Error.NoError:
            self._give_up(f"The microphone stopped ({self._source.error().name})")

    def _inputs_changed(self) -> None:
        if self._source is not None and self._device.id() not in [d.id() for d in QMediaDevices.audioInputs()]:
            self._give_up(f"The microphone {self._device.description()!r} went away while recording")

    def _check_alive(self) -> None:
        self._read()
        quiet = time.monotonic() - self._last_data
        if self._source is not None and quiet > (SILENT_DEVICE_S if self.sending else FIRST_DATA_S):
            self._give_up(f"The microphone {self._device.description()!r} stopped sending sound "
                          "(unplugged, or taken by another program?)")

    def _give_up(self, why: str) -> None:
        self.stop()
        self.failed.emit(why)


class Speaker(QObject):
    """The default output, playing queued 16-bit samples; ``stop`` silences it at once."""
    drained = Signal()       # everything queued has been played (the device's own count)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sink: QAudioSink | None = None
        self._io = None
        self._rate = 0
        self._written = 0        # bytes handed to the device since it was opened
        self._pending = bytearray()
        self._timer = QTimer(self)
        self._timer.setInterval(PUSH_MS)
        self._timer.timeout.connect(self._push)

    @property
    def playing(self) -> bool:
        """Samples are queued, or written and not yet played (the device says how far it has played)."""
        if self._pending:
            return True
        if self._sink is None:
            return False
        played = self._sink.processedUSecs() * self._rate // 1_000_000
        return played + self._rate * PUSH_MS // 1000 < self._written // 2

    def play(self, samples: np.ndarray, rate: int) -> None:
        """Queue int16 mono ``samples`` at ``rate`` Hz after what is queued."""
        if self._sink is None or rate != self._rate:
            if not self._open(rate):
                return
        self._pending += samples.astype("<i2").tobytes()
        self._push()
        self._timer.start()

    def stop(self) -> None:
        """Silence now: the queue is dropped and the device's buffer reset."""
        self._pending.clear()
        self._timer.stop()
        if self._sink is not None:
            self._sink.stateChanged.disconnect(self._state_changed)
            self._sink.reset()
            self._sink.stop()
            self._sink.deleteLater()
        self._sink, self._io = None, None

    def _open(self, rate: int) -> bool:
        self.stop()
        device = QMediaDevices.defaultAudioOutput()
        if device.isNull():
            self.failed.emit("No speaker or headphones were found, so Hearth cannot read aloud")
            return False
        self._rate, self._written = rate, 0
        self._sink = QAudioSink(device, _format(rate), self)
        self._sink.setBufferSize(rate * 2 * SINK_BUFFER_MS // 1000)
        self._sink.stateChanged.connect(self._state_changed)
        self._io = self._sink.start()
        if self._io is None:
            self.failed.emit(f"The speaker {device.description()!r} could not be opened")
            self.stop()
            return False
        return True

    def _push(self) -> None:
        if self._sink is None or self._io is None:
            return
        free = self._sink.bytesFree()
        if free and self._pending:
            n = self._io.write(bytes(self._pending[:free - free % 2]))
            if n > 0:
                del self._pending[:n]
                self._written += n
        if not self.playing:
            self._timer.stop()
            self.drained.emit()

    def _state_changed(self, state) -> None:
        if state == QAudio.State.StoppedState and self._sink is not None and \
                self._sink.error() not in (QAudio.Error.NoError, QAudio.Error.UnderrunError):
            why = f"The speaker stopped ({self._sink.error().name})"
            self.stop()
            self.failed.emit(why)
