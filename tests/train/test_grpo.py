"""GRPO: rewards and advantages of real episodes, the token layout of the update, rollouts
against the environments, and a short run that raises the reward of a weak SFT checkpoint.

Run: python -m pytest tests/train/test_grpo.py -q        (the long run is marked slow)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.core.schema import Message, ToolCall  # noqa: E402
from trajsynth.llm.local import LocalBackend  # noqa: E402
from trajsynth.train.advantages import AdvantageStats  # noqa: E402
from trajsynth.train.grpo import GRPOConfig, _token_batch, score_and_advantages  # noqa: E402
from trajsynth.train.rollout import ChatPlayer, Rollout, RolloutConfig, rollout  # noqa: E402
from trajsynth.train.synth import env_maker, gold_trajectory, task_variants  # noqa: E402

FAMILIES = ["travel-convert", "math-marathon-miles", "commerce-order-status"]


@pytest.fixture(scope="module")
def make_env():
    return env_maker(300)


@pytest.fixture(scope="module")
def tasks():
    return task_variants(12, seed=1, task_ids=FAMILIES, distractors=1)


def _episode(row, make_env, calls: list[tuple[str, dict]] | None, answer: str = "Done.") -> Rollout:
    """An episode that makes ``calls`` (None: answers straight away), then answers."""
    env = make_env(row)
    from trajsynth.core.task import GroundTruth

    env.reset(GroundTruth.from_json(row.ground_truth))
    ep = Rollout(row=row, messages=[Message(role="user", content=row.goal)])
    if calls is not None:
        ep.step_states.append(env.state_hash())
        msg = Message(
            role="assistant",
            tool_calls=[
                ToolCall(id=f"c{i}", name=n, arguments=json.dumps(a))
                for i, (n, a) in enumerate(calls)
            ],
        )
        obs, _, _ = env.step(msg)
        ep.messages += [msg, *obs.to_messages()]
    ep.step_states.append(env.state_hash())
    ep.messages.append(Message(role="assistant", content=answer))
    return ep


def test_rewards_and_group_advantages_of_real_episodes(tasks, make_env) -> None:
    row = tasks[0]
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    right = [(gold["name"], gold["arguments"])]
    wrong = [(gold["name"], {**gold["arguments"], "amount": -1})]
    group = [_episode(row, make_env, c) for c in (right, wrong, wrong, None)]
    stats = AdvantageStats()
    kept = score_and_advantages(group, make_env, GRPOConfig(model="x"), stats)
    assert [ep.reward for ep in group] == [1.0, 0.0, 0.0, 0.0]
    assert [a for _, a in kept] == [[1.5, 1.5], [-0.5, -0.5], [-0.5, -0.5], [-0.5]]
    assert group[0].step_rewards == [0.0, 1.0]
    # a group where every episode fails carries no signal and is dropped
    stats = AdvantageStats()
    assert (
        score_and_advantages(
            [_episode(row, make_env, wrong) for _ in range(3)],
            make_env,
            GRPOConfig(model="x"),
            stats,
        )
        == []
    )
    assert stats.summary()["groups_filtered"] == 1.0


def test_reward_terms_are_configurable(tasks, make_env) -> None:
    row = tasks[0]
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    ep = _episode(row, make_env, [(gold["name"], gold["arguments"])])
    ep.format_errors = ["unclosed <tool_call>"]
    cfg = GRPOConfig(model="x", reward={"efficiency": 0.1, "format": 0.5})
    cfg.rollout.max_steps = 4
    score_and_advantages([ep], make_env, cfg, AdvantageStats())
    # R = 1 − 0.1 · 2/4 − 0.5
    assert ep.reward == pytest.approx(1 - 0.05 - 0.5)


def test_first_step_exact_is_the_multiset_match_of_the_first_turn(tasks, make_env) -> None:
    from trajsynth.train.eval import first_step_exact

    row = tasks[0]
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    right = _episode(row, make_env, [(gold["name"], gold["arguments"])])
    wrong = _episode(row, make_env, [(gold["name"], {**gold["arguments"], "amount": -1})])
    twice = _episode(row, make_env, [(gold["name"], gold["arguments"])] * 2)
    text = _episode(row, make_env, None)
    assert [first_step_exact(row, ep.messages) for ep in (right, wrong, twice, text)] == [
        1.0,
        0.0,
        0.0,
        0.0,
    ]
    # the same reward through the trainer: a group with one right episode has signal
    kept = score_and_advantages(
        [right, wrong, text], make_env, GRPOConfig(model="x"), AdvantageStats(), first_step_exact
    )
    assert [ep.reward for ep, _ in kept] == [1.0, 0.0, 0.0]


def test_gigpo_groups_by_state_hash(tasks, make_env) -> None:
    row = next(t for t in tasks if t.extra["family"] == "travel-convert")
    gold = row.ground_truth.turns[0].steps[0][0].model_dump(mode="json")
    right = [(gold["name"], gold["arguments"])]
    group = [_episode(row, make_env, right), _episode(row, make_env, None)]
    cfg = GRPOConfig(model="x", advantage="gigpo", scale_advantages=False, gamma=0.5)
    kept = score_and_advantages(group, make_env, cfg, AdvantageStats())
    # episode advantages ±0.5. convert_currency only reads, so all three steps act from the
    # same state hash: one anchor group with returns 0.5 (= γ·1), 1.0 and 0, mean 0.5 →
    # step advantages 0, +0.5 and −0.5
    assert [a for _, a in kept] == [[0.5, 1.0], [-1.0]]
    assert group[0].step_states[0] == group[0].step_states[1] == group[1].step_states[0]


def test_token_batch_puts_advantages_on_generated_tokens_only() -> None:
    from trajsynth.core.schema import Trajectory

    row = Trajectory(id="r", task_id="t")
    ep = Rollout(row=row)
    ep.token_ids = [5, 6, 7, 8, 9, 10, 11]
    ep.mask = [0, 0, 1, 1, 0, 1, 1]
    ep.step_of_token = [-1, -1, 0, 0, -1, 1, 1]
    batch = _token_batch([(ep, [2.0, -1.0])], pad_id=0, device="cpu")
    # positions t whose next token is generated: t = 1, 2, 4, 5 → advantages of steps 0, 0, 1, 1
    assert batch["adv"].tolist() == [2.0, 2.0, -1.0, -1.0]
    assert batch["mask"].tolist() == [[False, False, True, True, False, True, True]]


def test_rollouts_keep_generated_ids_and_batch_generation(tasks, make_env, tiny_student) -> None:
    model, tok = tiny_student
    backend = LocalBackend.from_model(model, tok, batch_size=64)
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=24, max_steps=3, batch_size=64)
    eps = asyncio.run(rollout(tasks[:4], ChatPlayer.local(backend), make_env, cfg, samples=3))
    assert len(eps) == 12 and all(ep.error is None for ep in eps)
    # every episode's first turn went out in one batch
    assert backend.stats["batches"] < sum(ep.steps for ep in eps)
    for ep in eps:
        assert len(ep.token_ids) == len(ep.mask) == len(ep.step_of_token)
        assert ep.steps >= 1 and len(ep.step_states) >= ep.steps
        generated = [t for t, m in zip(ep.token_ids, ep.mask, strict=True) if m]
        assert generated and sum(ep.mask) <= ep.steps * cfg.max_new_tokens
        # the prompt is the chat template's rendering of the first request
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": ep.row.goal}], tools=ep.row.tools,
            add_generation_prompt=True, return_dict=False,
        )  # fmt: skip
        assert ep.token_ids[: len(prompt)] == list(prompt)


def test_update_logprobs_are_those_of_the_sampling_temperature(tiny_student) -> None:
    """Rollouts sampled at temperature T come from softmax(logits / T): the update scores
    the generated tokens under that policy, not under T = 1."""
    from trajsynth.train.grpo import _logprobs

    model, _ = tiny_student
    ids = torch.tensor([[1, 5, 7, 9, 11, 13]])
    mask = torch.tensor([[False, False, True, True, False, True]])
    batch = {"ids": ids, "mask": mask}
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()  # (T-1, V)
        for temp in (1.0, 0.5):
            want = torch.log_softmax(logits / temp, -1)[[1, 2, 4], ids[0, [2, 3, 5]]]
            got = _logprobs(model, batch, "cpu", "fp32", temp)
            assert torch.allclose(got, want, atol=1e-5), temp


@pytest.fixture(scope="module")
def tiny_student(tasks, make_env):
    from trajsynth.train.tiny import TinyConfig, new_student

    gold = [gold_trajectory(t, make_env) for t in tasks]
    return new_student(gold, TinyConfig(vocab_size=500, hidden_size=32, intermediate_size=64))


@pytest.mark.slow
def test_grpo_raises_the_reward_of_a_weak_sft_checkpoint(tmp_path: Path) -> None:
    """A weak SFT checkpoint (60 steps on gold trajectories), then GRPO on the same task
    families with the reward "right tools at every step, minus 1 for a malformed turn"
    (``tool_match`` with ``format: 1.0``), sampled at temperature 1: the mean reward of the
    last quarter of updates beats the first quarter by at least 0.15, and the share of
    episodes with a format error falls. (The binary exact-match reward gives a student this
    weak no signal at all: every group scores 0 and is filtered.)"""
    from trajsynth.train.grpo import train_grpo
    from trajsynth.train.sft import SFTConfig, train_sft

    make_env = env_maker(300)
    tasks = task_variants(120, seed=3, task_ids=FAMILIES, distractors=1)
    gold = [gold_trajectory(t, make_env) for t in tasks[:80]]
    train_sft(gold, tmp_path / "sft", SFTConfig(max_steps=60, batch_size=2, max_len=1024, lr=5e-3))
    cfg = GRPOConfig(
        model=str(tmp_path / "sft"),
        iterations=8,
        tasks_per_step=6,
        group_size=8,
        lr=1e-3,
        rollout=RolloutConfig(temperature=1.0, max_new_tokens=48, max_steps=3),
        max_observation_chars=300,
        reward={"kind": "tool_match", "format": 1.0},
    )
    result = train_grpo(tasks[80:], tmp_path / "grpo", cfg, make_env=make_env)
    rewards = [h["reward"] for h in result.history]
    errors = [h["format_errors"] for h in result.history]
    q = len(rewards) // 4
    first, last = sum(rewards[:q]) / q, sum(rewards[-q:]) / q
    assert last >= first + 0.15, rewards
    assert sum(errors[-q:]) < sum(errors[:q]), errors
    assert all(h["updates"] >= 1 or h["groups_filtered"] == h["groups"] for h in result.history)


def test_train_grpo_on_arena_packages_uses_the_package_reward(tmp_path: Path, external_dir) -> None:
    """`train-grpo --arenas DIR`: arena packages bring their own environments and reward (the
    package's sub-goal F1, no verifier, no LLM), and a short GRPO run goes through them."""
    from trajsynth.envs.arena import arena_training_set, pack_arena
    from trajsynth.envs.importers.bfcl import convert_function
    from trajsynth.envs.sandbox import Sandbox
    from trajsynth.train.checkpoint import save_model
    from trajsynth.train.tiny import TinyConfig, new_student

    from ..envs.test_arena import ADD, MULTIPLY, task_row

    docs = external_dir / "bfcl" / "multi_turn_func_doc" / "math_api.json"
    tools = [convert_function(json.loads(x)).to_openai() for x in docs.read_text().splitlines()]
    with Sandbox() as sandbox:
        package = pack_arena(task_row(tools), code={"add": ADD, "multiply": MULTIPLY},
                             distractors=1, sandbox=sandbox)  # fmt: skip
    arenas = tmp_path / "arenas"
    arenas.mkdir()
    (arenas / f"{package.uuid}.json").write_text(package.model_dump_json())
    arena_set = arena_training_set(arenas)
    row = arena_set.rows[0]
    # the package's own reward decides: the full solve 1, half of it F1 = 2·1·0.5/1.5 = 2/3
    add = ("add", {"a": 3.0, "b": 4.0})
    mul = ("multiply", {"a": 7.0, "b": 5.0})
    ep_full, ep_half = Rollout(row=row), Rollout(row=row)
    ep_full.messages = [Message(role="assistant", tool_calls=[ToolCall(id=n, name=n,
                        arguments=json.dumps(a)) for n, a in (add, mul)])]  # fmt: skip
    ep_half.messages = [Message(role="assistant", tool_calls=[ToolCall(id="a", name=add[0],
                        arguments=json.dumps(add[1]))])]  # fmt: skip
    kept = score_and_advantages([ep_full, ep_half], arena_set.make_env, GRPOConfig(model="x"),
                                AdvantageStats(), arena_set.reward)  # fmt: skip
    assert ep_full.reward == 1.0 and ep_half.reward == pytest.approx(2 / 3, abs=1e-9)
    assert len(kept) == 2
    arena_set.close()
    # and the CLI trains on the folder
    model, tok = new_student([row], TinyConfig(vocab_size=300, hidden_size=32,
                                               intermediate_size=64))  # fmt: skip
    save_model(tmp_path / "m", model, tok)
    from typer.testing import CliRunner

    from trajsynth.cli import app

    res = CliRunner().invoke(app, ["train-grpo", "--model", str(tmp_path / "m"), "--out",
        str(tmp_path / "g"), "--arenas", str(arenas), "--iterations", "1", "--group-size", "2",
        "--tasks-per-step", "1", "--set", "rollout.max_new_tokens=8", "--set",
        "rollout.max_steps=1", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    line = res.stdout.strip().splitlines()[-1]
    history = json.loads(line)["history"]
    assert len(history) == 1 and 0.0 <= history[0]["reward"] <= 1.0
    assert (tmp_path / "g" / "config.json").is_file()
