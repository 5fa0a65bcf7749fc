"""The ``>>>`` examples in the envs modules' docstrings run and hold.

Run: PYTHONPATH=. python -m pytest tests/envs/test_doctests.py -q
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "trajsynth.envs.spec",
    "trajsynth.envs.state",
    "trajsynth.envs.tools",
    "trajsynth.envs.verifiers.schema",
    "trajsynth.envs.verifiers.call_match",
    "trajsynth.envs.verifiers.final_state",
    "trajsynth.envs.importers.bfcl",
    "trajsynth.envs.importers.stabletoolbench",
    "trajsynth.envs.importers.toolalpaca",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
