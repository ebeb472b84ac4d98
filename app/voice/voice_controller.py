"""Voice in the window: the microphone button (and F8 held to talk: app/ui/shortcuts.py), Speak on each
reply, replies read aloud as they stream, and hands-free turns. Made only where voice is installed.

Dictation goes into the message box at the cursor, where the user can edit it
before sending; nothing typed is replaced. Stop, a new message or another
reply's Speak silences the voice at once. A failure (no microphone, the
permission refused, a device that went away, no speaker) is one line in the
info bar, and what was typed or dictated stays.

Hands-free (Settings → Voice): the microphone listens; once the speaker has
paused for HANDS_FREE_PAUSE_S after some words, the box is sent; the reply is
read aloud; then the microphone listens again. While the voice speaks, the
microphone only listens for the user speaking over it (BARGE_IN_DBFS), which
silences the voice; it is not transcribed, so the voice never dictates itself.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QLocale, QObject, Qt, QTimer
from PySide6.QtWidgets import QProgressBar, QToolButton

from engine.voice import VoiceKit

from app.bridge.engine_host import EngineHost
from app.chat.chat_view import ChatView
from app.core import voice_settings
from app.core.settings import Settings
from app.core.text_utils import human_bytes
from app.ui import theme
from app.ui.info_bar import InfoArea, InfoBar
from app.ui.shortcuts import matches
from app.voice.devices import Microphone, Speaker
from app.voice.dictation import DictationRun
from app.voice.read_aloud import ReadAloud

HANDS_FREE_PAUSE_S = 1.2      # a pause this long after words sends them (hands-free)
BARGE_IN_DBFS = -30.0         # the user speaking over the voice (hands-free)
LEVEL_FLOOR_DBFS = -60.0      # the meter's empty end


def joined(before: str, text: str) -> str:
    """``text`` as it continues ``before`` in the box: after a space, and with Whisper's capital dropped
    when ``before`` ends mid-sentence ("makes" + "The second..." -> "makes the second...")."""
    space = "" if not before or before[-1].isspace() else " "
    mid_sentence = before.rstrip()[-1:] not in ".!?:。！？"  # "" (an empty box) is in every string
    if mid_sentence and text[:1].isupper() and text[1:2].islower() and not text.startswith("I "):
        text = text[0].lower() + text[1:]
    return space + text


class VoiceController(QObject):
    """The window's voice (see the module's docstring)."""

    def __init__(self, *, chat: ChatView, host: EngineHost, info: InfoArea, settings: Callable[[], Settings],
                 kit: VoiceKit | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.chat, self.host, self.info, self._settings = chat, host, info, settings
        self.kit = kit or VoiceKit(voice_settings.choice(settings().voice))
        self.microphone = Microphone(self)
        self.microphone.chunk.connect(self._chunk)
        self.microphone.level.connect(self._level)
        self.microphone.failed.connect(self._mic_failed)
        self.speaker = Speaker(self)
        self.read_aloud = ReadAloud(self.kit, self.speaker, self)
        self.read_aloud.failed.connect(lambda why: (self._download_ended(), self.info.show_message(why, "error")))
        self.read_aloud.speaking.connect(self._speaking)
        self.read_aloud.downloading.connect(
            lambda spec, done, total: self._downloading(f"the voice {spec}", done, total, "It speaks once it is here."))
        self._download_bar: InfoBar | None = None
        self.dictation: DictationRun | None = None
        self.hands_free = False
        self.interrupted = 0  # times the user spoke over the voice (hands-free)
        self._send_timer = QTimer(self)
        self._send_timer.setSingleShot(True)
        self._send_timer.setInterval(int(HANDS_FREE_PAUSE_S * 1000))
        self._send_timer.timeout.connect(self._hands_free_send)
        self.mic_button = QToolButton()
        self.mic_button.setIcon(theme.microphone_icon())
        self.mic_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.mic_button.setCheckable(True)
        self.mic_button.setStyleSheet("QToolButton:checked { color: #d9480f; font-weight: bold; }")
        self.mic_button.setToolTip("Dictate into the message box (or hold F8 while you speak)")
        self.mic_button.setAccessibleName("Dictate")
        self.mic_button.clicked.connect(self._mic_clicked)
        self.meter = QProgressBar()
        self.meter.setRange(int(LEVEL_FLOOR_DBFS), 0)
        self.meter.setTextVisible(False)
        self.meter.setMaximumHeight(6)
        self.meter.setToolTip("The microphone's level")
        self.meter.hide()
        self._placeholder = chat.input.placeholderText()
        chat.buttons.insertWidget(1, self.mic_button)
        chat.buttons.insertWidget(2, self.meter)
        chat.can_speak = True  # replies get a Speak button (the ones built already too)
        for w in chat.message_widgets():
            w.btn_speak.setVisible(w.role == "assistant")
        chat.speak_requested.connect(self.speak_reply)
        chat.stop_requested.connect(self.read_aloud.stop)
        chat.send_requested.connect(lambda _text: self._sending())
        host.delta.connect(self._reply_delta)
        host.finished.connect(self._reply_ended)
        host.failed.connect(lambda mid, _msg, _partial: self._reply_ended(mid, {}))
        # F8 held: a key the focused widget leaves alone travels up to the window, so the window's filter
        # sees it (an application-wide filter ran Python for every event of every object, streaming included)
        self._window = chat.window()
        self._window.installEventFilter(self)
        self.apply(settings())

    def apply(self, settings: Settings) -> None:
        """Settings → Voice changed: other models load on their next use; a new speed or language loads nothing."""
        choice = voice_settings.choice(settings.voice)
        if not choice.same_models(self.kit.choice):
            self.use(VoiceKit(choice))
        self.read_aloud.speed = float(settings.voice["speed"])

    def use(self, kit: VoiceKit) -> None:
        """Dictate and speak with ``kit``'s models from the next recording or reading on."""
        self.kit = self.read_aloud.kit = kit

    # -- dictation ----------------------------------------------------------

    @property
    def listening(self) -> bool:
        return self.microphone.recording

    def listen(self) -> bool:
        """Start dictating into the box; False (and one line said) when the microphone cannot."""
        if self.listening:
            return True
        self.read_aloud.stop()
        if not self.microphone.start():
            self.mic_button.setChecked(False)
            return False
        self._new_dictation()
        self._show_listening(True)
        return True

    def stop_listening(self) -> None:
        """Stop the microphone; the last words are transcribed and then added to the box."""
        self._send_timer.stop()
        self.microphone.stop()
        self._show_listening(False)
        if self.dictation is not None:
            self.dictation.end()

    def _show_listening(self, on: bool) -> None:
        self.mic_button.setChecked(on)
        self.mic_button.setText("Listening" if on else "")
        self.meter.setVisible(on)
        self.chat.input.setPlaceholderText(
            "Listening… speak, then press the microphone again (your words appear here to edit before sending)"
            if on else self._placeholder)

    def _new_dictation(self) -> None:
        v = self._settings().voice
        run = DictationRun(self.kit, voice_settings.language(v), self,
                           chinese=voice_settings.chinese_script(v, QLocale.system().name()))
        run.text.connect(self._dictated)
        run.downloading.connect(lambda spec, done, total: self._downloading(
            f"the speech model {spec}", done, total, "What you say meanwhile is kept and written once it is here."))
        run.done.connect(lambda heard, r=run: self._dictation_done(r, heard))
        run.failed.connect(lambda why, r=run: self._dictation_failed(r, why))
        self.dictation = run

    def _downloading(self, what: str, done: int, total: int, meanwhile: str) -> None:
        """A Hub speech model on its way (the first use of one not in the cache): one notice, kept up to
        date, gone once the model is here. A failed download is the dictation's or reading's own failure."""
        if total and done >= total:
            self._download_ended()
            return
        text = (f"Downloading {what} from the Hugging Face Hub: {human_bytes(done)} of "
                f"{human_bytes(total) if total else '…'}. {meanwhile}")
        if self._download_bar is None:
            self._download_bar = bar = self.info.show_message(text, "info")
            bar.destroyed.connect(lambda *_: setattr(self, "_download_bar", None))
        else:
            self._download_bar.label.setText(text)

    def _download_ended(self) -> None:
        if self._download_bar is not None:
            self._download_bar.dismiss()
            self._download_bar = None

    def _mic_clicked(self, on: bool) -> None:
        self.hands_free = on and bool(self._settings().voice["hands_free"])
        if on:
            self.listen()
        else:
            self.hands_free = False
            self.stop_listening()

    def _chunk(self, samples) -> None:
        if self.read_aloud.active:
            return  # hands-free, the voice speaking: listened to for a barge-in only (_level)
        if self.dictation is not None:
            self.dictation.feed(samples)

    def _level(self, dbfs: float) -> None:
        self.meter.setValue(int(max(LEVEL_FLOOR_DBFS, dbfs)))
        if self.hands_free and self.read_aloud.active and dbfs > BARGE_IN_DBFS:
            self.interrupted += 1
            self.read_aloud.stop()  # the user speaks over the voice
        elif self.hands_free and self._send_timer.isActive() and dbfs > BARGE_IN_DBFS:
            self._send_timer.start()  # still speaking: wait for the pause

    def _dictated(self, text: str) -> None:
        box = self.chat.input
        box.insertPlainText(joined(box.toPlainText()[:box.textCursor().position()], text))
        if self.hands_free:
            self._send_timer.start()

    def _dictation_done(self, run: DictationRun, heard: bool) -> None:
        if run is self.dictation:
            self.dictation = None
        if not heard and not self.hands_free:
            self.info.show_message("Nothing was heard. Check the microphone and its level.", "info",
                                   timeout_ms=5000)

    def _dictation_failed(self, run: DictationRun, why: str) -> None:
        if run is self.dictation:
            self.dictation = None
        self._download_ended()
        self.stop_listening()
        self.info.show_message(f"Dictation stopped: {why}. What is in the box is kept.", "error")

    def _mic_failed(self, why: str) -> None:
        self.hands_free = False
        self.stop_listening()
        self.info.show_message(f"{why}. What is in the box is kept.", "error")

    def eventFilter(self, obj, e) -> bool:  # noqa: N802 (Qt override)
        kind = e.type()
        if kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease) and matches("talk", e) and \
                not e.isAutoRepeat() and self._window.isActiveWindow():
            if kind == QEvent.Type.KeyPress:
                self.listen()
            else:
                self.stop_listening()
            return True
        return False

    # -- read-aloud ---------------------------------------------------------

    def speak_reply(self, mid: int, text: str) -> None:
        """A reply's Speak button: read it (or, when it is the one being read, stop)."""
        if self.read_aloud.key == mid:
            self.read_aloud.stop()
        else:
            self.read_aloud.read(mid, text)

    def _sending(self) -> None:
        self._send_timer.stop()
        self.read_aloud.stop()
        if self.listening and not self.hands_free:
            self.stop_listening()

    def _reply_delta(self, mid: int, text: str) -> None:
        if not (self._settings().voice["speak_replies"] or self.hands_free):
            return
        if self.read_aloud.key != mid:
            self.read_aloud.start(mid)
        self.read_aloud.feed(text)

    def _reply_ended(self, mid: int, result: dict) -> None:
        if result.get("finish_reason") == "tool_calls":
            return  # the reply goes on after its tools
        if self.read_aloud.key == mid:
            self.read_aloud.finish()
        elif self.hands_free and self.dictation is None:
            self._new_dictation()  # nothing to read: listen again

    def _speaking(self, on: bool) -> None:
        for w in self.chat.message_widgets():
            w.set_speaking(on and w.mid == self.read_aloud.key)
        if not on and self.hands_free and self.listening and self.dictation is None:
            self._new_dictation()  # the reply has been read: the next turn

    def _hands_free_send(self) -> None:
        if self.chat.input.toPlainText().strip():
            run, self.dictation = self.dictation, None
            if run is not None:
                run.cancel()  # what it heard is in the box; the next turn gets a new one
            self.chat.input.submitted.emit()

    def close(self) -> None:
        self._window.removeEventFilter(self)
        self.hands_free = False
        self.stop_listening()
        self.read_aloud.stop()
