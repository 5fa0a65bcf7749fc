"""StarPO-S's uncertainty filtering (Wang et al. 2025, "RAGEN: Understanding Self-Evolution in
LLM Agents via Multi-Turn Reinforcement Learning", arXiv 2504.20073, §4.2; code
``RAGEN-AI/RAGEN``: ``ragen/trainer/agent_trainer.py`` ``_filter_rollout``).

Before each update:

1) for each prompt (task row) s_0, its uncertainty U(s_0) = the sample standard deviation
   (n − 1) of the rewards of its G rollouts, as RAGEN's code computes it on the unnormalised
   scores;
2) rank the groups by U, highest first (ties keep their order), and keep the top
   ⌊p · groups⌋ whole groups, at least one (``--filter-variance p``; RAGEN's default p = 0.25,
   "keep 25%");
3) the estimator sees only the kept groups; the log has the share kept and the mean U of the
   kept and of all groups.

With GRPO and GiGPO a group whose rewards are all equal (U = 0) is dropped anyway, since it
has no advantage (DAPO's dynamic sampling). The two compose: StarPO-S ranks every group, those
equal groups rank last, and the equal-reward rule then drops any that the top p still holds
(when more than 1 − p of the groups have U = 0). The critic and PRM estimators drop no group
by themselves, so for them StarPO-S is the only filter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .rollout import Rollout

__all__ = ["filter_groups", "reward_std", "top_variance"]


def reward_std(rewards: Sequence[float]) -> float:
    """Step 1: the sample standard deviation (0 for fewer than two rewards).

    >>> reward_std([1.0, 0.0, 0.0, 0.0])
    0.5
    """
    n = len(rewards)
    if n < 2:
        return 0.0
    mean = sum(rewards) / n
    return math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))


def top_variance(group_rewards: Sequence[Sequence[float]], keep: float) -> list[int]:
    """Step 2: the indices of the kept groups, in their original order.

    >>> top_variance([[1, 1], [1, 0], [0, 0], [0.5, 0.0]], 0.5)
    [1, 3]
    """
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    n = len(group_rewards)
    if n == 0:
        return []
    stds = [reward_std(r) for r in group_rewards]
    order = sorted(range(n), key=lambda i: -stds[i])  # stable: ties keep their order
    k = max(1, math.floor(keep * n + 1e-9))
    return sorted(order[:k])


def filter_groups(
    groups: list[list[Rollout]], keep: float, metrics: dict[str, float]
) -> list[list[Rollout]]:
    """Steps 1-3 on the loop's groups (``ep.reward`` already set)."""
    rewards = [[ep.reward for ep in g] for g in groups]
    kept = top_variance(rewards, keep)
    stds = [reward_std(r) for r in rewards]
    metrics["starpo_kept"] = len(kept) / max(1, len(groups))
    metrics["starpo_std_all"] = sum(stds) / max(1, len(stds))
    metrics["starpo_std_kept"] = sum(stds[i] for i in kept) / max(1, len(kept))
    return [groups[i] for i in kept]
