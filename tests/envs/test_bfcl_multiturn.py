"""BFCL's multi-turn API classes (PyPI ``bfcl-eval``, installed without its dependencies) as a
``code`` domain: replaying BFCL's own multi-turn ground truth through our environment gives,
call for call, the results BFCL's evaluator gets, and end states BFCL's state checker accepts,
on every base entry; and Magnet tasks synthesized on those classes execute and verify.

Run: PYTHONPATH=. python -m pytest tests/envs/test_bfcl_multiturn.py -q
"""

from __future__ import annotations

import ast
import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core import GroundTruth, to_records
from trajsynth.envs import CodeEnvironment, EnvFactory
from trajsynth.envs.code import toolset_from_targets
from trajsynth.stages import Context, ContextSpec, build_stage

pytest.importorskip("bfcl_eval")
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
    state_checker,
)
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
    execute_multi_turn_func_call,
)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _targets(classes: list[str]) -> list[str]:
    return [f"{CLASS_FILE_PATH_MAPPING[c]}:{c}" for c in classes]


def _parse(call: str, env: CodeEnvironment) -> tuple[str, dict[str, Any]]:
    """A BFCL call string (Python syntax, positional arguments allowed) → name, arguments."""
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call)
    name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    cls, method = env.routes[name]
    params = [p for p in inspect.signature(getattr(env.objects[cls], method)).parameters]
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return name, args


def _as_bfcl(result: Any) -> Any:
    """Our result as BFCL's evaluator records it: a dict as JSON, a string as it is, anything
    else as ``str()``; BFCL's ``{"error": ...}`` dicts are our ``invalid_value`` errors."""
    if result.error is not None:
        if result.category == "invalid_value":
            return {"error": result.error["message"]}
        return "Error"
    out = result.output
    return out if isinstance(out, (dict, str)) else str(out)


def _from_bfcl(text: str) -> Any:
    if text.startswith("Error during execution"):
        return "Error"
    if not text.startswith("{"):
        return text
    try:
        return json.loads(text)
    except ValueError:  # BFCL falls back to str() for a dict JSON cannot hold (mpmath
        # numbers): read it back with those numbers as the text our JSON gives them
        return eval(text, {"__builtins__": {}, "mpf": float})


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):  # mpmath values BFCL shows rounded
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-3)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_gold_replay_agrees_with_bfcl_on_every_base_entry(external_dir: Path) -> None:
    bfcl = external_dir / "bfcl"
    entries = _jsonl(bfcl / "BFCL_v4_multi_turn_base.json")
    answers = {
        a["id"]: a["ground_truth"]
        for a in _jsonl(bfcl / "possible_answer/BFCL_v4_multi_turn_base.json")
    }
    assert len(entries) == 200
    calls = agree = 0
    for entry in entries:
        targets = _targets(entry["involved_classes"])
        env = CodeEnvironment(
            entry["id"], targets, toolset_from_targets(targets),
            initial_state=entry["initial_config"], validate_arguments=False,
        )  # fmt: skip
        env.reset()
        for turn in answers[entry["id"]]:
            ours = []
            for call in turn:
                name, args = _parse(call, env)
                ours.append(_as_bfcl(env.call(name, args)))
            theirs, instances = execute_multi_turn_func_call(
                turn, entry["initial_config"], entry["involved_classes"], "trajsynth_gold",
                entry["id"], is_evaL_run=True,
            )  # fmt: skip
            expected = [_from_bfcl(t) for t in theirs]
            calls += len(turn)
            agree += sum(_same(a, b) for a, b in zip(ours, expected, strict=True))
            assert all(map(_same, ours, expected)), (entry["id"], turn, ours, expected)
        # BFCL's own state checker: our end state against its gold end state
        verdict = state_checker(env.objects, instances)
        assert verdict["valid"], (entry["id"], verdict)
    assert calls == agree and calls >= 1100  # FORMATS.md: 1142 gold calls


def test_magnet_tasks_on_bfcl_classes() -> None:
    classes = ["TwitterAPI", "TicketAPI"]
    toolsets = {c.lower(): {"backend": "code", "code": _targets([c])} for c in classes}
    env_cfg = {"domains": [], "toolsets": toolsets}
    stage = build_stage(
        "magnet_tasks", {"graph": {"similarity": "lexical"}, "tasks_per_domain": 4, "split_p": 0}
    )
    ctx = Context(ContextSpec(stage_id="tasks", seed=0, env=env_cfg))
    rows = [r for b in stage.generate(ctx, 0) for r in to_records(b)]
    assert {r.domain for r in rows} == set(toolsets) and len(rows) == 8
    factory = EnvFactory(env_cfg)
    for r in rows:  # the gold calls run on BFCL's classes, reproducing outputs and end state
        gt = GroundTruth.from_json(r.ground_truth)
        env = factory.make(r.domain, seed=gt.env_seed)
        env.reset(gt)
        for c in gt.flat_calls():
            result = env.call(c.name, c.arguments)
            assert result.ok and result.output == c.output, (r.id, c.name, result.error)
        assert env.state_hash() == gt.final_state_hash
