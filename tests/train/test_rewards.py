"""The reward registry: terms composed with weights on real episodes (verifier, the three-part
agent reward, the judge's rubric through the simulator), the penalties, the per-update log, and
every bad configuration refused with one message before any rollout.

Run: python -m pytest tests/train/test_rewards.py -q
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trajsynth.quality.scores import score_conversation
from trajsynth.train.rewards import RewardConfig, parse_rubric, score_rewards
from trajsynth.train.synth import env_maker, task_variants

from .test_grpo import FAMILIES, _episode


@pytest.fixture(scope="module")
def make_env():
    return env_maker(300)


@pytest.fixture(scope="module")
def row():
    return task_variants(3, seed=1, task_ids=FAMILIES[:1], distractors=1)[0]


def _gold(row):
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    return [(gold["name"], gold["arguments"])], [
        (gold["name"], {**gold["arguments"], "amount": -1})
    ]


def test_terms_compose_with_their_weights_and_every_term_is_logged(row, make_env) -> None:
    right, wrong = _gold(row)
    eps = [_episode(row, make_env, right), _episode(row, make_env, wrong)]
    eps[1].format_errors = ["unclosed <tool_call>"]
    cfg = RewardConfig(
        terms={"exact_match": 0.5, "agent_reward": 0.3, "call_accuracy": 0.2},
        efficiency=0.1,
        format=0.5,
    )
    log = score_rewards(eps, make_env, cfg, max_turns=4)
    for ep, em, acc in ((eps[0], 1.0, 1.0), (eps[1], 0.0, 0.0)):
        agent = score_conversation(
            ep.messages, row.tools, format_errors=ep.format_errors, components={"task": em}
        )["agent_reward"]
        fmt = 0.5 if ep.format_errors else 0.0
        want = 0.5 * em + 0.3 * agent + 0.2 * acc - 0.1 * 2 / 4 - fmt
        assert ep.reward == pytest.approx(want)
        assert ep.scores["agent_reward"] == pytest.approx(agent)
        assert ep.step_rewards == [0.0, ep.reward]
    assert eps[0].success and not eps[1].success
    assert 0 < eps[1].scores["agent_reward"] < eps[0].scores["agent_reward"] <= 1
    assert set(log) == {
        "reward_exact_match",
        "reward_agent_reward",
        "reward_call_accuracy",
        "reward_efficiency",
        "reward_format",
    }
    assert log["reward_exact_match"] == 0.5 and log["reward_format"] == -0.25
    assert log["reward_efficiency"] == pytest.approx(-0.05)


def test_kind_alone_is_the_single_term_of_before(row, make_env) -> None:
    right, _ = _gold(row)
    ep = _episode(row, make_env, right)
    score_rewards([ep], make_env, RewardConfig(kind="tool_match"), max_turns=4)
    assert ep.reward == 1.0 and ep.success
    assert RewardConfig().weights() == {"exact_match": 1.0}


def test_the_judge_term_is_the_simulated_judges_weighted_rubric(row, make_env) -> None:
    """The simulator (accuracy 1) scores completion, accuracy, structure and citations from
    the reference calls and the required outputs; the term is their weighted mean."""
    right, wrong = _gold(row)
    eps = [_episode(row, make_env, right), _episode(row, make_env, wrong, answer="Sorry.")]
    judge = {"role": {"backend": "sim", "sim": {"judge_accuracy": 1.0}}}
    cfg = RewardConfig(terms={"judge": 1.0}, judge=judge)
    log = score_rewards(eps, make_env, cfg, max_turns=4)
    good, bad = eps
    assert good.scores["judge_accuracy"] == 1.0 and bad.scores["judge_accuracy"] == 0.0
    assert good.scores["judge_structure"] == bad.scores["judge_structure"] == 1.0
    dims = {"completion": 0.4, "accuracy": 0.3, "structure": 0.2, "citations": 0.1}
    for ep in eps:
        assert ep.reward == pytest.approx(sum(w * ep.scores[f"judge_{d}"] for d, w in dims.items()))
    assert good.reward > bad.reward
    assert log["judge_unreadable"] == 0.0


def test_rubric_answers_are_read_leniently() -> None:
    assert parse_rubric('Scores: {"a": 0.5, "b": 1}', ["a", "b"]) == {"a": 0.5, "b": 1.0}
    assert parse_rubric('{"a": 7, "b": 10}', ["a", "b"]) == {"a": 0.7, "b": 1.0}
    assert parse_rubric('{"a": 0.5}', ["a", "b"]) is None
    assert parse_rubric("no json here", ["a"]) is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"terms": {"exact_match": 0.5, "accuracy": 0.5}}, "unknown reward term 'accuracy'"),
        ({"kind": "f1"}, "unknown reward term 'f1'"),
        ({"terms": {"exact_match": 0.5, "agent_reward": 0.3}}, "sum to 0.8, not the declared"),
        ({"terms": {"exact_match": 2, "judge": 1}, "total": 3}, None),
        ({"kind": "exact_match", "terms": {"exact_match": 1}}, "either kind or terms"),
        ({"terms": {"judge": 1}, "judge": {"dimensions": {"completion": 0.7}}}, "sum to 0.7"),
    ],
)
def test_bad_reward_settings_are_refused(settings, message) -> None:
    if message is None:
        assert RewardConfig.model_validate(settings).weights() == {"exact_match": 2, "judge": 1}
        return
    with pytest.raises(ValidationError, match=message):
        RewardConfig.model_validate(settings)
