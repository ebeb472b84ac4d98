"""Reading replies: code blocks with Pygments colours, a language label and a Copy link each
(copying only that block); shaded inline code; headings; ruled tables; nothing raw passes."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QDesktopServices, QTextFormat, QTextTable, QTextCursor

from app.core.code_highlight import label_for, lexer_for, spans
from app.chat.markdown_render import COPY_SCHEME, code_groups
from app.ui.theme import BUBBLES
from tests.test_app_safe_links import SCHEMES, _Catcher, _click_link, _fragments, _reply


@pytest.fixture
def opened():
    """Every URL QDesktopServices is asked to open; nothing really opens."""
    catcher = _Catcher()
    for scheme in SCHEMES + (COPY_SCHEME,):
        QDesktopServices.setUrlHandler(scheme, catcher, "handle")
    yield catcher.urls
    for scheme in SCHEMES + (COPY_SCHEME,):
        QDesktopServices.unsetUrlHandler(scheme)

REPLY = """## Adding numbers

Use `add` like this:

```python
def add(a, b):
    return a + b  # sum
```

| Name | Size |
|------|-----:|
| one  | 1 |

```js
console.log("second");
```
"""


def test_spans_cover_the_exact_code_and_unknown_languages_stay_plain():
    code = "\ndef f():\n    return 'x'\n\n"
    got = spans(code, "python", "light")
    assert [code[s.start:s.end] for s in got if s.bold] == ["def", "return"]
    assert any(code[s.start:s.end] == "'x'" and s.color for s in got)
    assert got[-1].end <= len(code)
    assert spans(code, "", "light") == [] and spans(code, "no-such-language", "dark") == []
    assert (label_for("py"), label_for("JavaScript"), label_for(""), label_for("zzz")) == \
        ("Python", "JavaScript", "text", "text")
    assert lexer_for("python") is lexer_for("python")  # built once
    light, dark = spans(code, "python", "light"), spans(code, "python", "dark")
    assert [s.color for s in light] != [s.color for s in dark]  # colours follow the theme


def _color_at(view, needle: str) -> str:
    doc = view.document()
    pos = doc.toPlainText().index(needle)
    cursor = QTextCursor(doc)
    cursor.setPosition(pos + 1)
    return cursor.charFormat().foreground().color().name()


def test_a_reply_shows_coloured_labelled_code_tables_headings_and_inline_code(qtbot, opened):
    w = _reply(qtbot, REPLY)
    view = w.body
    doc = view.document()
    text = doc.toPlainText()
    assert "Python   Copy" in text and "JavaScript   Copy" in text  # a label and a Copy link per block
    assert view.codes == ['def add(a, b):\n    return a + b  # sum', 'console.log("second");']
    assert _color_at(view, "def") != _color_at(view, "add(a") != "#000000"
    assert len(code_groups(doc)) == 2
    assert any(b[0].blockFormat().background().color().name() == BUBBLES["light"]["code"] for b in code_groups(doc))
    heading = doc.findBlock(text.index("Adding numbers"))
    assert heading.blockFormat().headingLevel() == 2
    inline = next(f for f in _fragments(doc) if f.text() == "add" and f.charFormat().fontFixedPitch())
    assert inline.charFormat().background().color().name() == BUBBLES["light"]["code"]
    tables = {QTextCursor(b).currentTable().firstPosition() for b in _blocks(doc)
              if isinstance(QTextCursor(b).currentTable(), QTextTable)}
    assert len(tables) == 1
    table = next(QTextCursor(b).currentTable() for b in _blocks(doc) if QTextCursor(b).currentTable())
    assert table.format().border() == 1 and (table.rows(), table.columns()) == (2, 2)

    copied: list[str] = []
    w.copy_requested.connect(copied.append)  # the chat view puts it on the clipboard
    hrefs = [f.charFormat().anchorHref() for f in _fragments(doc) if f.charFormat().anchorHref()]
    assert len(hrefs) == 2 and all(h.startswith(COPY_SCHEME + ":") for h in hrefs)
    assert _click_link(qtbot, view, hrefs[1]) == []  # no dialog: it is the view's own link
    assert copied == ['console.log("second");']  # that block only
    assert _click_link(qtbot, view, hrefs[0]) == []
    assert copied[-1] == "def add(a, b):\n    return a + b  # sum"
    assert opened == []


def test_a_copy_link_written_by_the_model_is_an_ordinary_refused_link(qtbot, opened):
    forged = f"[Copy]({COPY_SCHEME}:0000000000000000/0)\n\n```\nsecret\n```\n"
    w = _reply(qtbot, forged)
    notes: list[str] = []
    copied: list[str] = []
    w.notify.connect(notes.append)
    w.copy_requested.connect(copied.append)
    assert _click_link(qtbot, w.body, f"{COPY_SCHEME}:0000000000000000/0") == []
    assert copied == [] and opened == []
    assert notes and "Not opened" in notes[0]


def test_raw_html_and_scripts_in_code_stay_text(qtbot, opened):
    w = _reply(qtbot, "```html\n<script>alert(1)</script><b>x</b>\n```\n\n<b>bold?</b>")
    text = w.rendered_text()
    assert "<script>alert(1)</script><b>x</b>" in text and "<b>bold?</b>" in text
    assert w.body.codes == ["<script>alert(1)</script><b>x</b>"]
    assert not any(f.charFormat().fontWeight() > 600 for f in _fragments(w.body.document()) if f.text() == "bold?")


def test_the_dark_theme_recolours_code(qtbot):
    w = _reply(qtbot, REPLY)
    light = _color_at(w.body, "def")
    w.apply_colors(BUBBLES["dark"])
    assert _color_at(w.body, "def") != light
    assert code_groups(w.body.document())[0][0].blockFormat().background().color().name() == BUBBLES["dark"]["code"]


def _blocks(doc):
    b = doc.begin()
    while b.isValid():
        yield b
        b = b.next()


def test_the_header_is_not_part_of_the_code(qtbot):
    w = _reply(qtbot, REPLY)
    first = code_groups(w.body.document())[0][0]
    assert first.text() == "def add(a, b):"
    assert not first.previous().blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)
