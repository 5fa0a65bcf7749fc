"""Implicit step rewards (iStar: Liu, Wang, Wu, Huang, Li, Zhang, Jiao 2025, "Agentic
Reinforcement Learning with Implicit Step Rewards", arXiv 2509.19199, ICLR 2026; code
``Tongyi-ConvAI/Qwen-Character``: ``CharacterRL-iStar/istar/{dp_rm,rm_utils,core_istar}.py``).

An implicit PRM π_φ (a causal LM initialised from the policy's starting checkpoint) is trained
alternately with the policy, from the episodes' outcomes alone: no step labels, no extra
rollouts. Each update, for the episodes the loop hands over:

1) token scores q_k = log π_φ(y_k | ·) − log π_ref(y_k | ·) on every generated token, with
   π_ref the rollout policy itself (iStar's scripts run with ``ref_path=null``, so π_ref is
   ``old_log_probs``);
2) step rewards r_t = β · Σ_{k ∈ turn t} q_k (β = 0.05);
3) A_{i,t} = A^E_i + w·A^S_{i,t} (:func:`~trajsynth.train.credit.episode_plus_step`: GRPO's
   episode advantage plus ``weight`` × the step rewards normalised over the group's steps;
   iStar's ``istar_grpo``, w = 1), computed with π_φ as it was before this update
   (``update=after``);
4) then π_φ is updated on the same batch with iStar's ``eto`` loss, a trajectory-level DPO:
   within each task's group, every pair (i, j) with R_i > R_j, the score of an episode
   S = the mean over its turns of β·Σ_k q_k, and L = mean over pairs of −log σ(S_i − S_j);
   ``epochs`` AdamW steps at ``lr`` (iStar: 1e-6), gradient norm clipped at 10. The loss is
   backpropagated micro-batch by micro-batch through dL/dS, so the pairs may span
   micro-batches. The PRM loss, the pair accuracy (S_i > S_j) and the step rewards' spread
   are logged.

At the first update π_φ = π_ref and every r_t is 0: the step term starts once π_φ has learnt
something. Deviations: iStar's final "batch_norm" of the step rewards (dividing by the batch's
largest |reverse cumulative sum|) is replaced by the group normalisation of step 3.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..core.config import StrictModel
from .credit import add_group_stats, batch_logprobs, episode_plus_step, token_batch

if TYPE_CHECKING:
    from .advantages import AdvantageStats
    from .credit import Kept
    from .rollout import Rollout

__all__ = ["IStar", "IStarConfig", "eto_gradients", "eto_loss", "preference_pairs", "step_sums"]


class IStarConfig(StrictModel):
    """Settings of ``--advantage implicit_prm``."""

    beta: float = Field(default=0.05, gt=0, description="β of the step rewards (iStar: 0.05).")
    lr: float = Field(default=1e-6, gt=0, description="π_φ's learning rate (iStar: 1e-6).")
    weight: float = Field(default=1.0, ge=0, description="w: A = A^E + w·A^S (iStar: 1).")
    epochs: int = Field(default=1, ge=1, description="π_φ steps per update.")
    grad_clip: float = Field(default=10.0, gt=0, description="π_φ's gradient clip (iStar: 10).")


def step_sums(q: Sequence[float], steps: Sequence[int], n_steps: int, beta: float) -> list[float]:
    """Step 2 for one episode: r_t = β·Σ q_k over the tokens k of turn t.

    >>> step_sums([1.0, 1.0, -2.0], [0, 0, 1], 2, beta=0.5)
    [1.0, -1.0]
    """
    out = [0.0] * n_steps
    for x, t in zip(q, steps, strict=True):
        if 0 <= t < n_steps:
            out[t] += beta * x
    return out


def preference_pairs(rewards: Sequence[float]) -> list[tuple[int, int]]:
    """Step 4's pairs within a group: (i, j) for every R_i > R_j.

    >>> preference_pairs([1.0, 0.0, 1.0])
    [(0, 1), (2, 1)]
    """
    return [
        (i, j)
        for i in range(len(rewards))
        for j in range(len(rewards))
        if rewards[i] > rewards[j] + 1e-12
    ]


def eto_loss(scores: Sequence[float], pairs: Sequence[tuple[int, int]]) -> float:
    """L = mean over pairs of −log σ(S_i − S_j).

    >>> round(eto_loss([0.0, 0.0], [(0, 1)]), 4)
    0.6931
    """
    if not pairs:
        return 0.0
    return sum(math.log1p(math.exp(-(scores[i] - scores[j]))) for i, j in pairs) / len(pairs)


def eto_gradients(scores: Sequence[float], pairs: Sequence[tuple[int, int]]) -> list[float]:
    """dL/dS_k of :func:`eto_loss`: −σ(S_j − S_i)/P for the winner, +σ(S_j − S_i)/P for the loser.

    >>> eto_gradients([0.0, 0.0], [(0, 1)])
    [-0.5, 0.5]
    """
    grads = [0.0] * len(scores)
    for i, j in pairs:
        s = 1.0 / (1.0 + math.exp(scores[i] - scores[j]))  # σ(S_j − S_i)
        grads[i] -= s / len(pairs)
        grads[j] += s / len(pairs)
    return grads


class IStar:
    """Steps 1-4 as the loop's estimator. ``policy`` is the model being trained (read before
    its update: π_ref = π_old); π_φ starts as a copy of it."""

    name = "implicit_prm"

    def __init__(
        self,
        policy: Any,
        cfg: IStarConfig,
        *,
        pad_id: int,
        device: str,
        precision: str,
        temperature: float,
        micro_batch: int = 16,
        scale: bool = True,
    ) -> None:
        import torch

        self.policy = policy
        self.prm = copy.deepcopy(policy)
        self.prm.train()
        self.cfg = cfg
        self.opt = torch.optim.AdamW(
            [p for p in self.prm.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0
        )
        self.pad_id, self.device, self.precision = pad_id, device, precision
        self.temperature, self.micro_batch, self.scale = temperature, micro_batch, scale

    def _batches(self, episodes: Sequence[Rollout]) -> list[dict[str, Any]]:
        return [
            token_batch(
                [(ep, []) for ep in episodes[s : s + self.micro_batch]], self.pad_id, self.device
            )
            for s in range(0, len(episodes), self.micro_batch)
        ]

    def _q(self, batches: list[dict[str, Any]]) -> list[Any]:
        """Step 1: q per generated token, split per episode (no gradient)."""
        import torch

        out = []
        with torch.no_grad():
            for b in batches:
                ref = batch_logprobs(self.policy, b, self.device, self.precision, self.temperature)
                phi = batch_logprobs(self.prm, b, self.device, self.precision, self.temperature)
                q = phi - ref  # (N,)
                for k in range(b["n_seqs"]):
                    sel = b["seq_index"] == k
                    out.append((q[sel].cpu(), b["step"][sel].cpu()))
        return out

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> Kept:
        episodes = [ep for g in groups for ep in g if any(ep.mask)]
        if not episodes:
            return []
        index = {id(ep): k for k, ep in enumerate(episodes)}
        batches = self._batches(episodes)
        # 1-2) step rewards from π_φ as it is now
        q = self._q(batches)
        rewards = [
            step_sums(qk.tolist(), st.tolist(), ep.steps, self.cfg.beta)
            for ep, (qk, st) in zip(episodes, q, strict=True)
        ]
        # 3) A^E + w·A^S per group
        kept: Kept = []
        flat = [r for row in rewards for r in row]
        for group in groups:
            live = [ep for ep in group if id(ep) in index]
            adv = episode_plus_step(
                [ep.reward for ep in live],
                [rewards[index[id(ep)]] for ep in live],
                weight=self.cfg.weight,
                scale=self.scale,
            )
            if adv is not None:
                kept += list(zip(live, adv, strict=True))
        add_group_stats(groups, kept, stats)
        metrics["implicit_reward_std"] = _std(flat)
        # 4) update π_φ with the eto loss
        pairs = [
            (index[id(a)], index[id(b)])
            for group in groups
            for live in [[ep for ep in group if id(ep) in index]]
            for i, j in preference_pairs([ep.reward for ep in live])
            for a, b in [(live[i], live[j])]
        ]
        if pairs:
            metrics.update(self._update(episodes, batches, rewards, pairs))
        return kept

    def _update(
        self,
        episodes: Sequence[Rollout],
        batches: list[dict[str, Any]],
        rewards: list[list[float]],
        pairs: list[tuple[int, int]],
    ) -> dict[str, float]:
        """Step 4: ``epochs`` eto steps through dL/dS, micro-batch by micro-batch."""
        import torch

        scores = [sum(r) / max(1, len(r)) for r in rewards]  # S: mean of the step rewards
        first_loss = eto_loss(scores, pairs)
        accuracy = sum(scores[i] > scores[j] for i, j in pairs) / len(pairs)
        for epoch in range(self.cfg.epochs):
            if epoch:
                q = self._q(batches)
                scores = [
                    sum(step_sums(qk.tolist(), st.tolist(), ep.steps, self.cfg.beta))
                    / max(1, ep.steps)
                    for ep, (qk, st) in zip(episodes, q, strict=True)
                ]
            grads = eto_gradients(scores, pairs)
            self.opt.zero_grad(set_to_none=True)
            base = 0
            for b in batches:
                with torch.no_grad():
                    ref = batch_logprobs(
                        self.policy, b, self.device, self.precision, self.temperature
                    )
                phi = batch_logprobs(self.prm, b, self.device, self.precision, self.temperature)
                # S_k = β·Σ q / turns_k: the surrogate Σ_k dL/dS_k · S_k has L's gradient
                weights = torch.tensor(
                    [
                        grads[base + k] * self.cfg.beta / max(1, episodes[base + k].steps)
                        for k in range(b["n_seqs"])
                    ],
                    device=phi.device,
                )
                inside = b["step"] >= 0
                surrogate = ((phi - ref) * weights[b["seq_index"]] * inside).sum()
                surrogate.backward()
                base += b["n_seqs"]
            torch.nn.utils.clip_grad_norm_(self.prm.parameters(), self.cfg.grad_clip)
            self.opt.step()
        return {"prm_loss": first_loss, "prm_pair_accuracy": accuracy, "prm_pairs": len(pairs)}

    def state_dict(self) -> dict[str, Any]:
        return {"prm": self.prm.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prm.load_state_dict(state["prm"])
        self.opt.load_state_dict(state["opt"])


def _std(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / n)
