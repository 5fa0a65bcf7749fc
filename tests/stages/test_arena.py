"""``arena`` stage and ``trajsynth arena`` CLI: verified rows become checksummed packages
(lineage kept, unverified rows skipped); ``code: llm`` retries a tool maker whose first
function is wrong and gives up on one that never gets it right; ``arena pack`` writes one
file per package and ``arena check`` verifies a folder, with one clear error otherwise.

Run: PYTHONPATH=. python -m pytest tests/stages/test_arena.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli import app, main
from trajsynth.core import to_batch, to_records
from trajsynth.envs import EnvFactory
from trajsynth.envs.arena import ArenaPackage, arena_reward, load_arenas
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.store import ShardWriter

FACTORY = EnvFactory()


def verified_rows() -> list:
    return [
        t.to_trajectory(FACTORY.toolset("math")).derive(success=True)
        for t in FACTORY.example_tasks("math")
    ]


def run(rows: list, ctx: Context, **cfg) -> list:
    stage = build_stage("arena", cfg)
    return [r for b in stage.process(iter([to_batch(rows)]), ctx) for r in to_records(b)]


def test_verified_rows_become_packages() -> None:
    rows = verified_rows()
    rows[0] = rows[0].derive(success=False)
    ctx = Context(ContextSpec(stage_id="arena"))
    out = run(rows, ctx, code="table", distractors=2)
    c = ctx.metrics.snapshot()["counters"]
    # unverified: skipped; tasks whose gold fails on purpose: not packed
    assert c["skipped.unverified"] == 1 and c["rejected.expected_errors"] >= 1
    assert c["packed"] == len(out) >= 3
    for r in out:
        p = ArenaPackage.model_validate(r.extra["arena"])
        assert p.checksum == p.digest() and p.source["row_id"] == r.parent_ids[0]
        assert r.method == "arena" and len(p.distractors) == 2
        gold = [(g.call.name, g.call.arguments) for g in p.sub_goals]
        assert arena_reward(p, gold).reward == 1.0


def test_llm_tool_maker_is_retried_then_accepted_or_rejected() -> None:
    row = next(r for r in verified_rows() if r.task_id == "math-marathon-miles")
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    name = gold["name"]
    good = f"def {name}(**kwargs):\n    return {json.loads(json.dumps(gold['output']))!r}\n"
    bad = f"def {name}(**kwargs):\n    return {{'result': -1}}\n"
    answers = iter([f"```python\n{bad}```", f"```python\n{good}```"])

    def maker(req: ChatRequest) -> str:
        assert name in req.messages[0]["content"]
        return next(answers)

    ctx = Context(ContextSpec(stage_id="arena"))
    backend = use_scripted(ctx, "tool_maker", maker)
    out = run([row], ctx, code="llm", distractors=0)
    assert len(out) == 1 and len(backend.requests) == 2
    assert "previous code was wrong" in backend.requests[1].messages[1]["content"]
    p = ArenaPackage.model_validate(out[0].extra["arena"])
    assert p.implementation.kind == "code" and "return" in p.implementation.code[name]

    ctx = Context(ContextSpec(stage_id="arena"))
    use_scripted(ctx, "tool_maker", lambda req: f"```python\n{bad}```")
    assert run([row], ctx, code="llm", tries=2) == []
    assert ctx.metrics.snapshot()["counters"]["rejected.tool_code"] == 1


def test_cli_pack_and_check(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "verified") as w:
        w.write(to_batch(verified_rows()))
    cli = CliRunner()
    res = cli.invoke(app, ["arena", "pack", str(tmp_path / "verified"), "--out",
                           str(tmp_path / "arenas"), "--code", "reference"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "arenas →" in res.output and "meant to fail" in res.output
    packages = load_arenas(tmp_path / "arenas")
    index = json.loads((tmp_path / "arenas" / "index.json").read_text())
    assert len(packages) == len(index) >= 3
    assert {p.implementation.kind for p in packages} == {"builtin"}
    res = cli.invoke(app, ["arena", "check", str(tmp_path / "arenas"), "--json"])
    assert res.exit_code == 0, res.output
    assert {r["gold_reward"] for r in json.loads(res.output)} == {1.0}
    # a changed package: one message, exit code 2, no traceback
    victim = tmp_path / "arenas" / f"{packages[0].uuid}.json"
    data = json.loads(victim.read_text())
    data["main_question"] += " (edited)"
    victim.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:
        main(["arena", "check", str(tmp_path / "arenas")])
    assert exc.value.code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["arena", "check", str(empty)])
    assert exc.value.code == 2
