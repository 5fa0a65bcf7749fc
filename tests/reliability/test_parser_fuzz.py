"""Fuzzed model outputs through the shared parser: nothing raises, nothing is slow.

The long version (10,000 outputs) is ``bench/reliability.py``.
Run: PYTHONPATH=. python -m pytest tests/reliability/test_parser_fuzz.py -q
"""

from __future__ import annotations

from faultkit import fuzz_parser


def test_two_thousand_fuzzed_outputs_parse_without_error_and_under_a_second() -> None:
    report = fuzz_parser(2000, seed=18)
    assert report["crashes"] == []
    assert report["slow"] == 0, report["max_s"]
    assert report["chars"] > 1_000_000  # the pathological ones are in it
