"""Advantages for GRPO and GiGPO, as pure functions over plain lists.

**Group-relative advantage** (GRPO; Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, §4.1.2):
for the G rollouts of one task with rewards r_1..r_G, A_i = (r_i − mean(r)) / std(r). std is
the sample standard deviation (n − 1), as verl and TRL compute it; ``scale=False`` gives
r_i − mean(r) (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783, drops the division). A group whose
rewards are all equal carries no signal (every A_i = 0); it is *filtered*: the trainer drops it
(DAPO's dynamic sampling, Yu et al. 2025, arXiv 2503.14476, §3.2).

**GiGPO** (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
arXiv 2505.10978, §3): the episode advantage above, plus ω × a step advantage computed
within *anchor-state groups*: every step, across the G rollouts of a task, taken from the same
environment state (same ``state_hash`` before the action) forms one group, and a step's
advantage is its discounted return R_t = Σ_{k≥t} γ^{k−t} r_k normalised within its group
(mean and std as above). A step whose state no other rollout visited gets step advantage 0.
Combined per step: A_t = A^E + ω · A^S_t (paper: ω = 1, γ = 0.95).

>>> group_advantages([1.0, 0.0, 0.0, 0.0])
[1.5, -0.5, -0.5, -0.5]
>>> group_advantages([1.0, 1.0, 1.0]) is None
True
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .rollout import Rollout

__all__ = [
    "AdvantageStats",
    "GroupRelative",
    "discounted_returns",
    "gigpo_advantages",
    "group_advantages",
    "normalise",
]

EPS = 1e-6


def normalise(values: Sequence[float], *, scale: bool = True) -> list[float]:
    """(x − mean) / std with the sample std; a single value or equal values give 0s.

    >>> normalise([2.0, 4.0])  # doctest: +ELLIPSIS
    [-0.707106..., 0.707106...]
    """
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    centred = [v - mean for v in values]
    if not scale:
        return centred
    if n == 1:
        return [0.0]
    std = math.sqrt(sum(c * c for c in centred) / (n - 1))
    return [c / max(std, EPS) for c in centred]


def group_advantages(rewards: Sequence[float], *, scale: bool = True) -> list[float] | None:
    """GRPO advantages of one group, or None when its rewards are all equal (filtered).

    >>> group_advantages([1.0, 0.0], scale=False)
    [0.5, -0.5]
    """
    if len(rewards) < 2 or max(rewards) - min(rewards) < 1e-12:
        return None
    return [round(a, 12) for a in normalise(rewards, scale=scale)]


def discounted_returns(step_rewards: Sequence[float], gamma: float) -> list[float]:
    """R_t = Σ_{k≥t} γ^{k−t} r_k for one episode.

    >>> discounted_returns([0.0, 0.0, 1.0], gamma=0.5)
    [0.25, 0.5, 1.0]
    """
    out = [0.0] * len(step_rewards)
    running = 0.0
    for t in range(len(step_rewards) - 1, -1, -1):
        running = step_rewards[t] + gamma * running
        out[t] = running
    return out


def gigpo_advantages(
    episode_rewards: Sequence[float],
    step_rewards: Sequence[Sequence[float]],
    step_states: Sequence[Sequence[str]],
    *,
    omega: float = 1.0,
    gamma: float = 0.95,
    scale: bool = True,
) -> list[list[float]] | None:
    """Per-step GiGPO advantages A^E + ω·A^S for the G episodes of one task (module
    docstring), or None when the group carries no signal at all (equal episode rewards and
    every anchor group's returns equal).

    ``step_states[i][t]``: the environment's state hash before episode i took step t.

    >>> gigpo_advantages([1.0, 0.0], [[0.0, 1.0], [0.0, 0.0]], [["s0", "s1"], ["s0", "s2"]],
    ...                  gamma=0.5, scale=False)
    [[0.75, 0.5], [-0.75, -0.5]]
    """
    g = len(episode_rewards)
    if not (len(step_rewards) == len(step_states) == g):
        raise ValueError("one list of step rewards and of step states per episode")
    # 1) episode-level advantages (0 when the group's rewards are all equal)
    episode = group_advantages(episode_rewards, scale=scale) or [0.0] * g
    # 2) discounted returns of every step
    returns = [discounted_returns(r, gamma) for r in step_rewards]
    # 3) anchor-state groups: (episode, step) pairs that acted from the same state
    groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, states in enumerate(step_states):
        if len(states) != len(step_rewards[i]):
            raise ValueError(f"episode {i}: {len(states)} states for {len(step_rewards[i])} steps")
        for t, s in enumerate(states):
            groups[s].append((i, t))
    step_adv = [[0.0] * len(r) for r in step_rewards]
    for members in groups.values():
        values = normalise([returns[i][t] for i, t in members], scale=scale)
        for (i, t), a in zip(members, values, strict=True):
            step_adv[i][t] = a
    # 4) combine
    combined = [[round(episode[i] + omega * a, 12) for a in step_adv[i]] for i in range(g)]
    if all(abs(a) < 1e-12 for row in combined for a in row):
        return None
    return combined


class AdvantageStats:
    """Running statistics of the advantages of a batch (for logs)."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.groups = 0
        self.filtered = 0

    def add(self, advantages: Sequence[float] | None) -> None:
        self.groups += 1
        if advantages is None:
            self.filtered += 1
            return
        self.values.extend(advantages)

    def summary(self) -> dict[str, float]:
        v = self.values
        n = len(v)
        mean = sum(v) / n if n else 0.0
        std = math.sqrt(sum((x - mean) ** 2 for x in v) / n) if n else 0.0
        return {
            "adv_mean": mean,
            "adv_std": std,
            "adv_abs_max": max((abs(x) for x in v), default=0.0),
            "groups": float(self.groups),
            "groups_filtered": float(self.filtered),
        }


class GroupRelative:
    """GRPO (``gigpo=False``) or GiGPO as the loop's estimator (:mod:`.credit`): per group,
    :func:`group_advantages` on every turn of an episode, or :func:`gigpo_advantages` on the
    episodes' step rewards and state hashes; a group without signal is dropped."""

    def __init__(
        self, *, gigpo: bool = False, omega: float = 1.0, gamma: float = 0.95, scale: bool = True
    ) -> None:
        self.name = "gigpo" if gigpo else "grpo"
        self.gigpo, self.omega, self.gamma, self.scale = gigpo, omega, gamma, scale

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> list[tuple[Rollout, list[float]]]:
        kept: list[tuple[Rollout, list[float]]] = []
        for group in groups:
            rewards = [ep.reward for ep in group]
            if not self.gigpo:
                adv = group_advantages(rewards, scale=self.scale)
                stats.add(adv)
                if adv is not None:  # else no signal: filtered
                    kept += [(ep, [a] * ep.steps) for ep, a in zip(group, adv, strict=True)]
                continue
            steps = gigpo_advantages(
                rewards,
                [ep.step_rewards for ep in group],
                [ep.step_states[: ep.steps] for ep in group],
                omega=self.omega,
                gamma=self.gamma,
                scale=self.scale,
            )
            stats.add(None if steps is None else [a for s in steps for a in s])
            if steps is not None:
                kept += list(zip(group, steps, strict=True))
        return kept

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
