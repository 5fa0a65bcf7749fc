"""Endpoint trouble never becomes data, nor a decision: every LLM use outside the rollout
policies (judges, writers, hints, reflections, the tool role, Magnet's edge check) counts a
request that failed for good because of the endpoint as lost (``infra.lost``, what
``--max-infra-error-rate`` reads) and makes nothing of it — no row, no vote, no generic hint,
no proposal played as the tool's answer.

Each stage runs three times on the same input, its LLM role answered by the simulator (or a
scripted answer) through :class:`Faulty`, which fails a seeded share of the requests with
:class:`~trajsynth.core.errors.InfraError` (what the client raises when retries ran out):
with no faults the rows equal those of the plain simulator, and with faults every row left
equals the clean run's row of the same id, nothing is counted under a fallback, and what was
lost is counted.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_no_silent_fallback.py -q
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core import Trajectory, to_batch, to_records
from trajsynth.core.errors import InfraError
from trajsynth.core.ids import stable_hash
from trajsynth.envs import EnvFactory, Toolset
from trajsynth.envs.simulated import SimulatedEnvironment
from trajsynth.llm import tool_role
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import scripted_client, use_scripted
from trajsynth.llm.sim import SimBackend
from trajsynth.stages import Context, ContextSpec, Emit, build_stage

from ..envs.test_simulated import _fn

FACTORY = EnvFactory()


class Faulty:
    """A role's answers — the simulator's, or ``answer(request)``'s — with the requests whose
    content hashes below ``rate`` failing for good (the same requests in every run)."""

    def __init__(self, role: str, rate: float, answer: Any = None, seed: int = 0) -> None:
        self.answer = answer or SimBackend(role=role).complete
        self.rate, self.seed = rate, seed
        self.lost = 0
        self.requests = 0

    async def __call__(self, request: ChatRequest) -> Any:
        self.requests += 1
        key = stable_hash([self.seed, request.seed, request.messages, request.metadata])
        if int(key[:8], 16) / 16**8 < self.rate:
            self.lost += 1
            raise InfraError("http://x (sim): failed after 6 attempts: HTTP 503 (injected)")
        out = self.answer(request)
        return await out if inspect.isawaitable(out) else out


def examples(*domains: str) -> list[Trajectory]:
    return [
        t.to_trajectory(FACTORY.toolset(d)).derive(task_id=t.task_id)
        for d in domains
        for t in FACTORY.example_tasks(d)
    ]


def run(name: str, cfg: dict[str, Any], rows: list[Trajectory], ctx: Context):
    """Run a stage on rows; returns {output name: rows}."""
    out: dict[str, list[Trajectory]] = {}
    for item in build_stage(name, cfg).process(iter([to_batch(rows)]), ctx):
        key, data = (item.name, item.data) if isinstance(item, Emit) else ("main", item)
        out.setdefault(key, []).extend(data if isinstance(data, list) else to_records(data))
    return out


def _dump(rows: list[Trajectory]) -> dict[str, str]:
    return {r.id: json.dumps(r.model_dump(mode="json", exclude={"created_at"}), sort_keys=True)
            for r in rows}  # fmt: skip


def three_runs(
    name: str,
    cfg: dict[str, Any],
    rows: list[Trajectory],
    roles: dict[str, Any],
    rate: float,
    *,
    seed: int = 0,
    llm: dict[str, Any] | None = None,
) -> tuple[dict[str, list[Trajectory]], dict[str, float], list[Faulty]]:
    """Plain simulator, ``Faulty`` at 0, ``Faulty`` at ``rate`` (``roles``: role → scripted
    answer, or None for the simulator; ``llm``: the other roles' settings). Asserts what every
    site must hold; returns the faulty run's outputs, counters and the faulty roles."""
    spec = ContextSpec(stage_id=name, seed=seed, llm=llm or {})
    plain = Context(spec)
    for role, answer in roles.items():
        if answer is not None:
            use_scripted(plain, role, answer)
    want = run(name, cfg, rows, plain)
    clean = Context(spec)
    for role, answer in roles.items():
        use_scripted(clean, role, Faulty(role, 0.0, answer))
    got = run(name, cfg, rows, clean)
    # 1) without faults: the rows of the plain simulator, nothing lost
    assert {k: _dump(v) for k, v in got.items()} == {k: _dump(v) for k, v in want.items()}
    assert "infra.lost" not in clean.metrics.snapshot()["counters"]
    # 2) with faults: what is left is the clean run's rows, what was lost is counted
    ctx = Context(spec)
    faulty = [Faulty(role, rate, answer) for role, answer in roles.items()]
    for f, role in zip(faulty, roles, strict=True):
        use_scripted(ctx, role, f)
    out = run(name, cfg, rows, ctx)
    for key, rows_out in out.items():
        clean_rows = _dump(want.get(key, []))
        for rid, text in _dump(rows_out).items():
            assert clean_rows.get(rid) == text, f"{name}: {key} row {rid} is not the clean one"
    counters = ctx.metrics.snapshot()["counters"]
    faults = sum(f.lost for f in faulty)
    assert faults >= 1, "no fault was injected: raise the rate"
    assert 1 <= counters.get("infra.lost", 0) <= faults
    assert sum(len(v) for v in out.values()) < sum(len(v) for v in want.values()) or name == "steca"
    return out, counters, faulty


# -- the sites ---------------------------------------------------------------------------------


def rollouts(*domains: str, n: int = 4, seed: int = 0) -> dict[str, list[Trajectory]]:
    ctx = Context(ContextSpec(stage_id="rs", seed=seed))
    return run("rejection_sampling", {"n": n, "keep": "all"}, examples(*domains), ctx)


def test_verify_judge() -> None:
    rows = [r for rs in rollouts("math", n=2).values() for r in rs]
    _, c, (judge,) = three_runs("verify", {"judge": True}, rows, {"judge": None}, 0.3)
    assert c["infra.lost"] == judge.lost  # one judge request per row
    assert "judge_failed" not in c and "judge_unreadable" not in c
    assert c["judge_calls"] == judge.requests


def _gcp_failed(ctx: Context) -> list[Trajectory]:
    """GCP's failed samples: a scripted student that gets the first argument of every task's
    first call wrong."""
    tasks = examples("math", "travel", "commerce")
    by_goal = {r.goal: r for r in tasks}

    def student(req: ChatRequest) -> RawChoice:
        if req.messages[-1]["role"] == "tool":
            return RawChoice(content="Done.")
        goal = next(m["content"] for m in req.messages if m["role"] == "user")
        first = by_goal[goal].ground_truth.turns[0].steps[0][0].model_dump(mode="json")
        args = dict(first["arguments"])
        for k, v in list(args.items())[:1]:
            args[k] = 7 if isinstance(v, int | float) else f"{v}x"
        return RawChoice(
            tool_calls=[{"id": "c0", "name": first["name"], "arguments": json.dumps(args)}],
            finish_reason="tool_calls",
        )

    use_scripted(ctx, "student", student)
    return run("gcp", {"role": "student"}, tasks, ctx)["failed"]


def test_jglv_votes_and_edde_samples() -> None:
    failed = _gcp_failed(Context(ContextSpec(stage_id="gcp")))
    assert len(failed) >= 6
    _, c, (judge,) = three_runs("jglv", {}, failed, {"judge": None}, 0.15)
    assert c["infra.lost"] == judge.lost and "votes.request_failed" not in c
    # EDDE on JGLV's clean seeds
    ctx = Context(ContextSpec(stage_id="jglv"))
    seeds = run("jglv", {}, failed, ctx)["main"]
    assert seeds
    _, c, (expander,) = three_runs("edde", {}, seeds, {"expander": None}, 0.3)
    assert c["infra.lost"] == expander.lost and "rejected.request_failed" not in c
    assert c["infra.units"] == 3 * c["seeds"]  # k = 3 samples per seed


def test_hardgen_queries_and_hints() -> None:
    weak = {"wrong_argument_value": 0.3, "drop_optional_param": 0.5,
            "missing_dependent_call": 0.4}  # fmt: skip
    rows = examples("travel", "messaging", "commerce")
    cfg = {"tasks": 6, "probe_rollouts": 2}
    llm = {"student": {"sim": {"profile": weak}}, "teacher": {"sim": {"profile": weak}}}
    roles = {"query_writer": None, "verifier": None}
    _, c, faulty = three_runs("hardgen", cfg, rows, roles, 0.4, llm=llm)
    assert c["infra.lost"] == sum(f.lost for f in faulty)
    assert "hints.request_failed" not in c and "dropped.query_request_failed" not in c
    assert all(f.lost for f in faulty), [(f.lost, f.requests) for f in faulty]


def test_steca_reflections() -> None:
    out = rollouts("math", "travel", n=4, seed=1)
    rows = out["main"] + out["failed"]
    _, c, _ = three_runs("steca", {"n": 2}, rows, {"reflector": None}, 0.5, seed=1)
    assert "rejected.reflector_failed" not in c


def test_echo_rewrites() -> None:
    failed = rollouts("math", "travel", "commerce", n=2)["failed"]
    _, c, (rewriter,) = three_runs("echo", {}, failed, {"rewriter": None}, 0.3)
    assert c["infra.lost"] == rewriter.lost and "rejected.request_failed" not in c


def test_arena_tool_code() -> None:
    rows = [r.derive(success=True) for r in examples("math")][:4]

    def maker(req: ChatRequest) -> str:
        name = req.messages[0]["content"].split("named `")[1].split("`")[0]
        outputs = {}
        for r in rows:
            for c in (c.model_dump() for c in r.ground_truth.flat_calls()):
                if c["name"] == name:
                    outputs[json.dumps(c["arguments"], sort_keys=True)] = c.get("output")
        body = f"_OUT = {json.dumps(outputs)!r}\n"
        return (
            f"```python\nimport json\n{body}def {name}(**kw):\n"
            f"    return json.loads(_OUT)[json.dumps(kw, sort_keys=True)]\n```"
        )

    _, c, (tm,) = three_runs("arena", {"code": "llm"}, rows, {"tool_maker": maker}, 0.3)
    assert c["infra.lost"] == tm.lost and "tool_requests_failed" not in c


def test_magnet_edge_judge() -> None:
    """A graph is never built from edges nobody judged: the lost checks are counted and the
    stage stops with InfraError (the runner's one clear message); without faults the tasks
    are the plain simulator's."""

    def synthesize(ctx: Context) -> list[Trajectory]:
        cfg = {"tasks_per_domain": 2, "domains": ["travel"], "edge_check": True,
               "graph": {"similarity": "lexical"}}  # fmt: skip
        stage = build_stage("magnet_tasks", cfg)
        return [r for b in stage.generate(ctx, 0) for r in to_records(b)]

    want = synthesize(Context(ContextSpec(stage_id="tasks")))
    ctx = Context(ContextSpec(stage_id="tasks"))
    use_scripted(ctx, "judge", Faulty("judge", 0.0))
    assert _dump(synthesize(ctx)) == _dump(want)
    asked = ctx.metrics.snapshot()["values"]["graph.travel"]["judged"]["asked"]
    assert asked >= 40 and ctx.metrics.snapshot()["counters"]["infra.units"] >= asked
    ctx = Context(ContextSpec(stage_id="tasks"))
    use_scripted(ctx, "judge", judge := Faulty("judge", 0.05))
    with pytest.raises(InfraError, match=r"of \d+ edge checks \(role judge\) got no answer"):
        synthesize(ctx)
    c = ctx.metrics.snapshot()
    assert judge.lost >= 1 and c["counters"]["infra.lost"] == judge.lost
    assert c["counters"]["infra.units"] == asked and c["values"]["infra.unit"] == "edge checks"
    assert "edge_judge.request_failed" not in c["counters"]


# -- the tool role -------------------------------------------------------------------------------


NOTE = {"type": "object", "properties": {"note_id": {"type": "string"},
        "title": {"type": "string"}, "body": {"type": "string"}}}  # fmt: skip
NOTES = Toolset.from_openai(
    [
        _fn("create_note", {"title": {"type": "string"}, "body": {"type": "string"}},
            ["title", "body"], {"type": "object", "properties": {"note_id": {"type": "string"}}}),
        _fn("get_note", {"note_id": {"type": "string"}}, ["note_id"], NOTE),
        _fn("update_note", {"note_id": {"type": "string"}, "title": {"type": "string"}},
            ["note_id", "title"], NOTE),
        _fn("search_notes", {"title": {"type": "string"}}, []),
    ],
    name="notes",
)  # fmt: skip


def test_a_failed_tool_answer_leaves_the_simulated_state_and_cache_untouched() -> None:
    calls: list[str] = []

    def answer(query: Any) -> Any:
        calls.append(query.call["name"])
        if len(calls) == 1:
            raise InfraError("tool role: failed after 6 attempts: HTTP 503")
        return None  # the proposal stands

    f = EnvFactory({"domains": []}, answer=answer)
    env = SimulatedEnvironment("notes", NOTES, answer=answer, cache=f.answers)
    env.reset()
    before = env.state_hash()
    with pytest.raises(InfraError):
        env.call("create_note", title="A", body="b")
    assert env.state_hash() == before and len(f.answers) == 0
    made = env.call("create_note", title="A", body="b")  # asked again, answered
    assert made.ok and env.state_hash() != before and calls == ["create_note"] * 2


def test_tool_role_faults_lose_rollouts_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLM-simulated tool responses through a faulty endpoint: the rollouts and verify replays
    whose tool answer was lost are counted and absent, never played on with the simulator's
    proposal as if the tool role had answered; the rest equal a run without faults."""
    env = {"domains": [], "toolsets": {"notes": str(NOTES.save(tmp_path / "notes.json"))}}
    tasks_ctx = Context(ContextSpec(stage_id="tasks", env=env))
    cfg = {"tasks_per_domain": 6, "domains": ["notes"], "graph": {"similarity": "lexical"}}
    tasks = [
        r for b in build_stage("magnet_tasks", cfg).generate(tasks_ctx, 0) for r in to_records(b)
    ]
    assert len(tasks) >= 4
    tool: list[Faulty] = []

    def client(role: str, roles: Any, *, spec: Any = None, metrics: Any = None) -> Any:
        return scripted_client(role, tool[-1], metrics=metrics)

    monkeypatch.setattr(tool_role, "client_for_role", client)

    def stage(name: str, cfg: dict[str, Any], rows: list[Trajectory], rate: float) -> Any:
        tool.append(Faulty("tool", rate))
        ctx = Context(ContextSpec(stage_id=name, env=env, llm={"tool": {"backend": "sim"}}))
        return run(name, cfg, rows, ctx), ctx.metrics.snapshot()["counters"], tool[-1]

    clean, c0, t0 = stage("rejection_sampling", {"n": 2, "keep": "all"}, tasks, 0.0)
    assert t0.requests >= 10 and "infra.lost" not in c0
    faulty, c, t = stage("rejection_sampling", {"n": 2, "keep": "all"}, tasks, 0.1)
    assert t.lost >= 1 and 1 <= c["infra.lost"] <= t.lost
    counts = {"rollouts_total", "rollouts_passed"}  # a task's counts leave out its lost rollouts
    for key, rows in faulty.items():
        want = {r.id: r for r in clean.get(key, [])}
        for r in rows:
            assert r.id in want
            assert r.model_dump(exclude={"created_at", *counts}) == want[r.id].model_dump(
                exclude={"created_at", *counts}
            )
            assert r.rollouts_total <= want[r.id].rollouts_total
    assert sum(map(len, faulty.values())) < sum(map(len, clean.values()))
    # verify's replays of the clean rollouts
    rows = [r for rs in clean.values() for r in rs]
    clean_v, _, _ = stage("verify", {}, rows, 0.0)
    faulty_v, c, t = stage("verify", {}, rows, 0.1)
    assert t.lost >= 1 and c["infra.lost"] == t.lost
    # every replayed row, verified (main) or not (failed): a lost replay is in neither
    replayed = [r for rs in faulty_v.values() for r in rs]
    assert len(replayed) == len(rows) - t.lost
    want = _dump([r for rs in clean_v.values() for r in rs])
    assert all(want.get(i) == text for i, text in _dump(replayed).items())
    assert not any("replay raised" in (r.failure_reason or "") for r in replayed)
