"""The examples in the quality modules' docstrings are tests too (they hold exact values:
apportionment, water filling, LSH band choice, pass@k, histograms, error detection, ...).

Run: python -m pytest tests/quality/test_doctests.py -q
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "trajsynth.core.embeddings",
    "trajsynth.quality.balance",
    "trajsynth.quality.columns",
    "trajsynth.quality.dedup",
    "trajsynth.quality.difficulty",
    "trajsynth.quality.diversity",
    "trajsynth.quality.scores",
    "trajsynth.quality.stats",
    "trajsynth.quality.trace",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
