"""Arena packages (ASTRA, arXiv:2601.21558) on BFCL's ``math_api``: code for ``add`` and
``multiply`` is accepted only when the sandbox reproduces the gold outputs (tampered code is
rejected at packing); the reward comes from the package alone — full solve 1, half solved
recall 0.5, extra calls precision < 1, dependencies in order — in a process with no network
and no LLM layer; a package changed after packing is refused; the package runs as an
environment.

Run: PYTHONPATH=. python -m pytest tests/envs/test_arena.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trajsynth.core import GroundTruth, Message, Trajectory
from trajsynth.core.task import GoldCall, GoldTurn
from trajsynth.envs import Sandbox
from trajsynth.envs.arena import (
    ArenaEnvironment,
    ArenaError,
    arena_reward,
    load_package,
    pack_arena,
)
from trajsynth.envs.episode import run_episode
from trajsynth.envs.importers.bfcl import convert_function
from trajsynth.stages.common.replay import calls_message

ADD = "def add(a, b):\n    return {'result': a + b}\n"
MULTIPLY = "def multiply(a, b):\n    return {'result': a * b}\n"
TAMPERED = "def multiply(a, b):\n    return {'result': a + b}\n"  # wrong output


@pytest.fixture(scope="module")
def math_api(external_dir: Path) -> list[dict]:
    docs = external_dir / "bfcl" / "multi_turn_func_doc" / "math_api.json"
    fns = [json.loads(line) for line in docs.read_text().splitlines() if line.strip()]
    return [convert_function(f).to_openai() for f in fns]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox() as sb:
        yield sb


def task_row(tools: list[dict]) -> Trajectory:
    """ "What is (3 + 4) × 5?": add, then multiply the sum by 5 (a verified trajectory)."""
    gt = GroundTruth(
        turns=[
            GoldTurn(
                request="What is (3 + 4) multiplied by 5?",
                steps=[
                    [GoldCall(name="add", arguments={"a": 3.0, "b": 4.0}, output={"result": 7.0})],
                    [
                        GoldCall(
                            name="multiply",
                            arguments={"a": 7.0, "b": 5.0},
                            output={"result": 35.0},
                        )
                    ],
                ],
                answer="35",
            )
        ],
        extra={"bindings": [{"call": 1, "param": "a", "from_call": 0, "path": "result"}]},
    )
    return Trajectory(
        id="math-api-row",
        task_id="math-api-1",
        goal=gt.turns[0].request,
        domain="math_api",
        ground_truth=gt.model_dump(mode="json"),
        tools=tools,
        success=True,
        method="rejection_sampling",
    )


def test_code_must_reproduce_the_gold_outputs(math_api: list[dict], sandbox: Sandbox) -> None:
    row = task_row(math_api)
    package = pack_arena(row, code={"add": ADD, "multiply": MULTIPLY}, sandbox=sandbox)
    assert [g.call.name for g in package.sub_goals] == ["add", "multiply"]
    assert package.sub_goals[1].dependency == [0]
    assert package.sub_goals[1].call.output == {"result": 35.0}
    # distractors: three more math_api tools, not needed by the task
    names = [t["function"]["name"] for t in package.tools]
    assert names[:2] == ["add", "multiply"] and len(names) == 5
    assert package.distractors == names[2:] and not {"add", "multiply"} & set(names[2:])
    assert package.checksum == package.digest()
    with pytest.raises(ArenaError, match="multiply does not reproduce the gold output"):
        pack_arena(row, code={"add": ADD, "multiply": TAMPERED}, sandbox=sandbox)
    with pytest.raises(ArenaError, match="no code for tools"):
        pack_arena(row, code={"add": ADD}, sandbox=sandbox)
    with pytest.raises(ArenaError, match="no reference implementation"):
        pack_arena(row, code="reference", sandbox=sandbox)
    # generated mock-data code passes by construction; unverified rows are never packed
    assert pack_arena(row, code="table", sandbox=sandbox).implementation.kind == "code"
    with pytest.raises(ArenaError, match="not a verified success"):
        pack_arena(row.derive(success=False), code="table", sandbox=sandbox)


def test_reward_from_the_package_alone(math_api: list[dict], sandbox: Sandbox) -> None:
    package = pack_arena(task_row(math_api), code={"add": ADD, "multiply": MULTIPLY},
                         sandbox=sandbox)  # fmt: skip
    add = ("add", {"a": 3, "b": 4})
    mul = ("multiply", {"a": 7, "b": 5})
    full = arena_reward(package, [add, mul])
    assert (full.reward, full.precision, full.recall) == (1.0, 1.0, 1.0)
    half = arena_reward(package, [add])
    assert half.recall == 0.5 and half.precision == 1.0 and half.reward == pytest.approx(2 / 3)
    spam = arena_reward(package, [add, add, ("subtract", {"a": 1, "b": 1}), mul])
    assert spam.recall == 1.0 and spam.precision == 0.5 and spam.reward < 1.0
    assert spam.extra_calls == 2
    # the DAG: multiplying before the sum exists solves nothing for multiply
    assert arena_reward(package, [mul, add]).solved == (0,)
    assert arena_reward(package, []).reward == 0.0
    # from messages, as an episode records them
    msgs = [calls_message([{"name": n, "arguments": a}], key=i) for i, (n, a) in enumerate([add])]
    assert arena_reward(package, msgs).recall == 0.5


def test_reward_runs_with_no_network_and_no_llm(
    math_api: list[dict], sandbox: Sandbox, tmp_path: Path
) -> None:
    package = pack_arena(task_row(math_api), code={"add": ADD, "multiply": MULTIPLY},
                         sandbox=sandbox)  # fmt: skip
    path = tmp_path / f"{package.uuid}.json"
    path.write_text(package.model_dump_json())
    script = f"""
import socket, sys, json
def refuse(*a, **k):
    raise RuntimeError("network used")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
from trajsynth.envs.arena import arena_reward, load_package
p = load_package({str(path)!r})
r = arena_reward(p, [("add", {{"a": 3, "b": 4}}), ("multiply", {{"a": 7, "b": 5}})])
banned = [m for m in sys.modules if m.startswith(("trajsynth.llm", "openai", "httpx", "torch"))]
print(json.dumps({{"reward": r.reward, "banned": banned}}))
"""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"reward": 1.0, "banned": []}


def test_a_package_changed_after_packing_is_refused(
    math_api: list[dict], sandbox: Sandbox, tmp_path: Path
) -> None:
    package = pack_arena(task_row(math_api), code={"add": ADD, "multiply": MULTIPLY},
                         sandbox=sandbox)  # fmt: skip
    data = json.loads(package.model_dump_json())
    data["implementation"]["code"]["multiply"] = TAMPERED
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ArenaError, match="modified after packing"):
        load_package(path)
    path.write_text("{not json")
    with pytest.raises(ArenaError, match="not an arena package"):
        load_package(path)


def test_the_package_runs_as_an_environment(math_api: list[dict], sandbox: Sandbox) -> None:
    import asyncio

    package = pack_arena(task_row(math_api), code={"add": ADD, "multiply": MULTIPLY},
                         sandbox=sandbox)  # fmt: skip
    env = ArenaEnvironment(package, sandbox=sandbox)
    assert package.distractors[0] == "mean"  # closest in words to add and multiply
    plan = [
        ("add", {"a": 3, "b": 4}),
        ("mean", {"numbers": [3, 4]}),
        ("multiply", {"a": 7, "b": 5}),
    ]

    async def policy(messages: list[Message], tools: list[dict]) -> Message:
        done = sum(1 for m in messages if m.role == "assistant")
        if done < len(plan):
            name, args = plan[done]
            return calls_message([{"name": name, "arguments": args}], key=done)
        return Message(role="assistant", content="35")

    result = asyncio.run(run_episode(package.ground_truth, env, policy, tools=package.tools))
    outputs = [m.content for m in result.messages if m.role == "tool"]
    assert json.loads(outputs[0]) == {"result": 7} and json.loads(outputs[2]) == {"result": 35}
    assert "no record" in outputs[1]  # a distractor knows nothing of this task
    r = env.reward(result.messages)
    assert r.recall == 1.0 and r.precision == pytest.approx(2 / 3)
    # tools the package does not offer are unknown; snapshots restore the call log
    env.reset(package.ground_truth)
    snap = env.snapshot()
    env.call("add", {"a": 3, "b": 4})
    assert env.call("subtract", {"a": 2, "b": 3}).category == "unknown_tool"
    assert len(env.diff(snap)) == 1
    env.restore(snap)
    assert len(env.diff(snap)) == 0


def test_builtin_reference_arena(sandbox: Sandbox) -> None:
    from trajsynth.envs import EnvFactory

    factory = EnvFactory()
    task = next(t for t in factory.example_tasks("math") if t.task_id == "math-taxed-total")
    row = task.to_trajectory(factory.toolset("math")).derive(success=True)
    package = pack_arena(row, code="reference", distractors=2)
    assert package.implementation.kind == "builtin" and len(package.distractors) == 2
    env = ArenaEnvironment(package)
    env.reset(package.ground_truth)
    for g in package.sub_goals:
        assert env.call(g.call.name, g.call.arguments).output == g.call.output
    gold = [(g.call.name, g.call.arguments) for g in package.sub_goals]
    assert env.reward(gold).reward == 1.0


def test_a_folder_as_a_training_set(math_api: list[dict], sandbox: Sandbox, tmp_path: Path) -> None:
    """What ``train-grpo --arenas`` consumes: task rows, one environment per episode, and
    the package's reward for the episode's messages."""
    import asyncio

    from trajsynth.envs import EnvFactory
    from trajsynth.envs.arena import arena_training_set
    from trajsynth.stages.common.rollouts import task_of

    factory = EnvFactory()
    task = next(t for t in factory.example_tasks("math") if t.task_id == "math-taxed-total")
    packages = [
        pack_arena(task_row(math_api), code={"add": ADD, "multiply": MULTIPLY}, sandbox=sandbox),
        pack_arena(task.to_trajectory(factory.toolset("math")).derive(success=True)),
    ]
    for p in packages:
        (tmp_path / f"{p.uuid}.json").write_text(p.model_dump_json())
    arenas = arena_training_set(tmp_path)
    assert len(arenas.rows) == 2
    try:
        for row in arenas.rows:
            gt, opening = task_of(row)
            gold = [c for t in gt.turns for s in t.steps for c in s]

            async def policy(
                messages: list[Message], tools: list[dict], gold: list = gold
            ) -> Message:
                done = sum(1 for m in messages if m.role == "assistant")
                if done < len(gold):
                    c = gold[done]
                    return calls_message([{"name": c.name, "arguments": c.arguments}], key=done)
                return Message(role="assistant", content="Done.")

            env = arenas.make_env(row)
            result = asyncio.run(run_episode(gt, env, policy, tools=row.tools, prefix=opening))
            assert arenas.reward(row, result.messages) == 1.0
            assert arenas.reward(row, result.messages[:3]) < 1.0  # one call made: half
    finally:
        arenas.close()
    with pytest.raises(ArenaError, match="names no arena"):
        arenas.reward(task_row(math_api), [])
