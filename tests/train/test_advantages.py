"""GRPO / GiGPO advantages and the clipped surrogate against hand-computed values.

Run: python -m pytest tests/train/test_advantages.py -q
"""

from __future__ import annotations

import math

import pytest

from trajsynth.train.advantages import (
    AdvantageStats,
    discounted_returns,
    gigpo_advantages,
    group_advantages,
    normalise,
)


def _flat(rows: list[list[float]]) -> list[float]:
    return [x for row in rows for x in row]


def test_group_advantages_hand_computed() -> None:
    # rewards 1,0,0,0: mean 0.25; sample std sqrt((0.75² + 3·0.25²)/3) = 0.5
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == [1.5, -0.5, -0.5, -0.5]
    # rewards 1,1,0,0: mean 0.5; std sqrt(4·0.25/3) = 0.57735
    adv = group_advantages([1.0, 1.0, 0.0, 0.0])
    assert adv is not None
    assert adv == pytest.approx([0.866025, 0.866025, -0.866025, -0.866025], abs=1e-6)
    # Dr. GRPO: no division
    assert group_advantages([1.0, 0.0, 0.0, 0.0], scale=False) == [0.75, -0.25, -0.25, -0.25]


@pytest.mark.parametrize("rewards", [[1.0] * 8, [0.0] * 8, [0.3, 0.3]])
def test_zero_variance_groups_are_filtered(rewards: list[float]) -> None:
    assert group_advantages(rewards) is None
    stats = AdvantageStats()
    stats.add(group_advantages(rewards))
    stats.add(group_advantages([1.0, 0.0]))
    assert stats.summary()["groups_filtered"] == 1.0 and stats.summary()["groups"] == 2.0


@pytest.mark.parametrize(
    "rewards", [[1.0, 0.0, 0.5], [0.2, 0.9, 0.9, 0.1, 0.0, 1.0, 0.3, 0.3], [-1.0, 2.0]]
)
def test_advantages_sum_to_zero_within_a_group(rewards: list[float]) -> None:
    adv = group_advantages(rewards)
    assert adv is not None and abs(sum(adv)) < 1e-9
    # unit sample variance after scaling
    assert sum(a * a for a in adv) / (len(adv) - 1) == pytest.approx(1.0)


def test_discounted_returns() -> None:
    assert discounted_returns([0.0, 0.0, 1.0], 0.95) == pytest.approx([0.9025, 0.95, 1.0])
    assert discounted_returns([1.0, -0.5], 0.5) == [0.75, -0.5]


def test_gigpo_hand_computed() -> None:
    """Two tasks' worth of structure in one group of three episodes:

    ep0: s0 → s1 → success (3 steps: s0, s1, s2), ep1: s0 → s1 → fail (2 steps), ep2: s0 → fail.
    Sparse rewards (at the last step), γ = 0.5, ω = 1, no std scaling (hand-friendly).
    """
    rewards = [1.0, 0.0, 0.0]
    step_rewards = [[0.0, 0.0, 1.0], [0.0, 0.0], [0.0]]
    states = [["s0", "s1", "s2"], ["s0", "s1"], ["s0"]]
    out = gigpo_advantages(rewards, step_rewards, states, omega=1.0, gamma=0.5, scale=False)
    # episode advantages: r − mean = [2/3, −1/3, −1/3]
    # returns: ep0 [0.25, 0.5, 1.0], ep1 [0, 0], ep2 [0]
    # anchor s0: {0.25, 0, 0} mean 1/12 → [1/6, −1/12, −1/12]
    # anchor s1: {0.5, 0} mean 0.25 → [0.25, −0.25]; anchor s2: {1.0} → 0
    expected = [
        [2 / 3 + 1 / 6, 2 / 3 + 0.25, 2 / 3 + 0.0],
        [-1 / 3 - 1 / 12, -1 / 3 - 0.25],
        [-1 / 3 - 1 / 12],
    ]
    assert out is not None and [len(r) for r in out] == [3, 2, 1]
    assert _flat(out) == pytest.approx(_flat(expected))


def test_gigpo_with_scaling_and_omega() -> None:
    out = gigpo_advantages(
        [1.0, 0.0], [[0.0, 1.0], [0.0, 0.0]], [["a", "b"], ["a", "c"]], omega=0.5, gamma=1.0
    )
    # episode: [0.7071, −0.7071]; anchor a: returns {1, 0} → [0.7071, −0.7071]; b, c alone → 0
    r = 1 / math.sqrt(2)
    assert out is not None
    assert _flat(out) == pytest.approx([r + 0.5 * r, r, -r - 0.5 * r, -r])


def test_gigpo_step_signal_survives_equal_episode_rewards() -> None:
    """Both episodes fail, so GRPO has no signal, but one wasted a step at the same state:
    GiGPO's step advantages still tell the two apart (a shorter path has the higher return)."""
    out = gigpo_advantages(
        [0.5, 0.5], [[0.0, 0.5], [0.0, 0.0, 0.5]], [["a", "b"], ["a", "a", "b"]], gamma=0.5
    )
    assert out is not None
    assert out[0][0] > 0 > out[1][0]
    assert gigpo_advantages([1.0, 1.0], [[1.0], [1.0]], [["a"], ["a"]]) is None


def test_gigpo_rejects_misaligned_input() -> None:
    with pytest.raises(ValueError):
        gigpo_advantages([1.0, 0.0], [[1.0]], [["a"], ["b"]])
    with pytest.raises(ValueError):
        gigpo_advantages([1.0, 0.0], [[1.0], [0.0]], [["a", "b"], ["b"]])


def test_normalise_edge_cases() -> None:
    assert normalise([]) == []
    assert normalise([3.0]) == [0.0]
    assert normalise([2.0, 2.0]) == [0.0, 0.0]


def test_clipped_surrogate_hand_computed() -> None:
    torch = pytest.importorskip("torch")
    from trajsynth.train.losses import aggregate, clipped_surrogate, kl_k3

    ratio = torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1, 0.9])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0, -2.0])
    loss, clipped = clipped_surrogate(torch.log(ratio), torch.zeros(6), adv, 0.2, 0.28)
    # A>0 caps the ratio at 1.28; A<0 floors it at 0.8; inside the range nothing is clipped
    assert loss.tolist() == pytest.approx([-1.28, 1.5, -0.5, 0.8, -2.2, 1.8])
    assert clipped.tolist() == [True, False, False, True, False, False]
    # the gradient is zero exactly where the clipped branch is taken
    lp = torch.log(ratio).clone().requires_grad_(True)
    clipped_surrogate(lp, torch.zeros(6), adv, 0.2, 0.28)[0].sum().backward()
    assert lp.grad.tolist() == pytest.approx([0.0, 1.5, -0.5, 0.0, -2.2, 1.8])
    # k3 KL: exp(d) − d − 1 with d = log π_ref − log π
    assert kl_k3(torch.tensor([0.0]), torch.tensor([math.log(2.0)])).item() == pytest.approx(
        2.0 - math.log(2.0) - 1.0
    )
    x, idx = torch.tensor([1.0, 3.0, 10.0]), torch.tensor([0, 0, 1])
    assert aggregate(x, idx, 2, "token_mean").item() == pytest.approx(14 / 3)
    assert aggregate(x, idx, 2, "seq_mean").item() == pytest.approx((2.0 + 10.0) / 2)
