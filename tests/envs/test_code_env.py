"""The ``code`` environment: a Python class that implements the tools (state in its
attributes, as BFCL's multi-turn API classes keep it) runs every call for real; snapshot /
restore / hash / diff work on its attributes; Magnet tasks → rejection sampling → verify on
it give verified trajectories, identical on a rerun.

Run: PYTHONPATH=. python -m pytest tests/envs/test_code_env.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.envs import CodeEnvironment, EnvFactory
from trajsynth.envs.code import toolset_from_targets

HERE = Path(__file__).resolve().parent
TARGET = "code_library:Library"


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``code_library`` (next to this file) importable here and in worker processes."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{Path.cwd()}")


def test_specs_from_signatures_and_state_from_attributes() -> None:
    ts = toolset_from_targets([TARGET], name="library")
    assert ts.names() == ["add_book", "find_books", "get_book", "lend_book", "return_book"]
    assert ts["lend_book"].required() == ["book_id", "member_id"]
    assert "books" in ts["find_books"].response["properties"]  # from the TypedDict return
    env = CodeEnvironment("library", [TARGET], ts)
    env.reset()
    start, h0 = env.snapshot(), env.state_hash()
    made = env.call("add_book", title="Ulysses", author="James Joyce")
    assert made.output == {"book_id": "b4", "title": "Ulysses"}
    assert env.call("lend_book", book_id="b4", member_id="m1").ok
    again = env.call("lend_book", book_id="b4", member_id="m2")
    assert again.category == "invalid_value" and "already on loan" in again.error["message"]
    assert env.call("lend_book", book_id="b4").category == "missing_required"
    assert env.call("fly").category == "unknown_tool"
    h1 = env.state_hash()
    assert h1 != h0
    assert any("b4" in line for line in env.diff(start).describe())
    env.restore(start)
    assert env.state_hash() == h0 and env.call("get_book", book_id="b4").category == "invalid_value"
    env.restore(start)  # a snapshot stays usable
    env.call("add_book", title="Ulysses", author="James Joyce")
    env.call("lend_book", book_id="b4", member_id="m1")
    assert env.state_hash() == h1  # same calls, same state, same hash


def test_initial_state_loads_through_load_scenario() -> None:
    f = EnvFactory({"domains": [], "toolsets": {"library": {"backend": "code", "code": [TARGET]}}})
    init = {"Library": {"members": {"m9": {"member_id": "m9", "name": "Grace"}}}}
    env = f.make("library", initial_state=init)
    env.reset()
    assert env.call("lend_book", book_id="b1", member_id="m9").ok
    assert f.make("library").call("lend_book", book_id="b1", member_id="m9").category


def test_bad_import_path_is_one_clear_error() -> None:
    f = EnvFactory({"domains": [], "toolsets": {"x": {"backend": "code", "code": ["no_such:X"]}}})
    with pytest.raises(ConfigError, match="cannot import 'no_such'"):
        f.toolset("x")
    with pytest.raises(ConfigError, match="needs `code`"):
        EnvFactory({"toolsets": {"x": {"backend": "code"}}})


def test_magnet_rejection_verify_on_code_tools(rejection_twice) -> None:
    rejection_twice(
        [
            f"defaults.env.toolsets={{library: {{backend: code, code: ['{TARGET}']}}}}",
            "stages.tasks.with.domains=[library]",
            "stages.tasks.with.tasks_per_domain=4",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=4",
        ],
        tasks=4,
    )


def test_an_output_json_cannot_hold_is_the_call_s_error_not_a_crash() -> None:
    """BFCL's MathAPI raises 5000 to the 2500th power exactly, an integer Python will not
    write out (over 4,300 digits): the call fails as ``tool_crashed``, the run goes on."""
    pytest.importorskip("bfcl_eval")
    target = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api:MathAPI"
    env = CodeEnvironment("math", [target], toolset_from_targets([target], name="math"))
    env.reset()
    huge = env.call("power", base=5000, exponent=2500)
    assert huge.category == "tool_crashed" and "not JSON" in huge.error["message"]
    assert env.call("power", base=2, exponent=10).output == {"result": 1024}
