"""Answers checked against gold answers, as open-domain QA scores them (SQuAD's normalisation;
Search-R1's exact-match reward, and token F1):

- :func:`extract_answer`: the text between ``<answer>`` and ``</answer>`` when the reply has
  it (the last such span), else the whole reply;
- :func:`normalize_answer`: lower case, punctuation, articles (a, an, the) and extra spaces
  removed;
- :func:`answer_exact_match`: 1.0 when the normalised answer equals a gold one;
- :func:`answer_f1`: the best token F1 against the gold answers.

>>> answer_exact_match("I found it: <answer>The Dallas.</answer>", ["Dallas"])
1.0
>>> round(answer_f1("It is in Dallas, Texas", ["Dallas"]), 3)
0.333
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["answer_exact_match", "answer_f1", "extract_answer", "normalize_answer"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def extract_answer(text: str | None) -> str:
    spans = _ANSWER.findall(text or "")
    return spans[-1].strip() if spans else (text or "").strip()


def normalize_answer(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def answer_exact_match(reply: str | None, golds: Sequence[str]) -> float:
    pred = normalize_answer(extract_answer(reply))
    return float(any(pred == normalize_answer(g) for g in golds))


def answer_f1(reply: str | None, golds: Sequence[str]) -> float:
    pred = normalize_answer(extract_answer(reply)).split()
    best = 0.0
    for gold in golds:
        want = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(want)).values())
        if common:
            p, r = common / len(pred), common / len(want)
            best = max(best, 2 * p * r / (p + r))
    return best
