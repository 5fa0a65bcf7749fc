"""The contract between the policy-gradient loop (:mod:`.grpo`) and its credit assignment,
and the one combination rule two step-reward methods share.

An *estimator* turns the scored episodes of one update, grouped by task, into an advantage
per assistant turn of every episode it keeps; the loop then gives every generated token of a
turn that turn's advantage. Estimators (each in the module named after its method):

| name | module | where the step-level signal comes from |
|---|---|---|
| ``grpo`` | :mod:`.advantages` | none: one group-normalised advantage per episode |
| ``gigpo`` | :mod:`.advantages` | returns compared within groups of identical states |
| ``turn_ppo`` | :mod:`.turn_ppo` | a turn-level critic V(s_t), GAE over turns |
| ``archer`` | :mod:`.archer` | a turn-level Q/V critic trained off-policy by TD |
| ``prm`` | :mod:`.agent_prm` | an explicit step scorer trained on step labels |
| ``implicit_prm`` | :mod:`.istar` | β·log π_φ/π_old, π_φ trained on trajectory preferences |

:func:`episode_plus_step` is how ``prm`` and ``implicit_prm`` add dense step rewards to the
episode advantage (iStar's A = A^E + w·A^S, arXiv 2509.19199): A^E is GRPO's group-normalised
episode reward, A^S the step reward normalised over every step of the group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .advantages import group_advantages, normalise

if TYPE_CHECKING:
    from .advantages import AdvantageStats
    from .rollout import Rollout

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "Kept",
    "add_group_stats",
    "batch_logprobs",
    "episode_plus_step",
    "group_by_task",
    "token_batch",
    "turn_rewards",
]

#: every estimator name :class:`~trajsynth.train.grpo.GRPOConfig` accepts
ESTIMATORS = ("grpo", "gigpo", "turn_ppo", "archer", "prm", "implicit_prm")

Kept = list[tuple["Rollout", list[float]]]  # (episode, advantage per assistant turn)


class Estimator(Protocol):
    """Credit assignment for one update. ``advantages`` may train what the estimator owns
    (a critic, a PRM) on the same batch, and reports its figures in ``metrics``."""

    name: str

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> Kept: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def group_by_task(episodes: Sequence[Rollout]) -> list[list[Rollout]]:
    """The G episodes of each task row, in first-seen order."""
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for ep in episodes:
        groups[ep.row.id].append(ep)
    return list(groups.values())


def add_group_stats(groups: list[list[Rollout]], kept: Kept, stats: AdvantageStats) -> None:
    """Advantage statistics per group of the episodes an estimator kept (a group with none
    kept counts as filtered)."""
    by_episode = {id(ep): adv for ep, adv in kept}
    for group in groups:
        advs = [by_episode[id(ep)] for ep in group if id(ep) in by_episode]
        stats.add([a for row in advs for a in row] if advs else None)


def episode_plus_step(
    episode_rewards: Sequence[float],
    step_rewards: Sequence[Sequence[float]],
    *,
    weight: float = 1.0,
    scale: bool = True,
) -> list[list[float]] | None:
    """A_{i,t} = A^E_i + w · A^S_{i,t} for the episodes of one group, or None when every
    advantage is 0 (no signal).

    A^E: GRPO's (R_i − mean) / std (0 for all when the rewards are equal); A^S: the step
    rewards r_{i,t} normalised over every step of the group (mean, sample std).

    >>> episode_plus_step([1.0, 0.0], [[0.5, 1.0], [0.0]], scale=False)
    [[0.5, 1.0], [-1.0]]
    """
    g = len(episode_rewards)
    if len(step_rewards) != g:
        raise ValueError("one list of step rewards per episode")
    episode = group_advantages(episode_rewards, scale=scale) or [0.0] * g
    flat = [r for rows in step_rewards for r in rows]
    spread = max(flat, default=0.0) - min(flat, default=0.0)
    step = normalise(flat, scale=scale) if spread > 1e-12 else [0.0] * len(flat)
    out: list[list[float]] = []
    k = 0
    for i, rows in enumerate(step_rewards):
        out.append([round(episode[i] + weight * step[k + t], 12) for t in range(len(rows))])
        k += len(rows)
    if all(abs(a) < 1e-12 for row in out for a in row):
        return None
    return out


def turn_rewards(step_rewards: Sequence[float], turns: int) -> list[float]:
    """The rewards of the ``turns`` turns that have generated tokens; a reward on a turn past
    them (a last turn cut before it wrote anything) moves to the last one.

    >>> turn_rewards([0.0, 0.0, 1.0], 2), turn_rewards([1.0], 2)
    ([0.0, 1.0], [1.0, 0.0])
    """
    out = list(step_rewards[:turns]) + [0.0] * max(0, turns - len(step_rewards))
    if turns and len(step_rewards) > turns:
        out[-1] += sum(step_rewards[turns:])
    return out


def token_batch(
    items: Sequence[tuple[Rollout, Sequence[float]]], pad_id: int, device: str
) -> dict[str, Any]:
    """Right-padded (B, T) ids and loss mask of the episodes, and, flat over the N generated
    tokens a forward pass predicts (row-major): each token's advantage (its turn's), its turn
    index and its sequence. Prompt, user and tool tokens carry no loss."""
    import torch

    width = max(len(ep.token_ids) for ep, _ in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(items), width), dtype=torch.bool)  # (B, T)
    adv = torch.zeros((len(items), width), dtype=torch.float32)  # (B, T)
    step = torch.full((len(items), width), -1, dtype=torch.long)  # (B, T)
    for b, (ep, step_adv) in enumerate(items):
        n = len(ep.token_ids)
        ids[b, :n] = torch.tensor(ep.token_ids)
        # generated tokens only: prompt, user and tool tokens carry no loss
        mask[b, :n] = torch.tensor(ep.mask, dtype=torch.bool)
        adv[b, :n] = torch.tensor(
            [step_adv[s] if 0 <= s < len(step_adv) else 0.0 for s in ep.step_of_token]
        )
        step[b, :n] = torch.tensor(ep.step_of_token, dtype=torch.long)
    keep = mask[:, 1:]  # positions whose next token is trained on
    seq_index = torch.arange(len(items)).unsqueeze(1).expand_as(keep)[keep]  # (N,)
    return {
        "ids": ids.to(device),
        "mask": mask.to(device),
        "adv": adv[:, 1:][keep].to(device),  # (N,)
        "step": step[:, 1:][keep].to(device),  # (N,)
        "seq_index": seq_index.to(device),
        "n_seqs": len(items),
    }


def batch_logprobs(
    model: Any, batch: dict[str, Any], device: str, precision: str, temperature: float = 1.0
) -> Any:
    """Log-probabilities (N,) of a :func:`token_batch`'s generated tokens under the policy
    that sampled them: softmax(logits / T) at the rollout temperature T."""
    from .modeling import autocast, selected_logprobs

    with autocast(device, precision):
        return selected_logprobs(model, batch["ids"], None, batch["mask"], temperature).float()
