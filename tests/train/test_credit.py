"""The step-level estimators' mathematics on hand-built trajectories: Turn-PPO's GAE over
turns, ArCHer's TD targets and twin critic, StarPO-S's filter and how it composes with GRPO's
equal-reward rule, explicit and implicit PRM step rewards — each against values worked out by
hand in the comments — and critics that learn known value functions on toy MDPs.

Run: python -m pytest tests/train/test_credit.py -q
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from trajsynth.core.schema import Message, Trajectory  # noqa: E402
from trajsynth.train.advantages import AdvantageStats, GroupRelative  # noqa: E402
from trajsynth.train.archer import (  # noqa: E402
    Archer,
    ArcherConfig,
    ReplayBuffer,
    Transition,
    TwinCritic,
    td_target,
)
from trajsynth.train.credit import episode_plus_step, token_batch, turn_rewards  # noqa: E402
from trajsynth.train.critic import HeadConfig, auc, explained_variance, whiten  # noqa: E402
from trajsynth.train.istar import (  # noqa: E402
    eto_gradients,
    eto_loss,
    preference_pairs,
    step_sums,
)
from trajsynth.train.rollout import Rollout  # noqa: E402
from trajsynth.train.starpo import filter_groups, reward_std, top_variance  # noqa: E402
from trajsynth.train.turn_ppo import TurnCritic, TurnPPO, TurnPPOConfig, turn_gae  # noqa: E402


def _episode(task: str, reward: float, turns: int, tokens_per_turn: int = 2) -> Rollout:
    """A hand-built episode: a 2-token prompt, then per turn ``tokens_per_turn`` generated
    tokens and one observation token; the reward on the last turn."""
    row = Trajectory(id=task, task_id=task)
    ep = Rollout(row=row)
    ep.messages = [Message(role="user", content="go")]
    ids, mask, steps = [1, 2], [0, 0], [-1, -1]
    for t in range(turns):
        ep.messages.append(Message(role="assistant", content=f"turn {t}"))
        ids += [10 + t] * tokens_per_turn + [3]
        mask += [1] * tokens_per_turn + [0]
        steps += [t] * tokens_per_turn + [-1]
    ep.token_ids, ep.mask, ep.step_of_token = ids, mask, steps
    ep.reward = reward
    ep.step_rewards = [0.0] * (turns - 1) + [reward]
    return ep


class OneHotTurns:
    """A stand-in encoder: the feature of a position is the one-hot of its turn index."""

    dim = 4

    def features(self, seqs):
        return [torch.eye(self.dim)[[min(t, self.dim - 1) for t in turns]] for _, _, turns in seqs]


# --------------------------------------------------------------------------------------
# Turn-PPO
# --------------------------------------------------------------------------------------


def test_turn_gae_hand_computed() -> None:
    # rewards [0, 0, 1], V = [0.2, 0.5, 0.8], γ = 0.9, λ = 0.8, V(s_3) = 0:
    # δ2 = 1 − 0.8 = 0.2; δ1 = 0.9·0.8 − 0.5 = 0.22; δ0 = 0.9·0.5 − 0.2 = 0.25
    # A2 = 0.2; A1 = 0.22 + 0.72·0.2 = 0.364; A0 = 0.25 + 0.72·0.364 = 0.51208
    adv, ret = turn_gae([0.0, 0.0, 1.0], [0.2, 0.5, 0.8], gamma=0.9, lam=0.8)
    assert adv == pytest.approx([0.51208, 0.364, 0.2])
    assert ret == pytest.approx([0.71208, 0.864, 1.0])  # A + V


def test_turn_gae_with_lambda_one_is_the_return_less_the_value() -> None:
    # the 3-turn chain of the method notes: G_t = γ^{2−t}, A_t = G_t − V(s_t)
    values = [0.3, 0.1, 0.7]
    adv, ret = turn_gae([0.0, 0.0, 1.0], values, gamma=0.9, lam=1.0)
    assert ret == pytest.approx([0.81, 0.9, 1.0])
    assert adv == pytest.approx([0.81 - 0.3, 0.9 - 0.1, 1.0 - 0.7])
    # λ = 0: one-step TD errors
    adv0, _ = turn_gae([0.0, 0.0, 1.0], values, gamma=0.9, lam=0.0)
    assert adv0 == pytest.approx([0.9 * 0.1 - 0.3, 0.9 * 0.7 - 0.1, 1.0 - 0.7])


def test_turn_rewards_move_a_reward_past_the_last_turn_onto_it() -> None:
    assert turn_rewards([0.0, 0.0, 1.0], 3) == [0.0, 0.0, 1.0]
    assert turn_rewards([0.0, 0.0, 1.0], 2) == [0.0, 1.0]
    assert turn_rewards([1.0], 2) == [1.0, 0.0]


def test_turn_ppo_gives_every_token_of_a_turn_its_turn_advantage() -> None:
    """Two episodes, values fixed by hand (critic predictions replaced): the estimator's
    advantages are the whitened turn GAE, and each turn's tokens all carry its value."""
    est = TurnPPO(OneHotTurns(), TurnPPOConfig(gamma=1.0, lam=1.0, epochs=1))  # type: ignore[arg-type]
    est.critic.predict = lambda f: [0.5] * len(f)  # type: ignore[method-assign]
    win, lose = _episode("a", 1.0, 3), _episode("a", 0.0, 2)
    metrics: dict[str, float] = {}
    kept = est.advantages([[win, lose]], AdvantageStats(), metrics)
    # V: win [0.5, 0.5, 0.5], lose [0.5, 0.5]; λ = γ = 1 → A = G − V:
    # win [0.5, 0.5, 0.5], lose [−0.5, −0.5]; whitened: mean 0.1, std 0.4899
    raw = [0.5, 0.5, 0.5, -0.5, -0.5]
    mean = sum(raw) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in raw) / 5)
    want = [(x - mean) / std for x in raw]
    assert [a for _, adv in kept for a in adv] == pytest.approx(want)
    assert metrics["explained_variance"] == pytest.approx(
        explained_variance([0.5] * 5, [1, 1, 1, 0, 0])
    )
    assert "critic_loss" in metrics
    batch = token_batch(kept, pad_id=0, device="cpu")
    per_token = batch["adv"].tolist()
    steps = batch["step"].tolist()
    seqs = batch["seq_index"].tolist()
    for ep_i, (_, adv) in enumerate(kept):
        for t, a in enumerate(adv):
            got = [
                x for x, s, q in zip(per_token, steps, seqs, strict=True) if s == t and q == ep_i
            ]
            assert len(got) == 2 and got == pytest.approx([a, a])


def test_turn_critic_learns_the_value_function_of_a_noisy_chain() -> None:
    """A 3-state chain s0 → s1 → s2 → end, reward 1 with probability 0.7 at the end, γ = 0.9:
    V(s_t) = 0.7·γ^{2−t} = [0.567, 0.63, 0.7]. Fitted on Monte Carlo returns (GAE, λ = 1)
    of 400 sampled episodes, the critic's values land within 0.05."""
    gen = torch.Generator().manual_seed(0)
    feats, targets = [], []
    for _ in range(400):
        r = float(torch.rand(1, generator=gen) < 0.7)
        _, ret = turn_gae([0.0, 0.0, r], [0.0, 0.0, 0.0], gamma=0.9, lam=1.0)
        feats += [torch.eye(3)[t] for t in range(3)]
        targets += ret
    critic = TurnCritic(3, HeadConfig(hidden=32, lr=3e-3, batch=64))
    critic.fit(torch.stack(feats), targets, epochs=15)
    assert critic.predict(torch.eye(3)) == pytest.approx([0.567, 0.63, 0.7], abs=0.05)


# --------------------------------------------------------------------------------------
# ArCHer
# --------------------------------------------------------------------------------------


def test_td_target_hand_computed() -> None:
    assert td_target(0.0, False, 0.8, 0.95) == pytest.approx(0.76)
    assert td_target(1.0, True, 0.8, 0.95) == 1.0  # no bootstrap past the end


def test_archer_critic_learns_q_and_v_on_a_two_step_chain() -> None:
    """s0: `good` → s1 (r 0), `bad` → end (r 0); s1: the only action → end (r 1); γ = 0.9;
    the logged policy takes good and bad equally. Analytic: Q(s1, a) = V(s1) = 1,
    Q(s0, good) = γ·V(s1) = 0.9, Q(s0, bad) = 0, V(s0) = E_π Q(s0, ·) = 0.45; the advantage
    of the good utterance is +0.45 and of the bad one −0.45."""
    e = torch.eye(5)  # features: s0, s1 | (s0, good), (s0, bad), (s1, a)
    s0, s1, s0g, s0b, s1a = e[0], e[1], e[2], e[3], e[4]
    zero = torch.zeros(5)
    buf = ReplayBuffer(1000)
    for _ in range(50):
        buf.push(
            [
                Transition(s0, s0g, 0.0, s1, False),
                Transition(s1, s1a, 1.0, zero, True),
                Transition(s0, s0b, 0.0, zero, True),
            ]
        )
    critic = TwinCritic(5, HeadConfig(hidden=32, lr=5e-3, batch=32), gamma=0.9, tau=0.1)
    for _ in range(500):
        critic.step(buf, latest=0)
    q = critic.q_values(torch.stack([s0g, s0b, s1a]))
    v = critic.values(torch.stack([s0, s1]))
    assert q == pytest.approx([0.9, 0.0, 1.0], abs=0.06)
    assert v == pytest.approx([0.45, 1.0], abs=0.06)
    assert q[0] - v[0] > 0.35 and q[1] - v[0] < -0.35


def test_archer_warmup_trains_only_the_critic_then_gives_q_minus_v() -> None:
    est = Archer(OneHotTurns(), ArcherConfig(steps=2, warmup=1, whiten=False))  # type: ignore[arg-type]
    metrics: dict[str, float] = {}
    group = [_episode("a", 1.0, 2), _episode("a", 0.0, 2)]
    assert est.advantages([group], AdvantageStats(), metrics) == []
    assert metrics["critic_warmup"] == 1.0 and metrics["replay"] == 4.0
    metrics = {}
    kept = est.advantages([group], AdvantageStats(), metrics)
    assert metrics["replay"] == 8.0 and len(kept) == 2
    s = torch.eye(4)[[0, 1]]  # the stand-in encoder reads a turn's state and action alike
    want = [q - v for q, v in zip(est.critic.q_values(s), est.critic.values(s), strict=True)]
    assert kept[0][1] == pytest.approx(want) and kept[1][1] == pytest.approx(want)


# --------------------------------------------------------------------------------------
# StarPO-S
# --------------------------------------------------------------------------------------


def test_starpo_keeps_the_top_share_by_reward_std() -> None:
    groups = [[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0], [0.5, 0.5, 0.5, 0.0]]
    # std: 0.5, 0, 0.5774, 0.25 → top 25% of 4 = the one group [1, 0, 1, 0]
    assert reward_std(groups[2]) == pytest.approx(math.sqrt(1 / 3))
    assert top_variance(groups, 0.25) == [2]
    assert top_variance(groups, 0.5) == [0, 2]
    assert top_variance(groups, 1.0) == [0, 1, 2, 3]
    assert top_variance(groups[:3], 0.25) == [2]  # ⌊0.75⌋ = 0 → at least one group
    with pytest.raises(ValueError):
        top_variance(groups, 0.0)


def test_starpo_and_the_equal_reward_rule_compose() -> None:
    """Four groups, two of them all-equal. Keeping 75% keeps three groups, one of them
    all-equal (it ranks after the others but the share reaches it); GRPO then drops it, so
    two groups train. Critic estimators would keep all three."""

    def group(task, rewards):
        return [_episode(task, r, 1) for r in rewards]

    groups = [group("a", [1, 1]), group("b", [1, 0]), group("c", [0, 0]), group("d", [0, 1])]
    metrics: dict[str, float] = {}
    kept_groups = filter_groups(groups, 0.75, metrics)
    assert [g[0].row.id for g in kept_groups] == ["a", "b", "d"]
    assert metrics["starpo_kept"] == 0.75
    stats = AdvantageStats()
    kept = GroupRelative().advantages(kept_groups, stats, {})
    assert stats.summary()["groups_filtered"] == 1.0
    assert {ep.row.id for ep, _ in kept} == {"b", "d"}


# --------------------------------------------------------------------------------------
# PRM step rewards (explicit and implicit)
# --------------------------------------------------------------------------------------


def test_episode_plus_step_hand_computed() -> None:
    # rewards [1, 0] → A^E = [0.5, −0.5] (no scaling); step rewards 0.9, 0.8 | 0.2:
    # mean 0.6333 → A^S = [0.2667, 0.1667 | −0.4333]; w = 0.5
    out = episode_plus_step([1.0, 0.0], [[0.9, 0.8], [0.2]], weight=0.5, scale=False)
    assert out is not None
    assert out[0] == pytest.approx([0.5 + 0.5 * 0.8 / 3, 0.5 + 0.5 * 0.5 / 3])
    assert out[1] == pytest.approx([-0.5 - 0.5 * 1.3 / 3])
    # equal episode rewards: the step rewards alone carry the signal
    same = episode_plus_step([0.0, 0.0], [[1.0], [0.0]], scale=False)
    assert same == [[0.5], [-0.5]]
    # nothing differs: no signal
    assert episode_plus_step([1.0, 1.0], [[0.3], [0.3]]) is None


def test_explicit_prm_scores_become_dense_step_advantages() -> None:
    from trajsynth.train.agent_prm import AgentPRM, PRMRewardConfig

    class FixedScorer:
        def score(self, rows):
            return [[0.9, 0.8] if len(r.assistant_steps()) == 2 else [0.2] for r in rows]

    est = AgentPRM(FixedScorer(), PRMRewardConfig(path="x", weight=0.5), scale=False)  # type: ignore[arg-type]
    metrics: dict[str, float] = {}
    kept = est.advantages(
        [[_episode("a", 1.0, 2), _episode("a", 0.0, 1)]], AdvantageStats(), metrics
    )
    assert [a for _, adv in kept for a in adv] == pytest.approx(
        [0.5 + 0.4 / 3, 0.5 + 0.25 / 3, -0.5 - 0.65 / 3]
    )
    assert metrics["prm_score_mean"] == pytest.approx((0.9 + 0.8 + 0.2) / 3)


def test_implicit_prm_step_rewards_and_eto_loss_hand_computed() -> None:
    # q per token [0.2, −0.4 | 1.0], turns [0, 0 | 1], β = 0.05 → r = [−0.01, 0.05]
    assert step_sums([0.2, -0.4, 1.0], [0, 0, 1], 2, beta=0.05) == pytest.approx([-0.01, 0.05])
    pairs = preference_pairs([1.0, 0.0, 0.5])
    assert pairs == [(0, 1), (0, 2), (2, 1)]
    scores = [0.3, -0.1, 0.0]
    # L = mean of log(1 + e^{−(S_i − S_j)}) over the pairs
    want = sum(math.log1p(math.exp(-(scores[i] - scores[j]))) for i, j in pairs) / 3
    assert eto_loss(scores, pairs) == pytest.approx(want)
    # the analytic gradient equals finite differences
    grads = eto_gradients(scores, pairs)
    for k in range(3):
        bumped = list(scores)
        bumped[k] += 1e-6
        assert grads[k] == pytest.approx((eto_loss(bumped, pairs) - want) / 1e-6, abs=1e-5)


def test_implicit_prm_learns_the_decisive_step() -> None:
    """iStar's offline check: episodes of three turns where only the middle turn's action
    (token 20 or 21) decides success; pairs of episodes share their other turns. After eto
    updates of π_φ against the fixed rollout policy, the step rewards tell successes from
    failures from the decisive turn on: its reward is large and positive on successes and
    negative on failures, while the turn before it (which has not seen the decisive action)
    separates them at most a quarter as much. (The turn after it has seen the action, and
    shares the credit: an implicit PRM credits every token whose context holds the cause.)"""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trajsynth.train.istar import IStar, IStarConfig

    torch.manual_seed(0)
    policy = LlamaForCausalLM(
        LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    )  # fmt: skip
    policy.eval()
    est = IStar(
        policy, IStarConfig(beta=1.0, lr=3e-3, epochs=1), pad_id=0, device="cpu",
        precision="fp32", temperature=1.0, micro_batch=16, scale=False,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(1)

    noises = [torch.randint(24, 30, (2,), generator=gen).tolist() for _ in range(4)]

    def episode(k: int) -> Rollout:
        """Episodes 2m and 2m + 1 share their other turns and differ in the decisive one."""
        ep = _episode("task", 0.0, 3, tokens_per_turn=1)
        noise = noises[(k // 2) % len(noises)]
        decisive = 20 if k % 2 == 0 else 21
        ep.token_ids = [1, 2, noise[0], 3, decisive, 3, noise[1], 3]
        ep.reward = 1.0 if decisive == 20 else 0.0
        ep.step_rewards = [0.0, 0.0, ep.reward]
        return ep

    for _ in range(25):
        est.advantages([[episode(k) for k in range(8)]], AdvantageStats(), {})
    test = [episode(k) for k in range(8)]
    q = est._q(est._batches(test))
    rewards = [step_sums(qk.tolist(), st.tolist(), 3, 1.0) for qk, st in q]
    wins = [r for r, ep in zip(rewards, test, strict=True) if ep.reward == 1.0]
    losses = [r for r, ep in zip(rewards, test, strict=True) if ep.reward == 0.0]
    mean = lambda rows, t: sum(r[t] for r in rows) / len(rows)  # noqa: E731
    assert mean(wins, 1) > 0.5 and mean(losses, 1) < -0.5
    gap = [mean(wins, t) - mean(losses, t) for t in range(3)]
    assert abs(gap[0]) < 0.25 * gap[1]


# --------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------


def test_statistics_hand_computed() -> None:
    assert explained_variance([0.0, 1.0], [0.0, 2.0]) == pytest.approx(0.75)
    # 3 positives, 2 negatives: pairs ranked right 5 of 6 → 5/6
    assert auc([0.9, 0.8, 0.3, 0.5, 0.1], [True, True, True, False, False]) == pytest.approx(5 / 6)
    assert auc([0.1, 0.2], [True, True]) is None
    assert whiten([1.0, 2.0, 3.0], center=False) == pytest.approx(
        [1.2247, 2.4495, 3.6742], abs=1e-4
    )
