"""``python -m app --bench-open``: how long opening a long chat takes in the real window.

Three conversations are written to a scratch store: a 10-message chat (the
reference), a 1,000-message chat and one reply of about 10,000 tokens (prose,
lists, tables and code). Each is opened the way a click in the list opens it,
and timed until the window has laid it out and painted. The target is under
1 s for both long cases; the ratio to the reference is printed beside each,
because a shared machine's absolute times vary.
"""
from __future__ import annotations

import json
import time

from PySide6.QtWidgets import QApplication

TURN = ("The baker kneads the dough, shapes the loaf and waits for it to rise; "
        "then the oven does the rest. ")
SECTION = """## Step {i}

Mix the **flour** and `water`, then rest it. A list:

- first, weigh everything
- then knead for *ten* minutes

| Ingredient | Grams |
|------------|------:|
| flour      | 500 |
| water      | 350 |

```python
def hydration(flour: int, water: int) -> float:
    # baker's percentage
    return 100 * water / flour  # step {i}
```

""" + TURN * 3 + "\n\n"
TOKENS_PER_CHAR = 0.305  # this Markdown, by the bundled model's tokenizer (the test checks it)


def long_reply(tokens: int = 10_000) -> str:
    """Markdown of about ``tokens`` tokens."""
    out, i = [], 0
    while sum(map(len, out)) * TOKENS_PER_CHAR < tokens:
        out.append(SECTION.format(i=i))
        i += 1
    return "".join(out)


def _fill(store, cid: int, messages: list[tuple[str, str]]) -> None:
    with store._tx() as c:  # one transaction: a commit per message would time the disk instead
        for role, text in messages:
            leaf = c.execute("SELECT leaf_id FROM conversations WHERE id = ?", (cid,)).fetchone()[0]
            store._insert(c, cid, role, text, True, leaf)


def _open(app: QApplication, win, cid: int) -> float:
    win.select_conversation(win.store.create_conversation().id)  # leave whatever was open
    app.processEvents()
    t0 = time.perf_counter()
    win.select_conversation(cid)
    app.processEvents()  # layout and the first paint
    win.repaint()
    return time.perf_counter() - t0


def run(repeats: int = 3) -> dict:
    """Open each case ``repeats`` times; the best time of each, in seconds."""
    from app.window.main_window import MainWindow

    app = QApplication.instance()
    win = MainWindow()
    win.show()
    app.processEvents()
    s = win.store
    cases = {}
    for name, messages in (
            ("10 messages (reference)", [("user" if i % 2 == 0 else "assistant", f"Turn {i}. {TURN}")
                                         for i in range(10)]),
            ("1,000 messages", [("user" if i % 2 == 0 else "assistant", f"Turn {i}. {TURN}")
                                for i in range(1000)]),
            ("one 10k-token reply", [("user", "Write a long guide."), ("assistant", long_reply())])):
        cid = s.create_conversation(title=name).id
        _fill(s, cid, messages)
        cases[name] = cid
    best = {name: min(_open(app, win, cid) for _ in range(repeats)) for name, cid in cases.items()}
    built = {name: None for name in cases}
    for name, cid in cases.items():
        win.select_conversation(cid)
        built[name] = len(win.chat.message_widgets())
    win.close()
    return {"seconds": best, "widgets_built": built}


def main() -> int:
    """Print one line per case and a JSON summary; exit 1 when a long case takes 1 s or more."""
    result = run()
    best = result["seconds"]
    ref = best["10 messages (reference)"]
    for name, sec in best.items():
        print(f"{name:28s} {sec * 1000:8.1f} ms   x{sec / ref:5.1f} of the reference   "
              f"{result['widgets_built'][name]} message widgets built")
    print(json.dumps(result))
    return 0 if all(sec < 1.0 for sec in best.values()) else 1
