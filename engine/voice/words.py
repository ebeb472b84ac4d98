"""Word error rate: how far a transcript is from what was said (the benchmark's and the tests' measure).

Words are compared as people would: case, punctuation and spacing ignored,
numbers 0-99 written out ("5" and "five" are the same word: Whisper writes
digits where the speaker said the word), and each Chinese character counted as
a word of its own (so for Chinese the rate is the character error rate).
"""
from __future__ import annotations

import re

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_TOKEN = re.compile(r"[\u3400-\u9fff]|[a-z0-9']+")


def _number(n: int) -> list[str]:
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10 - 2]] + ([_ONES[n % 10]] if n % 10 else [])
    return [str(n)]


def words(text: str) -> list[str]:
    out: list[str] = []
    for tok in _TOKEN.findall(text.lower().replace("-", " ")):
        tok = tok.strip("'")
        if tok.isdigit():
            out += _number(int(tok))
        elif tok:
            out.append(tok)
    return out


def error_rate(reference: str, heard: str) -> float:
    """(substitutions + deletions + insertions) / words in ``reference``, over :func:`words`."""
    ref, hyp = words(reference), words(heard)
    if not ref:
        return 0.0 if not hyp else 1.0
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / len(ref)
