"""LoopTool's GCP, JGLV, EDDE, the round boundary and the binary reward (METHODS.md §10 rows
"LoopTool GCP", "LoopTool JGLV", "LoopTool EDDE", "LoopTool loop / GRPO reward"), offline with
scripted students, judges and generators.

Run: PYTHONPATH=. python -m pytest tests/stages/test_looptool.py -q
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core import Trajectory, to_batch, to_records
from trajsynth.core.task import GoldCall
from trajsynth.envs import EnvFactory
from trajsynth.envs.verifiers import exact_multiset_reward
from trajsynth.envs.verifiers.schema import check_call
from trajsynth.llm.base import ChatRequest, RawChoice, TokenLogprob
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, Emit, build_stage

FACTORY = EnvFactory()


def task(task_id: str) -> Trajectory:
    domain = task_id.split("-")[0]
    example = next(t for t in FACTORY.example_tasks(domain) if t.task_id == task_id)
    return example.to_trajectory(FACTORY.toolset(domain))


CONVERT = task("travel-convert")  # convert_currency(250, EUR, USD)
MILES = task("math-marathon-miles")  # convert_units(42.195, km, mi)
PARALLEL = task("math-parallel-conversions")  # two convert_units in one step
ORDER = task("commerce-order-status")  # get_order(#W1003)


def run(name: str, cfg: dict[str, Any], rows: list[Trajectory], ctx: Context):
    """Run a stage on rows; returns {output name: rows}."""
    out: dict[str, list[Trajectory]] = {}
    for item in build_stage(name, cfg).process(iter([to_batch(rows)]), ctx):
        key, data = (item.name, item.data) if isinstance(item, Emit) else ("main", item)
        out.setdefault(key, []).extend(data if isinstance(data, list) else to_records(data))
    return out


def calls_choice(calls: list[tuple[str, dict]], logprob: float) -> RawChoice:
    return RawChoice(
        tool_calls=[
            {"id": f"c{i}", "name": n, "arguments": json.dumps(a)} for i, (n, a) in enumerate(calls)
        ],
        logprobs=[TokenLogprob(token="t", logprob=logprob)] * 4,
        finish_reason="tool_calls",
    )


def text_choice(logprob: float) -> RawChoice:
    return RawChoice(
        content="Done.",
        logprobs=[TokenLogprob(token="t", logprob=logprob)] * 2,
        finish_reason="stop",
    )


def student(answers: dict[str, tuple[list[tuple[str, dict]], float]]):
    """A scripted student: per task goal, the calls of its one step and its log-prob; then
    a text answer after the tool results."""

    def handler(request: ChatRequest) -> RawChoice:
        goal = next(m["content"] for m in request.messages if m["role"] == "user")
        calls, lp = answers[goal]
        if request.messages[-1]["role"] == "tool":
            return text_choice(lp)
        return calls_choice(calls, lp)

    return handler


def gold(row: Trajectory) -> list[tuple[str, dict]]:
    gt = row.ground_truth
    assert gt is not None
    return [(c.name, c.arguments) for c in gt.turns[0].steps[0]]


# --------------------------------------------------------------------------------------
# GCP
# --------------------------------------------------------------------------------------


def gcp_outputs(ctx: Context, wrong_order: bool = True):
    answers = {
        CONVERT.goal: (gold(CONVERT), -0.01),  # mastered, confident → easy
        MILES.goal: (gold(MILES), -2.0),  # mastered, unsure → hard
        PARALLEL.goal: (gold(PARALLEL)[::-1], -0.01),  # reordered parallel calls → mastered
        ORDER.goal: ([("get_order", {"order_id": "#W1004"})] if wrong_order else gold(ORDER), -0.5),
    }
    backend = use_scripted(ctx, "student", student(answers))
    out = run("gcp", {"role": "student"}, [CONVERT, MILES, PARALLEL, ORDER], ctx)
    return out, backend


def test_gcp_keeps_failed_and_high_perplexity_and_drops_easy() -> None:
    ctx = Context(ContextSpec(stage_id="gcp"))
    out, backend = gcp_outputs(ctx)
    ids = {k: {r.task_id for r in v} for k, v in out.items()}
    assert ids["failed"] == {ORDER.task_id}
    assert ids["hard"] == {MILES.task_id}
    assert ids["easy"] == {CONVERT.task_id, PARALLEL.task_id}  # reordered parallel = mastered
    assert ids["main"] == {ORDER.task_id, MILES.task_id}
    # the student was asked greedily, with log-probabilities
    assert all(r.temperature == 0.0 and r.logprobs for r in backend.requests)
    hard = out["hard"][0].extra["gcp"]
    assert hard["mean_logprob"] == pytest.approx(-2.0)
    assert hard["perplexity"] == pytest.approx(math.exp(2.0))
    # the quantile cut (median of the mastered perplexities) sits between the two levels
    assert ctx.metrics.values["ppl_threshold"] == pytest.approx(math.exp(0.01))
    failed = out["failed"][0].extra["gcp"]
    assert failed["label"] == [{"name": "get_order", "arguments": {"order_id": "#W1003"}}]
    assert failed["prediction"] == [{"name": "get_order", "arguments": {"order_id": "#W1004"}}]
    assert failed["step"] == 0 and failed["context"][-1]["role"] == "user"
    # per-capability accuracy: single_call 2/3 (ORDER failed), parallel_calls 1/1
    acc = ctx.metrics.values["accuracy"]
    assert acc["single_call"] == pytest.approx(2 / 3) and acc["parallel_calls"] == 1.0
    assert len(out["episodes"]) == 4 and sum(r.success for r in out["episodes"]) == 3


def test_gcp_fixed_threshold_and_needs_a_student() -> None:
    ctx = Context(ContextSpec(stage_id="gcp"))
    answers = {r.goal: (gold(r), -1.0) for r in (CONVERT, MILES)}
    use_scripted(ctx, "student", student(answers))
    out = run("gcp", {"role": "student", "ppl_threshold": 3.0}, [CONVERT, MILES], ctx)
    assert "hard" not in out and len(out["easy"]) == 2  # exp(1) < 3
    from trajsynth.core import ConfigError

    with pytest.raises(ConfigError, match="needs:"):
        run("gcp", {}, [CONVERT], Context(ContextSpec(stage_id="gcp")))


# --------------------------------------------------------------------------------------
# JGLV
# --------------------------------------------------------------------------------------


def failed_rows(prediction: dict[str, Any]) -> list[Trajectory]:
    """GCP's failed output for CONVERT with the student predicting ``prediction`` args."""
    ctx = Context(ContextSpec(stage_id="gcp"))
    use_scripted(ctx, "student", student({CONVERT.goal: ([("convert_currency", prediction)], -1)}))
    return run("gcp", {"role": "student"}, [CONVERT], ctx)["failed"]


PRED = {"amount": 300, "from_currency": "EUR", "to_currency": "USD"}


def judge(verdicts: list[str]):
    def handler(request: ChatRequest) -> str:
        v = verdicts[request.metadata["sample"]]
        return f"{v}.\nError Analysis: the amount differs. Correct Approach: use the request."

    return handler


def test_jglv_label_wrong_by_consensus_is_replaced_by_the_prediction() -> None:
    rows = failed_rows(PRED)
    ctx = Context(ContextSpec(stage_id="jglv"))
    backend = use_scripted(ctx, "judge", judge(["RESPONSE1_INCORRECT"] * 3))
    out = run("jglv", {}, rows, ctx)
    assert len(backend.requests) == 3  # three votes, each its own request
    (seed,) = out["main"]
    assert seed.extra["jglv"]["status"] == "original_incorrect"
    assert seed.extra["jglv"]["correct"] == [{"name": "convert_currency", "arguments": PRED}]
    (fixed,) = out["corrected"]
    assert fixed.method == "jglv" and fixed.parent_ids == [rows[0].id]
    assert fixed.ground_truth.turns[0].steps[0][0].arguments == PRED
    call = next(m for m in fixed.messages if m.tool_calls).tool_calls[0]
    assert json.loads(call.arguments) == PRED  # the trajectory follows the new label
    assert any(m.role == "tool" for m in fixed.messages)  # and it was executed
    assert ctx.metrics.counters["original_incorrect"] == 1
    assert ctx.metrics.counters["corrected"] == 1


def test_jglv_two_of_three_is_consensus_and_a_split_is_dropped() -> None:
    rows = failed_rows(PRED)
    ctx = Context(ContextSpec(stage_id="jglv"))
    use_scripted(
        ctx, "judge", judge(["RESPONSE2_INCORRECT", "BOTH_CORRECT", "RESPONSE2_INCORRECT"])
    )
    out = run("jglv", {}, rows, ctx)
    (seed,) = out["main"]
    assert seed.extra["jglv"]["status"] == "model_incorrect"
    assert seed.extra["jglv"]["consensus"] is True
    assert seed.extra["jglv"]["correct"][0]["arguments"]["amount"] == 250  # the label
    assert "corrected" not in out

    ctx = Context(ContextSpec(stage_id="jglv"))
    use_scripted(
        ctx, "judge", judge(["RESPONSE1_INCORRECT", "RESPONSE2_INCORRECT", "BOTH_CORRECT"])
    )
    out = run("jglv", {}, rows, ctx)
    assert "main" not in out and "corrected" not in out
    assert out["dropped"][0].extra["jglv"]["consensus"] is False
    assert ctx.metrics.counters["no_consensus"] == 1

    ctx = Context(ContextSpec(stage_id="jglv"))
    use_scripted(ctx, "judge", judge(["BOTH_INCORRECT"] * 3))
    out = run("jglv", {}, rows, ctx)
    assert "main" not in out and ctx.metrics.counters["both_incorrect"] == 1  # not expanded


def test_jglv_calls_no_judge_for_identical_or_reordered_outputs() -> None:
    (row,) = failed_rows(PRED)
    info = row.extra["gcp"]
    a = {"name": "f", "arguments": {"x": 1}}
    b = {"name": "g", "arguments": {"y": [1, 2]}}
    same = row.derive(id="same", extra={"gcp": {**info, "label": [a, b], "prediction": [a, b]}})
    swapped = row.derive(id="swap", extra={"gcp": {**info, "label": [a, b], "prediction": [b, a]}})
    ctx = Context(ContextSpec(stage_id="jglv"))
    backend = use_scripted(ctx, "judge", judge(["RESPONSE1_INCORRECT"] * 3))
    out = run("jglv", {}, [same, swapped], ctx)
    assert backend.requests == [] and "main" not in out
    assert ctx.metrics.counters["both_correct_exact"] == 2
    assert ctx.metrics.counters.get("judge_calls", 0) == 0


def test_jglv_needs_at_least_two_votes() -> None:
    from trajsynth.core import ConfigError

    with pytest.raises(ConfigError, match="votes"):
        build_stage("jglv", {"votes": 1})


# --------------------------------------------------------------------------------------
# EDDE
# --------------------------------------------------------------------------------------


def seeds() -> list[Trajectory]:
    rows = failed_rows(PRED)
    ctx = Context(ContextSpec(stage_id="jglv"))
    use_scripted(ctx, "judge", judge(["RESPONSE2_INCORRECT"] * 3))
    return run("jglv", {}, rows, ctx)["main"]


def sample(amount: int, currency: str = "GBP", name: str = "convert_currency") -> str:
    args = {"amount": amount, "from_currency": currency, "to_currency": "JPY"}
    return (
        f"INPUT: Please convert {amount} {currency} to JPY.\n"
        f'OUTPUT: <tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'
    )


def test_edde_rejects_garbage_retries_at_most_three_times_and_keeps_provenance() -> None:
    (seed,) = seeds()
    ctx = Context(ContextSpec(stage_id="edde"))

    def generator(request: ChatRequest) -> str:
        k, attempt = request.metadata["sample"], request.metadata["attempt"]
        if k == 0:  # garbage once, then a good sample
            return "Here are some ideas: vary the amounts." if attempt == 0 else sample(40)
        if k == 1:  # unknown tool, then a call that fails to execute, then good
            return [sample(10, name="convert_money"), sample(10, currency="XXX"), sample(75)][
                attempt
            ]
        return "I'm sorry, I can't generate that."  # k == 2: garbage every time

    backend = use_scripted(ctx, "expander", generator)
    out = run("edde", {}, [seed], ctx)
    tries = Counter(r.metadata["sample"] for r in backend.requests)
    assert tries == {0: 2, 1: 3, 2: 3}  # never more than three tries per sample
    kept = out["main"]
    assert len(kept) == 2 and len(out["rejected"]) == 1
    c = ctx.metrics.counters
    assert c["rejected.no_input_output"] == 4 and c["rejected.unknown_tool"] == 1
    assert c["rejected.execution"] == 1 and c["kept"] == 2 and c["seeds"] == 1
    for row in kept:
        assert row.method == "edde" and row.parent_ids == [seed.id]
        assert row.tools == seed.tools  # the same toolset
        assert row.extra["original_sample"]["id"] == seed.id
        assert row.extra["original_sample"]["correct"][0]["arguments"]["amount"] == 250
        assert row.extra["edde"]["variation"] in (
            "complexity variation",
            "user persona",
            "interaction style",
            "data variation",
        )
        # every kept call validates against the schema and executed without an error
        for m in row.messages:
            for call in m.tool_calls:
                assert check_call(call, row.tools) == []
        tool_msgs = [m for m in row.messages if m.role == "tool"]
        assert tool_msgs and all("error" not in (m.content or "").lower() for m in tool_msgs)
    assert sorted(r.ground_truth.turns[0].steps[0][0].arguments["amount"] for r in kept) == [
        40,
        75,
    ]
    # the prompt carries the correct and incorrect responses, the analysis and the variation
    prompt = backend.requests[0].messages[-1]["content"]
    assert '"amount": 250' in prompt and '"amount": 300' in prompt
    assert "the amount differs" in prompt and "Scenario variation" in prompt


def test_edde_only_expands_consensus_failures_with_calls() -> None:
    (seed,) = seeds()
    no_consensus = seed.derive(
        id="nc", extra={**seed.extra, "jglv": {**seed.extra["jglv"], "consensus": False}}
    )
    both = seed.derive(
        id="bi", extra={**seed.extra, "jglv": {**seed.extra["jglv"], "status": "both_incorrect"}}
    )
    ctx = Context(ContextSpec(stage_id="edde"))
    backend = use_scripted(ctx, "expander", lambda r: sample(5))
    out = run("edde", {"samples": 2}, [no_consensus, both], ctx)
    assert out == {} and backend.requests == [] and ctx.metrics.counters["not_a_seed"] == 2


def test_edde_with_the_simulated_expander() -> None:
    (seed,) = seeds()
    ctx = Context(ContextSpec(stage_id="edde", llm={"expander": {"backend": "sim"}}))
    out = run("edde", {}, [seed], ctx)
    kept = out.get("main", [])
    assert 1 <= len(kept) <= 3
    for row in kept:
        assert row.ground_truth.turns[0].steps[0][0].name == "convert_currency"


# --------------------------------------------------------------------------------------
# the round boundary and the reward
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, gold_, reward",
    [
        (
            [GoldCall(name="g"), GoldCall(name="f", arguments={"x": 1})],
            [GoldCall(name="f", arguments={"x": 1}), GoldCall(name="g")],
            1.0,
        ),  # reordered
        ([GoldCall(name="f"), GoldCall(name="f")], [GoldCall(name="f")], 0.0),  # extra call
        ("I would call f here.", [GoldCall(name="f")], 0.0),  # missing tags: text vs call
        ("Sure.", "Done.", 1.0),  # both text
        ([GoldCall(name="f", arguments={"x": 1.0})], [GoldCall(name="f", arguments={"x": 1})], 1.0),
    ],
)
def test_binary_reward(pred, gold_, reward) -> None:
    assert exact_multiset_reward(pred, gold_) == reward


def echo(request: ChatRequest) -> str:
    """A generator that writes the correct calls again, under a new request."""
    calls = request.metadata["correct"]
    blocks = "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)
    return f"INPUT: Again, sample {request.metadata['sample']}.\nOUTPUT: {blocks}"


def test_two_rounds_with_a_student_that_learns() -> None:
    """Round 1: the student gets CONVERT and ORDER wrong; it 'learns' ORDER, so round 2 has
    only CONVERT wrong. Each round's next dataset = expanded ∪ corrected ∪ high-PPL ∪ seed."""
    tasks = [CONVERT, MILES, PARALLEL, ORDER]
    wrong = {
        CONVERT.goal: ([("convert_currency", PRED)], -1.0),
        ORDER.goal: ([("get_order", {"order_id": "#W1004"})], -1.0),
    }
    composition = []
    data = tasks
    for k, still_wrong in ((1, {CONVERT.goal, ORDER.goal}), (2, {CONVERT.goal})):
        answers = {r.goal: (gold(r), -0.01 if r is not MILES else -2.0) for r in tasks}
        answers.update({g: wrong[g] for g in still_wrong})
        ctx = Context(ContextSpec(stage_id=f"round{k}.gcp", iteration=k))
        use_scripted(ctx, "student", student(answers))
        probed = run("gcp", {"role": "student"}, tasks, ctx)
        ctx = Context(ContextSpec(stage_id=f"round{k}.jglv", iteration=k))
        # the judges blame the student's order id and the label's amount
        use_scripted(
            ctx,
            "judge",
            lambda r: (
                "RESPONSE1_INCORRECT."
                if "300" in r.messages[-1]["content"]
                else "RESPONSE2_INCORRECT."
            ),
        )
        judged = run("jglv", {}, probed["failed"], ctx)
        ctx = Context(ContextSpec(stage_id=f"round{k}.edde", iteration=k))
        use_scripted(ctx, "expander", echo)
        expanded = run("edde", {"samples": 2}, judged["main"], ctx)
        ctx = Context(ContextSpec(stage_id=f"round{k}.next", iteration=k))
        fresh = [t.derive(id=f"fresh{k}") for t in [MILES]]
        nxt = run(
            "looptool",
            {},
            expanded["main"] + judged.get("corrected", []) + probed.get("hard", []) + fresh,
            ctx,
        )["main"]
        composition.append(Counter(r.extra["looptool"]["origin"] for r in nxt))
        assert all(r.iteration == k for r in nxt)
        data = nxt
    # round 1: two consensus failures × 2 samples, one relabelled (CONVERT), MILES hard, 1 fresh
    assert composition[0] == {"expanded": 4, "corrected": 1, "high_ppl": 1, "seed": 1}
    # round 2: the student learnt ORDER: only CONVERT is expanded and relabelled
    assert composition[1] == {"expanded": 2, "corrected": 1, "high_ppl": 1, "seed": 1}
    assert data and all("looptool" in r.extra for r in data)


def test_report_per_iteration_and_capability() -> None:
    from trajsynth.stages.looptool.report import _markdown, build_report

    def episode(i: int, policy: str, set_: str, it: int, cap: str, ok: bool) -> Trajectory:
        return CONVERT.derive(
            id=f"e{i}",
            method="gcp",
            iteration=it,
            capabilities=[cap],
            reward_components={"exact_match": float(ok), "tool_match": 1.0},
            extra={"gcp": {"policy": policy, "set": set_}},
        )

    rows, i = [], 0
    for it, wins in ((1, 0), (2, 1), (3, 2)):  # the student gets 0, 1, 2 of 2 multi_call right
        for k in range(2):
            rows.append(episode(i := i + 1, "student", "probe", it, "multi_call", k < wins))
            rows.append(episode(i := i + 1, "student", "data", it, "multi_call", k < wins))
        rows.append(episode(i := i + 1, "student", "probe", it, "single_call", True))
        rows.append(episode(i := i + 1, "student", "data", it, "single_call", True))
    rows += [
        episode(i := i + 1, "teacher", "probe", 0, c, True) for c in ("multi_call", "single_call")
    ]
    data = [CONVERT.derive(id=f"d{k}") for k in range(3)]  # the seed data
    data += [
        CONVERT.derive(id=f"n{k}", extra={"looptool": {"origin": o, "iteration": 1}})
        for k, o in enumerate(["expanded", "expanded", "corrected", "seed"])
    ]
    report = build_report(rows + data)
    its = report["iterations"]
    assert [it["iteration"] for it in its] == [1, 2, 3]
    assert [it["student"]["multi_call"] for it in its] == [0.0, 0.5, 1.0]
    assert all(
        it["teacher"] == {"multi_call": 1.0, "single_call": 1.0, "overall": 1.0} for it in its
    )
    assert report["weak_capabilities"] == ["multi_call"]
    zero = dict.fromkeys(("expanded", "corrected", "high_ppl", "hindsight", "hard"), 0)
    assert its[0]["counts"] == {**zero, "seed": 3}
    assert its[1]["counts"] == {**zero, "seed": 1, "expanded": 2, "corrected": 1}
    assert its[0]["next_counts"] == its[1]["counts"]
    assert build_report(rows, metric="tool_match")["iterations"][0]["student"]["overall"] == 1.0
    # a capability only the training data has is flagged, and the table says it has no probe
    rows.append(episode(i + 1, "student", "data", 1, "parallel_calls", False))
    report = build_report(rows + data)
    assert report["weak_capabilities"] == ["multi_call", "parallel_calls"]
    assert "multi_call, parallel_calls (no probe task)." in _markdown(report)
    # the weak capabilities' mean rose 0 → 1; a static baseline probed on the same tasks
    rows.pop()
    assert build_report(rows + data)["weak_capabilities_change"] == {
        "first": 0.0,
        "last": 1.0,
        "change": 1.0,
    }
    assert build_report(rows + data)["static_baseline"] is None
    rows += [
        episode(i := i + 1, "student", "static", 0, "multi_call", k == 0) for k in range(2)
    ] + [episode(i := i + 1, "student", "static", 0, "single_call", True)]
    report = build_report(rows + data)
    assert [it["iteration"] for it in report["iterations"]] == [1, 2, 3]  # not an iteration
    static = report["static_baseline"]
    assert static["tasks"] == 3
    assert static["student"] == {"multi_call": 0.5, "single_call": 1.0, "overall": 0.6667}
    assert static["loop_minus_static"] == pytest.approx(1.0 - 0.6667)
    assert static["loop_minus_static_weak"] == 0.5  # multi_call: 1.0 (loop) vs 0.5 (static)
    assert report["iterations"][0]["student_tool_match"]["overall"] == 1.0
    text = _markdown(report)
    assert "Weak capabilities, mean exact_match: 0.00 in iteration 1 → 1.00 in iteration 3" in text
    assert "last iteration against it: +0.33, +0.50 on the weak capabilities" in text


def test_static_baseline_matches_the_size_the_loop_trained_on() -> None:
    """``looptool_static``: as many pool rows as the loop trained on (seed rows and every round
    but the last, or only what followed round 1's training), the same ones on every run; a
    short pool is used whole."""
    ctx = Context(ContextSpec(stage_id="static_data", seed=3))
    pool = [CONVERT.derive(id=f"p{k}", stage_id="static_teacher") for k in range(20)]
    seed = [CONVERT.derive(id=f"s{k}", stage_id="teacher") for k in range(4)]
    rounds = [
        CONVERT.derive(id=f"r{it}-{k}", extra={"looptool": {"origin": "seed", "iteration": it}})
        for it in (1, 2, 3)
        for k in range(3)
    ]
    cfg = {"pool": "static_teacher"}
    chosen = run("looptool_static", cfg, pool + seed + rounds, ctx)["main"]
    assert len(chosen) == 4 + 3 + 3  # round 3's data was never trained on
    assert {r.stage_id for r in chosen} == {"static_teacher"}
    again = run("looptool_static", cfg, seed + rounds + pool[::-1], ctx)["main"]
    assert sorted(r.id for r in again) == sorted(r.id for r in chosen)
    # a baseline warm-started from round 1's checkpoint matches rounds 2 and 3's data
    after = run("looptool_static", {**cfg, "after_round": 1}, pool + seed + rounds, ctx)["main"]
    assert len(after) == 3 + 3
    short = run("looptool_static", cfg, pool[:5] + seed + rounds, ctx)["main"]
    assert len(short) == 5
    with pytest.raises(Exception, match="no rows from the pool stage"):
        run("looptool_static", cfg, seed + rounds, ctx)


def test_echo_between_rounds_relabels_the_students_failed_episode_as_hindsight() -> None:
    """ECHO run between iterations (``echo`` from ``gcp:episodes``): the student looked up the
    wrong order; that lookup is a goal of its own, rewritten by the simulated rewriter,
    replayed, and named *hindsight* data by the round boundary. Mastered episodes are skipped."""
    ctx = Context(ContextSpec(stage_id="round1.gcp", iteration=1))
    out, _ = gcp_outputs(ctx)
    episodes = out["episodes"]
    assert sum(not e.success for e in episodes) == 1  # ORDER
    ctx = Context(ContextSpec(stage_id="round1.echo", iteration=1))
    rewritten = run("echo", {}, episodes, ctx)["main"]
    assert rewritten and all(r.method == "echo" and r.success for r in rewritten)
    assert ctx.metrics.snapshot()["counters"]["skipped.succeeded"] == 3
    failed = next(e for e in episodes if not e.success)
    for r in rewritten:
        assert r.parent_ids == [failed.id]
        calls = [c for m in r.messages if m.role == "assistant" for c in m.tool_calls or []]
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_order", {"order_id": "#W1004"})
        ]
    ctx = Context(ContextSpec(stage_id="round1.next", iteration=1))
    nxt = run("looptool", {}, [*rewritten, MILES], ctx)["main"]
    assert Counter(r.extra["looptool"]["origin"] for r in nxt) == {
        "hindsight": len(rewritten),
        "seed": 1,
    }
    assert ctx.metrics.snapshot()["values"]["counts.hindsight"] == len(rewritten)


def test_round_boundary_names_hardgen_rows_hard() -> None:
    from trajsynth.stages.common.looptool import origin_of

    assert origin_of(CONVERT.derive(method="hardgen")) == "hard"
    assert origin_of(CONVERT.derive(method="echo")) == "hindsight"
    assert origin_of(CONVERT) == "seed"


def test_failure_context_with_a_call_without_arguments() -> None:
    """GCP stores the context before a mismatch without defaults, so a call with no
    arguments has no ``arguments`` key; JGLV's and EDDE's transcripts still show it (a
    student calling ``list_values()`` first used to crash the round)."""
    from trajsynth.core.schema import Message, ToolCall
    from trajsynth.stages.looptool.edde import _original
    from trajsynth.stages.looptool.jglv import _conversation

    context = [
        m.model_dump(exclude_defaults=True)
        for m in (
            Message(role="user", content="What have I stored?"),
            Message(role="assistant", tool_calls=[ToolCall(id="c0", name="list_values")]),
            Message(role="tool", tool_call_id="c0", content='{"names": []}'),
        )
    ]
    assert "arguments" not in context[1]["tool_calls"][0]
    assert "list_values" in _conversation(context)
    assert "list_values" in _original(context)


def _two_probe_episodes() -> list[Trajectory]:
    """A student's probe episodes on two tasks, one solved: overall accuracy 0.5."""
    return [
        CONVERT.derive(
            id=f"e{k}",
            method="gcp",
            iteration=1,
            reward_components={"exact_match": float(k), "tool_match": 1.0},
            extra={"gcp": {"policy": "student", "set": "probe"}},
        )
        for k in range(2)
    ]


@pytest.mark.parametrize("layout", ["single", "pipeline"])
def test_report_is_copied_into_the_run_folder_alone_or_in_a_pipeline(
    tmp_path: Path, layout: str
) -> None:
    """``trajsynth stage looptool_report --in X --out Y`` writes the report into Y (its run
    folder), not into Y's parent; in a pipeline run, into the run folder above the stages."""
    from trajsynth.cli.run import run_single_stage
    from trajsynth.pipeline import run_pipeline
    from trajsynth.store.importers import write_rows

    rows = _two_probe_episodes()
    write_rows(rows, tmp_path / "episodes")
    run = tmp_path / "runs" / "report"
    if layout == "single":
        run_single_stage(
            "looptool_report", [tmp_path / "episodes"], run, ["plots=false"], quiet=True
        )
        artifacts = run / "artifacts"
    else:
        spec = {
            "name": "report",
            "stages": [
                {
                    "id": "report",
                    "uses": "looptool_report",
                    "from": str(tmp_path / "episodes"),
                    "with": {"plots": False},
                }
            ],
        }
        (tmp_path / "p.yaml").write_text(json.dumps(spec))
        run_pipeline(tmp_path / "p.yaml", out=run)
        artifacts = run / "artifacts" / "report"
    report = json.loads((run / "report.json").read_text())
    assert report == json.loads((artifacts / "report.json").read_text())
    assert [it["student"]["overall"] for it in report["iterations"]] == [0.5]
    assert (run / "report.md").is_file()
    assert not (run.parent / "report.json").exists()


def test_report_adds_the_bfcl_figures_of_a_needed_eval_bfcl_stage(tmp_path: Path) -> None:
    """A report whose ``needs:`` names an ``eval_bfcl`` stage reads its ``bfcl.json``: the
    figures go to ``report.json`` (``bfcl``) and a BFCL section ends ``report.md``, one row
    per model scored (``trained`` is the last checkpoint, not repeated), the questions per
    category and the training rows' contamination. A needed stage without it adds nothing."""
    bfcl = tmp_path / "bfcl"
    bfcl.mkdir()
    figures = {
        "limit": 5,
        "contamination": {"count": 0, "rows": 0, "names": [], "questions": []},
        "round2.train": {"simple_python": 0.4, "irrelevance": 0.8, "mean": 0.2},
        "trained": {"simple_python": 0.4, "irrelevance": 0.8, "mean": 0.2},
    }
    (bfcl / "bfcl.json").write_text(json.dumps(figures))
    (tmp_path / "train").mkdir()  # a checkpoint folder: no benchmark figures
    rows = _two_probe_episodes()
    spec = ContextSpec(
        stage_id="report",
        artifacts_dir=str(tmp_path / "report"),
        run_dir=str(tmp_path),
        artifacts_in={"round2.train": str(tmp_path / "train"), "bfcl": str(bfcl)},
    )
    run("looptool_report", {"plots": False}, rows, Context(spec))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["bfcl"] == {"stage": "bfcl", **figures}
    assert [s["title"] for s in report["sections"]] == ["BFCL"]
    text = (tmp_path / "report.md").read_text()
    tail = text[text.index("## BFCL") :]
    assert "5 questions per category, so one question is 0.20 of a category" in tail
    assert "| model | simple_python | irrelevance | mean |" in tail
    assert "| round2.train | 0.40 | 0.80 | 0.20 |" in tail
    assert "| trained |" not in tail
    assert "names or questions in the training rows: 0 (in 0 rows)." in tail
    # without a needed eval_bfcl stage: no section
    spec = spec.model_copy(update={"artifacts_in": {"round2.train": str(tmp_path / "train")}})
    run("looptool_report", {"plots": False}, rows, Context(spec))
    report = json.loads((tmp_path / "report.json").read_text())
    assert "bfcl" not in report and report["sections"] == []


def test_the_bfcl_section_reads_eval_bfcl_files_with_and_without_intervals() -> None:
    """eval_bfcl's bfcl.json gained each figure's 95% interval (``intervals``, a dict per
    model): the report shows them beside the accuracies, and a file without them still reads."""
    from trajsynth.stages.looptool.report import bfcl_section

    scores = {"simple_python": 0.5, "irrelevance": 0.8}
    data = {
        "limit": 10,
        "contamination": {"count": 0, "rows": 0},
        "base": {"simple_python": 0.0, "irrelevance": 1.0},
        "train": scores,
        "trained": scores,
        "intervals": {"train": {"simple_python": [0.2, 0.8], "irrelevance": [0.5, 1.0]}},
    }
    lines = bfcl_section(data)["lines"]
    assert "| train | 0.50 [0.20, 0.80] | 0.80 [0.50, 1.00] |" in lines
    assert "| base | 0.00 | 1.00 |" in lines and not any("intervals" in x for x in lines)
    del data["intervals"]
    assert "| train | 0.50 | 0.80 |" in bfcl_section(data)["lines"]
