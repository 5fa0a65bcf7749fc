"""ArCHer: an off-policy turn-level critic trained by TD, with a token-level policy gradient
(Zhou, Zanette, Pan, Levine, Kumar 2024, "ArCHer: Training Language Model Agents via
Hierarchical Multi-Turn RL", arXiv 2402.19446, ICML 2024; code ``YifeiZhou02/ArCHer``:
``archer/algorithms/archer/trainer.py``, ``archer/models/critic.py``).

Each update, for the episodes the loop hands over:

1) every turn becomes a transition (s_t, a_t, r_t, s_{t+1}, done_t) (done on the last turn;
   r_t: the loop's ``step_rewards``, the episode reward on the last turn) and is pushed into
   a replay buffer of ``buffer`` transitions (oldest out first). States and state-action
   pairs are stored as features of a frozen copy of the starting checkpoint (:mod:`.critic`):
   s_t read at the last token before turn t, (s_t, a_t) at the last token of the turn;
2) the critic: two Q heads on (s, a) and two V heads on s (ArCHer's twin 3-layer MLP heads),
   and a target copy of each. ``steps`` critic steps, each on ``head.batch`` transitions
   drawn from the whole buffer:
   L_Qi = (Q_i(s, a) − r − γ(1 − done)·V̄_i(s′))², and on transitions of the latest policy
   L_Vi = (V_i(s) − Q̄_i(s, a))²;
3) Polyak averaging after each critic step: θ̄ ← (1 − τ)·θ̄ + τ·θ (ArCHer: τ = 0.1, γ = 0.95);
4) for the first ``warmup`` updates only the critic trains (ArCHer's ``warmup_iter``): the
   estimator keeps no episode, so the loop skips the policy update;
5) the turn advantage A_t = min(Q1, Q2)(s_t, a_t) − min(V1, V2)(s_t), divided by its batch
   standard deviation (``whiten``; not centred: the critic already subtracts the baseline),
   and every token of turn t gets A_t: the token-level policy gradient of ArCHer's actor (one
   on-policy pass, where the clipped ratio is 1, is its plain REINFORCE). The Q and V losses,
   the buffer size and the explained variance of min V(s_t) for the turns' discounted
   returns are logged.

Deviations: the critic's trunk is frozen (ArCHer fine-tunes RoBERTa); the actor and the V
target use the actions the policy took in this update's rollouts, where ArCHer samples fresh
actions a^π at replay states (the V target stays on-policy: only the latest transitions).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import Field

from ..core.config import StrictModel
from .advantages import discounted_returns
from .credit import add_group_stats, turn_rewards
from .critic import HeadConfig, MLPHead, episode_spans, explained_variance, whiten

if TYPE_CHECKING:
    from .advantages import AdvantageStats
    from .credit import Kept
    from .critic import Encoder
    from .rollout import Rollout

__all__ = ["Archer", "ArcherConfig", "ReplayBuffer", "Transition", "TwinCritic", "td_target"]


class ArcherConfig(StrictModel):
    """Settings of ``--advantage archer``."""

    gamma: float = Field(default=0.95, ge=0, le=1, description="TD discount γ (ArCHer: 0.95).")
    tau: float = Field(default=0.1, gt=0, le=1, description="Polyak rate τ (ArCHer: 0.1).")
    steps: int = Field(default=50, ge=1, description="Critic steps per update (ArCHer: 50).")
    buffer: int = Field(default=4096, ge=1, description="Replay buffer size in transitions.")
    warmup: int = Field(
        default=0, ge=0, description="Updates that train only the critic (ArCHer: 20)."
    )
    whiten: bool = Field(default=True, description="Divide the advantages by their std.")
    head: HeadConfig = Field(default_factory=HeadConfig, description="The critic's heads.")


@dataclass
class Transition:
    """Step 1: one turn, as features."""

    s: Any  # (dim,) state features
    sa: Any  # (dim,) state-and-action features
    r: float
    s2: Any  # (dim,) next state's features (zeros when done)
    done: bool
    iteration: int = 0


def td_target(r: float, done: bool, v_next: float, gamma: float) -> float:
    """Step 2's Q target: r + γ(1 − done)·V̄(s′).

    >>> td_target(0.0, False, 0.5, 0.9), td_target(1.0, True, 0.5, 0.9)
    (0.45, 1.0)
    """
    return r + gamma * (0.0 if done else 1.0) * v_next


class ReplayBuffer:
    """Step 1: the last ``capacity`` transitions."""

    def __init__(self, capacity: int) -> None:
        self.items: deque[Transition] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.items)

    def push(self, transitions: Sequence[Transition]) -> None:
        self.items.extend(transitions)

    def sample(self, n: int, gen: Any, latest: int | None = None) -> dict[str, Any] | None:
        """``n`` transitions drawn uniformly (with replacement), stacked; ``latest``: only
        those of that iteration."""
        import torch

        pool = [t for t in self.items if latest is None or t.iteration == latest]
        if not pool:
            return None
        idx = torch.randint(len(pool), (n,), generator=gen).tolist()
        picked = [pool[i] for i in idx]
        return {
            "s": torch.stack([t.s for t in picked]),
            "sa": torch.stack([t.sa for t in picked]),
            "r": torch.tensor([t.r for t in picked], dtype=torch.float32),
            "s2": torch.stack([t.s2 for t in picked]),
            "done": torch.tensor([float(t.done) for t in picked]),
        }


class TwinCritic:
    """Steps 2-3: twin Q and V heads with target copies."""

    def __init__(self, dim: int, cfg: HeadConfig, *, gamma: float, tau: float, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.q = torch.nn.ModuleList([MLPHead(dim, cfg.hidden) for _ in range(2)])
        self.v = torch.nn.ModuleList([MLPHead(dim, cfg.hidden) for _ in range(2)])
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.v_target = copy.deepcopy(self.v).requires_grad_(False)
        params = [*self.q.parameters(), *self.v.parameters()]
        self.opt = torch.optim.Adam(params, lr=cfg.lr)
        self.gamma, self.tau, self.batch = gamma, tau, cfg.batch
        self.gen = torch.Generator().manual_seed(seed)

    def step(self, buffer: ReplayBuffer, latest: int | None = None) -> tuple[float, float]:
        """One critic step (step 2) and the Polyak update (step 3): (L_Q, L_V)."""
        import torch

        mse = torch.nn.functional.mse_loss
        b = buffer.sample(self.batch, self.gen)
        if b is None:
            return 0.0, 0.0
        with torch.no_grad():
            not_done = 1.0 - b["done"]
            q_targets = [
                b["r"] + self.gamma * not_done * vt(b["s2"]).squeeze(-1) for vt in self.v_target
            ]
        # sum() of tensors (one per critic, never none) is a tensor
        loss_q = cast(
            "torch.Tensor",
            sum(mse(q(b["sa"]).squeeze(-1), y) for q, y in zip(self.q, q_targets, strict=True)),
        )
        on = buffer.sample(self.batch, self.gen, latest) if latest is not None else b
        assert on is not None
        with torch.no_grad():
            v_targets = [qt(on["sa"]).squeeze(-1) for qt in self.q_target]
        loss_v = cast(
            "torch.Tensor",
            sum(mse(v(on["s"]).squeeze(-1), y) for v, y in zip(self.v, v_targets, strict=True)),
        )
        self.opt.zero_grad(set_to_none=True)
        (loss_q + loss_v).backward()
        self.opt.step()
        with torch.no_grad():
            for net, target in ((self.q, self.q_target), (self.v, self.v_target)):
                for p, pt in zip(net.parameters(), target.parameters(), strict=True):
                    pt.mul_(1.0 - self.tau).add_(self.tau * p)
        return float(loss_q.detach()) / 2, float(loss_v.detach()) / 2

    def values(self, s: Any) -> list[float]:
        """min(V1, V2)(s)."""
        import torch

        with torch.no_grad():
            return torch.minimum(self.v[0](s), self.v[1](s)).squeeze(-1).tolist()

    def q_values(self, sa: Any) -> list[float]:
        """min(Q1, Q2)(s, a)."""
        import torch

        with torch.no_grad():
            return torch.minimum(self.q[0](sa), self.q[1](sa)).squeeze(-1).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {
            "q": self.q.state_dict(),
            "v": self.v.state_dict(),
            "q_target": self.q_target.state_dict(),
            "v_target": self.v_target.state_dict(),
            "opt": self.opt.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("q", "v", "q_target", "v_target", "opt"):
            getattr(self, name).load_state_dict(state[name])


class Archer:
    """Steps 1-5 as the loop's estimator."""

    name = "archer"

    def __init__(self, encoder: Encoder, cfg: ArcherConfig, seed: int = 0) -> None:
        self.encoder = encoder
        self.cfg = cfg
        self.critic = TwinCritic(encoder.dim, cfg.head, gamma=cfg.gamma, tau=cfg.tau, seed=seed)
        self.buffer = ReplayBuffer(cfg.buffer)
        self.updates = 0

    def advantages(
        self, groups: list[list[Rollout]], stats: AdvantageStats, metrics: dict[str, float]
    ) -> Kept:
        import torch

        it = self.updates
        self.updates += 1
        episodes = [ep for g in groups for ep in g]
        live = [(ep, sp) for ep in episodes if (sp := episode_spans(ep.step_of_token, ep.mask))]
        if not live:
            return []
        # 1) features: s_t before each turn, (s_t, a_t) at its last token
        feats = self.encoder.features(
            [
                (
                    ep.token_ids,
                    [p for a, b in sp for p in (a - 1, b - 1)],
                    [t for t in range(len(sp)) for _ in range(2)],
                )
                for ep, sp in live
            ]
        )
        transitions: list[Transition] = []
        states, pairs, returns = [], [], []
        for (ep, sp), f in zip(live, feats, strict=True):
            s, sa = f[0::2], f[1::2]  # (turns, dim) each
            rewards = turn_rewards(ep.step_rewards, len(sp))
            returns += discounted_returns(rewards, self.cfg.gamma)
            for t in range(len(sp)):
                last = t == len(sp) - 1
                s2 = torch.zeros_like(s[t]) if last else s[t + 1]
                transitions.append(Transition(s[t], sa[t], rewards[t], s2, last, it))
            states.append(s)
            pairs.append(sa)
        s_all, sa_all = torch.cat(states), torch.cat(pairs)
        metrics["explained_variance"] = explained_variance(self.critic.values(s_all), returns)
        self.buffer.push(transitions)
        # 2-3) critic steps on the replay buffer, Polyak after each
        lq = lv = 0.0
        for _ in range(self.cfg.steps):
            lq, lv = self.critic.step(self.buffer, latest=it)
        metrics["critic_loss"] = lq
        metrics["critic_v_loss"] = lv
        metrics["replay"] = float(len(self.buffer))
        # 4) warm-up: the critic only
        if it < self.cfg.warmup:
            metrics["critic_warmup"] = 1.0
            return []
        # 5) A_t = min Q(s_t, a_t) − min V(s_t)
        adv = [
            q - v
            for q, v in zip(self.critic.q_values(sa_all), self.critic.values(s_all), strict=True)
        ]
        metrics["q_mean"] = sum(self.critic.q_values(sa_all)) / len(adv)
        if self.cfg.whiten:
            adv = whiten(adv, center=False)
        kept: Kept = []
        k = 0
        for ep, sp in live:
            kept.append((ep, adv[k : k + len(sp)]))
            k += len(sp)
        add_group_stats(groups, kept, stats)
        return kept

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.updates = int(state["updates"])
