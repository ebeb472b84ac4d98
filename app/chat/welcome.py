"""What an empty chat shows: a short welcome, three example prompts, and a hint when
this machine's GPU could run a larger model than the one loaded (app/core/upgrade_hint.py;
app/window/welcome_hint.py works it out after each load)."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

EXAMPLES = (
    "Explain what a hash table is, with a short Python example.",
    "Write a four-line poem about fresh bread.",
    "Give me three tips for a good night's sleep.",
)
WELCOME = (
    "<p>Everything here runs on this computer: the model, your conversations and their search. "
    "Nothing you type leaves it.</p>"
    "<p>The bundled model, <b>SmolLM2-135M-Instruct</b>, is small and quick: good for trying Hearth out, "
    "not for hard questions.</p>"
    "<p>For a bigger one, open <b>Settings → Model</b> and choose a GGUF file or a Hugging Face model; "
    "Hearth says whether it fits this machine before it downloads or loads anything.</p>"
)


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
        self.body = QLabel(WELCOME)
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

    def set_hint(self, text: str | None) -> None:
        """Show (or hide, with None) the larger-model hint."""
        self.hint.setText(text or "")
        self.hint.setVisible(bool(text))
