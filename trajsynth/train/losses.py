"""Policy-gradient losses on per-token log-probabilities (torch).

- **Clipped surrogate** (PPO, Schulman et al. 2017, arXiv 1707.06347, Eq. 7) with separate
  lower and upper clip ranges (DAPO's clip-higher, Yu et al. 2025, arXiv 2503.14476, §3.1;
  LoopTool trains with ``clip_ratio_low=0.2``, ``clip_ratio_high=0.28``): with
  ρ = exp(log π − log π_old), the per-token loss is max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high)).
- **KL penalty** (optional; LoopTool and DAPO use none): the k3 estimator
  exp(log π_ref − log π) − (log π_ref − log π) − 1 (Schulman, "Approximating KL divergence",
  2020), ≥ 0 and unbiased for KL(π‖π_ref).
- **Aggregation**: ``token_mean`` averages over every trained token of the batch (DAPO's
  token-level loss: long responses weigh in proportion to their length); ``seq_mean`` averages
  within each sequence first, then over sequences (the original GRPO).
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["aggregate", "clipped_surrogate", "kl_k3"]


def clipped_surrogate(
    logp: Any, old_logp: Any, advantages: Any, clip_low: float = 0.2, clip_high: float = 0.28
) -> tuple[Any, Any]:
    """(per-token loss, per-token bool: the clipped branch was taken), all (N,).

    >>> import torch
    >>> lp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    >>> loss, clipped = clipped_surrogate(lp, torch.zeros(4), torch.tensor([1.0, -1.0, 1.0, -1.0]))
    >>> [round(x, 4) for x in loss.tolist()], clipped.tolist()
    ([-1.28, 1.5, -0.5, 0.8], [True, False, False, True])
    """
    import torch

    ratio = torch.exp(logp - old_logp)  # ρ, (N,)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(pg_loss1, pg_loss2), pg_loss2 > pg_loss1


def kl_k3(logp: Any, ref_logp: Any) -> Any:
    """Per-token k3 estimate of KL(π‖π_ref).

    >>> import torch
    >>> round(kl_k3(torch.tensor([0.0]), torch.log(torch.tensor([0.5]))).item(), 4)
    0.1931
    """
    import torch

    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def aggregate(
    per_token: Any, seq_index: Any, n_seqs: int, mode: Literal["token_mean", "seq_mean"]
) -> Any:
    """Reduce a per-token loss (N,) to a scalar; ``seq_index`` (N,) maps tokens to sequences.

    >>> import torch
    >>> x, idx = torch.tensor([1.0, 1.0, 1.0, 4.0]), torch.tensor([0, 0, 0, 1])
    >>> aggregate(x, idx, 2, "token_mean").item(), aggregate(x, idx, 2, "seq_mean").item()
    (1.75, 2.5)
    """
    import torch

    if mode == "token_mean":
        return per_token.sum() / max(1, per_token.numel())
    sums = torch.zeros(n_seqs, dtype=per_token.dtype, device=per_token.device)
    counts = torch.zeros(n_seqs, dtype=per_token.dtype, device=per_token.device)
    sums.index_add_(0, seq_index, per_token)
    counts.index_add_(0, seq_index, torch.ones_like(per_token))
    present = counts > 0
    return (sums[present] / counts[present]).mean()
