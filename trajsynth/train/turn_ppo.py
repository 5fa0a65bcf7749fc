"""Turn-PPO: a turn-level critic and GAE over turns (Li, Zhou, Meng, Vadera, Li, Li 2025,
"Turn-PPO: Turn-Level Advantage Estimation with PPO for Improved Multi-Turn RL in Agentic
LLMs", arXiv 2512.17008). No official code; the turn GAE follows RAGEN's
``compute_bi_level_gae_advantage_return`` at the turn level.

Each update, for the episodes the loop hands over:

1) the turn MDP: state s_t = the whole context up to the moment the policy starts turn t
   (system prompt, requests, earlier turns, tool results); action a_t = everything the policy
   wrote in turn t; reward r_t = the episode's reward on its last turn, 0 before (the loop's
   ``step_rewards``);
2) the critic V(s_t): an MLP head on the features of a frozen copy of the starting
   checkpoint, read at the last token before turn t (:mod:`.critic`); one value per turn;
3) GAE over turns (:func:`turn_gae`): δ_t = r_t + γ·V(s_{t+1}) − V(s_t) with V(s_T) = 0 after
   the last turn, A_t = Σ_l (γλ)^l δ_{t+l}, return target G_t = A_t + V(s_t); the paper's
   best γ ≈ 0.99, λ ≈ 0.9 are the defaults. With λ = 1, A_t = G_t − V(s_t), the Monte Carlo
   return less the baseline;
4) the advantages are whitened over the batch (``whiten``), and every token of turn t gets
   A_t; the loop's clipped surrogate (ε_low, ε_high) makes it PPO;
5) the critic is fitted to the return targets (mean squared error, ``epochs`` passes of
   Adam at the head's learning rate, above the actor's as the paper recommends); the critic
   loss and the explained variance 1 − Var(G − V)/Var(G) of the values it had before this fit
   are logged.

No group is dropped for equal rewards: the critic's baseline still ranks the turns of an
all-failed group (their values differ), which is what a critic buys over GRPO.

Deviations: the critic's trunk is frozen (only the head learns); clipping is per token with the
turn's advantage (the paper's per-turn ratio form is not published).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..core.config import StrictModel
from .credit import add_group_stats, turn_rewards
from .critic import HeadConfig, MLPHead, episode_spans, explained_variance, whiten

if TYPE_CHECKING:
    from .advantages import AdvantageStats
    from .credit import Kept
    from .critic import Encoder
    from .rollout import Rollout

__all__ = ["TurnCritic", "TurnPPO", "TurnPPOConfig", "turn_gae"]


class TurnPPOConfig(StrictModel):
    """Settings of ``--advantage turn_ppo``."""

    gamma: float = Field(default=0.99, ge=0, le=1, description="γ over turns (paper: 0.99).")
    lam: float = Field(default=0.9, ge=0, le=1, description="GAE λ over turns (paper: 0.9).")
    epochs: int = Field(default=8, ge=1, description="Critic passes over each batch.")
    whiten: bool = Field(default=True, description="Whiten the advantages over the batch.")
    head: HeadConfig = Field(default_factory=HeadConfig, description="The critic's head.")


def turn_gae(
    rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    """Step 3 for one episode: (advantages A_t, return targets G_t = A_t + V(s_t)).

    >>> turn_gae([0.0, 1.0], [0.5, 0.8], gamma=1.0, lam=1.0)
    ([0.5, 0.19999999999999996], [1.0, 1.0])
    """
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards for {len(values)} values")
    n = len(rewards)
    adv = [0.0] * n
    running = 0.0
    for t in range(n - 1, -1, -1):
        next_v = values[t + 1] if t + 1 < n else 0.0  # V(s_T) = 0 after the last turn
        delta = rewards[t] + gamma * next_v - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, [a + v for a, v in zip(adv, values, strict=True)]


class TurnCritic:
    """V(s) as an MLP head on state features (step 2), fitted by regression (step 5)."""

    def __init__(self, dim: int, cfg: HeadConfig, seed: int = 0) -> None:
        import torch

        torch.manual_seed(seed)
        self.cfg = cfg
        self.net = MLPHead(dim, cfg.hidden)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.seed = seed

    def predict(self, features: Any) -> list[float]:
        import torch

        with torch.no_grad():
            return self.net(features).squeeze(-1).tolist()

    def fit(self, features: Any, targets: Sequence[float], epochs: int) -> float:
        """Mean squared error over ``epochs`` shuffled passes; returns the last pass's loss."""
        import torch

        y = torch.tensor(list(targets), dtype=torch.float32)
        gen = torch.Generator().manual_seed(self.seed)
        last = 0.0
        for _ in range(epochs):
            order = torch.randperm(len(y), generator=gen)
            total = 0.0
            for s in range(0, len(y), self.cfg.batch):
                idx = order[s : s + self.cfg.batch]
                loss = torch.nn.functional.mse_loss(self.net(features[idx]).squeeze(-1), y[idx])
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                total += float(loss.detach()) * len(idx)
            last = total / max(1, len(y))
        self.seed += 1
        return last


class TurnPPO:
    """Steps 1-5 as the loop's estimator."""

    name = "turn_ppo"

    def __init__(self, encoder: Encoder, cfg: TurnPPOConfig, seed: int = 0) -> None:
        self.encoder = encoder
        self.cfg = cfg
        self.critic = TurnCritic(encoder.dim, cfg.head, seed)

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> Kept:
        import torch

        episodes = [ep for g in groups for ep in g]
        spans = [episode_spans(ep.step_of_token, ep.mask) for ep in episodes]
        live = [(ep, sp) for ep, sp in zip(episodes, spans, strict=True) if sp]
        if not live:
            return []
        # 2) V(s_t) at the last token before each turn
        feats = self.encoder.features(
            [(ep.token_ids, [a - 1 for a, _ in sp], range(len(sp))) for ep, sp in live]
        )
        flat = torch.cat(feats)  # (turns, dim)
        values = self.critic.predict(flat)
        # 3) GAE per episode
        advs: list[list[float]] = []
        targets: list[float] = []
        k = 0
        for ep, sp in live:
            v = values[k : k + len(sp)]
            k += len(sp)
            adv, ret = turn_gae(
                turn_rewards(ep.step_rewards, len(sp)), v, self.cfg.gamma, self.cfg.lam
            )
            advs.append(adv)
            targets += ret
        metrics["explained_variance"] = explained_variance(values, targets)
        metrics["value_mean"] = sum(values) / len(values)
        # 4) whiten over the batch
        all_adv = [a for row in advs for a in row]
        if self.cfg.whiten:
            all_adv = whiten(all_adv)
        kept: Kept = []
        k = 0
        for (ep, _), row in zip(live, advs, strict=True):
            kept.append((ep, all_adv[k : k + len(row)]))
            k += len(row)
        add_group_stats(groups, kept, stats)
        # 5) fit the critic to the returns
        metrics["critic_loss"] = self.critic.fit(flat, targets, self.cfg.epochs)
        return kept

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.critic.net.state_dict(), "opt": self.critic.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.net.load_state_dict(state["net"])
        self.critic.opt.load_state_dict(state["opt"])
