"""What an empty chat shows: a short welcome naming the model loaded, three example prompts, and a hint when
this machine's GPU could run a larger model than the one loaded (app/core/upgrade_hint.py;
app/window/welcome_hint.py works it out after each load)."""
from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

EXAMPLES = (
    "Explain what a hash table is, with a short Python example.",
    "Write a four-line poem about fresh bread.",
    "Give me three tips for a good night's sleep.",
)
INTRO = ("<p>Everything here runs on this computer: the model, your conversations and their search. "
         "Nothing you type leaves it.</p>")
NOT_LOADED = "<p>The status bar shows the model once it has loaded.</p>"
BUNDLED = ("<p>The bundled model, <b>SmolLM2-135M-Instruct</b>, is small and quick: good for trying Hearth out, "
           "not for hard questions.</p>")
LOADED = "<p>The model loaded now is <b>{name}</b>.</p>"
CHOOSE = ("<p>For {which}, open <b>Settings → Model</b> and choose a GGUF file or a Hugging Face model; "
          "Hearth says whether it fits this machine before it downloads or loads anything.</p>")


def welcome_text(model: str | None = None, bundled: bool = False) -> str:
    """The welcome's text, naming the model loaded now (``model``: its label, None before one has
    loaded; ``bundled``: it is the bundled one). A label comes from a file or a Hub id: escaped."""
    if model is None:
        about, which = NOT_LOADED, "a bigger model or another one"
    elif bundled:
        about, which = BUNDLED, "a bigger one"
    else:
        about, which = LOADED.format(name=html.escape(model)), "another one"
    return INTRO + about + CHOOSE.format(which=which)


class WelcomePanel(QFrame):
    """Shown in place of the messages while a conversation has none."""

    prompt_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome")
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)  # grows as its text wraps
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 24, 24, 24)
        lay.setSpacing(10)
        title = QLabel("Welcome to Hearth")
        title.setStyleSheet("font-size: 20px; font-weight: 600;")
        title.setWordWrap(True)
        lay.addWidget(title)
        self.body = QLabel(welcome_text())
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setWordWrap(True)
        lay.addWidget(self.body)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)  # model names come from files: shown as text
        self.hint.setStyleSheet("border: 1px solid palette(highlight); border-radius: 6px; padding: 8px;")
        self.hint.hide()
        lay.addWidget(self.hint)
        lay.addWidget(QLabel("Try one:"))
        self.examples: list[QPushButton] = []
        for text in EXAMPLES:
            b = QPushButton(text)
            b.setToolTip(f"Send: {text}")
            # A button is as wide as its text at least; in a narrow chat pane (the Models dock open) that
            # widened the page past the view and cut the welcome text off. Let it shrink instead.
            b.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
            b.setStyleSheet("text-align: left; padding: 6px 10px;")
            b.clicked.connect(lambda _=False, t=text: self.prompt_chosen.emit(t))
            lay.addWidget(b)
            self.examples.append(b)

    def set_model(self, model: str | None, bundled: bool = False) -> None:
        """Name the model loaded now (None: none has loaded yet); see welcome_text."""
        self.body.setText(welcome_text(model, bundled))

    def set_hint(self, text: str | None) -> None:
        """Show (or hide, with None) the larger-model hint."""
        self.hint.setText(text or "")
        self.hint.setVisible(bool(text))
