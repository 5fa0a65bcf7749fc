"""Evaluation and scoring with the shared verifiers: gold calls score 100%, a planted wrong
call lowers exactly the capability it belongs to, and scoring rules step by step.

Run: python -m pytest tests/train/test_eval.py -q
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from trajsynth.core.batch import to_batch
from trajsynth.core.schema import Message, ToolCall
from trajsynth.envs.episode import NUDGE
from trajsynth.train.eval import evaluate, score_episode
from trajsynth.train.rollout import ChatPlayer, ReplayPlayer, RolloutConfig, rollout
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants

FAMILIES = [
    "travel-convert",  # single_call
    "commerce-parallel-lookup",  # parallel_calls
    "math-taxed-total",  # dependent_calls, multi_call
    "math-clarify-interest",  # needs_clarification, optional_params
    "files-overwrite-recovery",  # error_recovery
    "messaging-schedule-with-team",  # long_horizon
    "travel-baggage-policy",  # no_tool_needed
]


@pytest.fixture(scope="module")
def tasks():
    return task_variants(28, seed=5, task_ids=FAMILIES)


@pytest.fixture(scope="module")
def make_env():
    return env_maker()


@pytest.fixture(scope="module")
def gold(tasks, make_env):
    return [gold_trajectory(t, make_env) for t in tasks]


def test_gold_calls_score_100_percent(tasks, gold, make_env) -> None:
    report = evaluate(tasks, ReplayPlayer(gold), make_env, RolloutConfig(max_steps=12))
    assert report.tasks == len(tasks) == 28
    for metric in ("call_match", "exact_match", "state_match", "outputs_match", "call_accuracy"):
        assert report.overall[metric] == 1.0, metric
    assert set(report.by_capability) >= {
        "single_call",
        "parallel_calls",
        "dependent_calls",
        "needs_clarification",
        "error_recovery",
        "long_horizon",
        "no_tool_needed",
    }
    assert all(s["call_match"] == 1.0 for s in report.by_capability.values())


def test_planted_wrong_call_lowers_the_right_capability(tasks, gold, make_env) -> None:
    victim = next(i for i, t in enumerate(tasks) if t.extra["family"] == FAMILIES[1])
    assert tasks[victim].capabilities == ["parallel_calls"]
    planted = []
    for i, traj in enumerate(gold):
        if i != victim:
            planted.append(traj)
            continue
        messages = [m.model_copy(deep=True) for m in traj.messages]
        step = next(m for m in messages if m.tool_calls)
        step.tool_calls[1] = ToolCall(
            id=step.tool_calls[1].id, name="get_order", arguments='{"order_id": "#W0000"}'
        )
        planted.append(traj.derive(messages=messages))
    report = evaluate(tasks, ReplayPlayer(planted), make_env, RolloutConfig(max_steps=12))
    n = report.counts["parallel_calls"]
    assert report.by_capability["parallel_calls"]["call_match"] == pytest.approx((n - 1) / n)
    assert report.by_capability["parallel_calls"]["exact_match"] == pytest.approx((n - 1) / n)
    for cap, scores in report.by_capability.items():
        if cap != "parallel_calls":
            assert scores["call_match"] == 1.0, cap
    assert report.overall["call_match"] == pytest.approx(1 - 1 / len(tasks))
    bad = next(e for e in report.episodes if e["task_id"] == tasks[victim].task_id)
    assert bad["scores"]["call_match"] == 0.0 and bad["scores"]["call_accuracy"] == 0.0
    # a read-only lookup changes no state: the final state still matches
    assert bad["scores"]["state_match"] == 1.0


def test_scoring_rules(tasks, gold) -> None:
    row = next(t for t in tasks if t.extra["family"] == "commerce-parallel-lookup")
    traj = next(g for g in gold if g.task_id == row.task_id)
    msgs = list(traj.messages)
    assert score_episode(row, msgs)["call_match"] == 1.0
    # the two parallel calls in the other order still match (order-insensitive within a step)
    swapped = [m.model_copy(deep=True) for m in msgs]
    step = next(m for m in swapped if m.tool_calls)
    step.tool_calls.reverse()
    assert score_episode(row, swapped)["exact_match"] == 1.0
    # no final answer: one step short
    short = score_episode(row, msgs[:-1])
    assert short["call_match"] == 0.0 and short["call_accuracy"] == 1.0
    # a clarifying question is expected before the calls of a clarify turn
    clar = next(t for t in tasks if t.extra["family"] == "math-clarify-interest")
    ctraj = next(g for g in gold if g.task_id == clar.task_id)
    skipped = [m for m in ctraj.messages if not (m.role == "assistant" and not m.tool_calls)]
    skipped = [m for m in skipped if m.content != clar.ground_truth.turns[0].clarification]
    skipped.append(Message(role="assistant", content="Done."))
    assert score_episode(clar, skipped)["call_match"] == 0.0
    assert score_episode(clar, ctraj.messages)["call_match"] == 1.0


class _FakeClient:
    """The llm client's chat() contract, answering from gold trajectories."""

    def __init__(self, gold) -> None:
        self.replay = ReplayPlayer(gold)
        self.calls = 0

    async def chat(self, messages, tools=None, **kwargs):
        self.calls += 1
        assert kwargs["temperature"] == 0.0 and tools and "prompt_token_ids" not in kwargs
        row = SimpleNamespace(task_id=self._task)
        message = await self.replay.policy(row, 0, RolloutConfig())(messages, tools)
        choice = SimpleNamespace(
            message=message, finish_reason="stop", format_errors=[], logprobs=None, token_ids=None
        )
        return SimpleNamespace(ok=True, choices=[choice], error=None)


def test_client_policy_uses_the_same_scoring(tasks, gold, make_env) -> None:
    rows = [t for t in tasks if t.extra["family"] == "travel-convert"][:2]
    client = _FakeClient(gold)
    reports = []
    for row in rows:
        client._task = row.task_id
        reports.append(evaluate([row], ChatPlayer(client), make_env, logprobs=False))
    assert all(r.overall["call_match"] == 1.0 for r in reports)
    assert client.calls == 4  # one call step and one answer per task


def test_episode_records_tokens_only_for_token_level_policies(tasks, gold, make_env) -> None:
    eps = asyncio.run(rollout(tasks[:3], ReplayPlayer(gold), make_env, RolloutConfig()))
    assert all(ep.token_ids == [] and ep.messages for ep in eps)
    traj = eps[0].to_trajectory()
    assert traj.parent_ids == [tasks[0].id] and traj.messages == eps[0].messages
    assert to_batch([traj]).num_rows == 1  # a valid shard row


def test_gold_user_nudges_a_needless_question_as_in_generation(tasks, gold, make_env) -> None:
    """Evaluation plays the gold user of generation: a question the task does not expect
    gets the nudge, and the episode goes on to the gold calls."""
    row = next(t for t in tasks if t.extra["family"] == "travel-convert")
    traj = next(g for g in gold if g.task_id == row.task_id)
    question = Message(role="assistant", content="Which currencies do you mean?")
    asked = traj.derive(messages=[question, *traj.messages])
    report = evaluate([row], ReplayPlayer([asked]), make_env, RolloutConfig(max_steps=12))
    messages = report.episodes[0]["messages"]
    assert messages[1]["content"] == question.content
    assert messages[2] == {"role": "user", "content": NUDGE}
    assert [m["role"] for m in messages[3:]] == [m.role for m in traj.messages[1:]]
    # the calls ran and reached the gold state; the extra question costs the step match
    scores = report.episodes[0]["scores"]
    assert scores["state_match"] == 1.0 and scores["outputs_match"] == 1.0
    assert scores["call_match"] == 0.0 and scores["call_accuracy"] == 0.0
