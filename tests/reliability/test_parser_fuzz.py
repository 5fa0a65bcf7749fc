"""Fuzzed model outputs through the shared parser: nothing raises, nothing is slow; and the
other readers of model text (EDDE's samples, the arena's code blocks, schema patterns) stay
linear on adversarial replies.

The long version (10,000 outputs and every long shape up to the 200,000-character cap) is
``bench/reliability.py --fuzz-only``. Each parse here runs under :func:`faultkit.cpu_limit`, so
a quadratic case fails in seconds instead of running for minutes; the limits are loose (a
parse of 200,000 characters takes milliseconds), they only tell bounded from runaway work.
Run: PYTHONPATH=. python -m pytest tests/reliability/test_parser_fuzz.py -q
"""

from __future__ import annotations

import time

from faultkit import cpu_limit, fuzz_parser

from trajsynth.llm.parsing import parse_output


def test_two_thousand_fuzzed_outputs_parse_without_error_and_under_a_second() -> None:
    report = fuzz_parser(2000, seed=18)
    assert report["crashes"] == []
    assert report["slow"] == 0, report["max_s"]
    assert report["chars"] > 1_000_000  # the pathological ones are in it


def test_a_fence_followed_by_letters_parses_in_linear_time() -> None:
    """Issue 23: three backticks and a run of letters made the fence pattern backtrack
    (4.5 s at 20,000 characters, minutes at the 200,000 cap)."""
    for n in (20_000, 200_000):
        for unit in ("x", "\n", " "):
            text = "```" + unit * (n - 3)
            start = time.thread_time()
            with cpu_limit(3.0):
                r = parse_output(text)
            assert time.thread_time() - start < 1.0, (n, repr(unit))
            assert r.calls == [] and r.errors == [] and r.content == text.strip()


def test_long_adversarial_outputs_up_to_the_cap_parse_in_bounded_time() -> None:
    report = fuzz_parser(0, long_chars=200_000, slow_s=0.25, limit_s=3.0)
    assert report["crashes"] == []
    assert report["slow"] == 0, (report["max_cpu_s"], report["slowest"])
    assert report["max_chars"] == 200_000
    assert report["outputs"] > 150  # every shape, at four sizes


def test_other_readers_of_model_text_are_linear() -> None:
    """EDDE's INPUT/OUTPUT split (cubic before), the arena's code block (quadratic) and a
    tool schema's ``pattern`` applied to a model's argument (the ``regex`` time limit)."""
    from trajsynth.envs.verifiers.schema import check_arguments
    from trajsynth.stages.looptool.edde import parse_generation
    from trajsynth.stages.methods.arena import code_block

    with cpu_limit(5.0):
        assert parse_generation("INPUT:" + " " * 100_000, []) == (None, "no_input_output")
        assert parse_generation("INPUT:" * 30_000, []) == (None, "no_input_output")
        assert code_block("```" + "\n" * 200_000) is None
        assert code_block("```" + " \n" * 100_000) is None
        assert code_block("text\n```python\nprint(1)\n```\nmore") == "print(1)\n"
        email = r"^([a-zA-Z0-9_\-\.]+)@([a-zA-Z0-9_\-\.]+)\.([a-zA-Z]{2,5})$"
        schema = {"type": "object", "properties": {"to": {"type": "string", "pattern": email}}}
        issues = check_arguments(schema, {"to": "a@" + "a." * 50_000 + "!"})
        assert [i.category for i in issues] == ["constraint_violation"]
        assert check_arguments(schema, {"to": "ann@example.com"}) == []
