"""What the step-level estimators share: features of states and actions read from a frozen
causal LM, small MLP heads on them, and the statistics their logs report.

Turn-PPO's and ArCHer's critics (:mod:`.turn_ppo`, :mod:`.archer`) and the explicit PRM
(:mod:`.agent_prm`) all score a *turn boundary*: the context up to the moment the policy
starts writing turn t (the state s_t), or up to the last token it wrote in that turn (the
state and the action, (s_t, a_t)). One forward pass of a frozen encoder over a whole episode
gives every boundary of it at once (the model is causal: the hidden state at position p has
read exactly the tokens up to p).

1) spans: the (start, end) token range of each assistant turn — from a rollout's
   ``step_of_token`` (the ids the policy generated, :func:`episode_spans`), or from a row
   rendered with the encoder's chat template and its assistant mask (:func:`row_spans`);
2) the feature of a position p is [h_p; mean_{q≤p} h_q; t / max_steps]: the last layer's
   hidden state there, the mean over the context so far, and the turn index as a fraction
   of the horizon (:class:`Encoder`). A state is read at ``start − 1`` (the last token before
   the turn is written), a state with its action at ``end − 1``;
3) heads: :class:`MLPHead`, a LayerNorm and a 3-layer MLP (ArCHer's critic heads are 3-layer
   MLPs), trained by the method that owns it; the encoder never trains, so a method may keep
   features instead of text (ArCHer's replay buffer does);
4) statistics: :func:`explained_variance` (1 − Var(y − ŷ) / Var(y), PPO's critic diagnostic),
   :func:`auc` (the probability that a positive outranks a negative; ties count half),
   :func:`whiten`.

The encoder is a frozen copy of the policy's starting checkpoint for the critics, and any
transformers folder for a PRM. Freezing it is a deviation from ArCHer (which fine-tunes a
RoBERTa critic) that keeps a critic step a few matrix products on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ..core.config import StrictModel
from ..core.errors import DataError

__all__ = [
    "Encoder",
    "HeadConfig",
    "MLPHead",
    "auc",
    "episode_spans",
    "explained_variance",
    "row_spans",
    "whiten",
]

Span = tuple[int, int]  # [start, end) of one assistant turn's tokens


class HeadConfig(StrictModel):
    """Size and training of a critic or PRM head."""

    hidden: int = Field(default=256, ge=8, description="Width of the head's hidden layers.")
    lr: float = Field(
        default=1e-3, gt=0, description="Adam learning rate of the head (above the actor's)."
    )
    batch: int = Field(default=64, ge=1, description="Transitions per head step.")


# --------------------------------------------------------------------------------------
# 1) spans
# --------------------------------------------------------------------------------------


def episode_spans(step_of_token: Sequence[int], mask: Sequence[int]) -> list[Span]:
    """Step 1 for a rollout: the generated tokens of each assistant turn, in order.

    >>> episode_spans([-1, -1, 0, 0, -1, 1, 1, -1], [0, 0, 1, 1, 0, 1, 1, 0])
    [(2, 4), (5, 7)]
    """
    spans: dict[int, list[int]] = {}
    for i, (s, m) in enumerate(zip(step_of_token, mask, strict=True)):
        if m and s >= 0:
            if s in spans:
                spans[s][1] = i + 1
            else:
                spans[s] = [i, i + 1]
    return [(a, b) for _, (a, b) in sorted(spans.items())]


def row_spans(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Any
) -> tuple[list[int], list[Span]]:
    """Step 1 for a conversation (HF messages): its token ids under the chat template and
    one span per assistant message (the template's ``{% generation %}`` runs)."""
    enc = tokenizer.apply_chat_template(
        list(messages),
        tools=tools or None,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
    spans: list[Span] = []
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            spans.append((i, i + 1))
        elif m:
            spans[-1] = (spans[-1][0], i + 1)
    n = sum(1 for m in messages if m.get("role") == "assistant")
    if len(spans) != n:
        raise DataError(
            f"the chat template marked {len(spans)} assistant spans for {n} assistant messages"
        )
    return ids, spans


# --------------------------------------------------------------------------------------
# 2) features
# --------------------------------------------------------------------------------------


class Encoder:
    """A frozen causal LM as a feature map (step 2). ``max_steps`` scales the turn-index
    feature; ``max_len`` cuts long episodes (positions past it read the last kept token)."""

    def __init__(
        self, model: Any, tokenizer: Any, device: str, *, max_steps: int = 8, max_len: int = 4096
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = device
        self.max_steps = max(1, max_steps)
        self.max_len = max_len
        self.hidden = int(model.config.hidden_size)

    @property
    def dim(self) -> int:
        return 2 * self.hidden + 1

    @classmethod
    def load(cls, path: str, device: str, **kwargs: Any) -> Encoder:
        from .modeling import load_student

        model, tokenizer = load_student(path, device)
        return cls(model, tokenizer, device, **kwargs)

    def features(
        self, seqs: Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]], batch: int = 8
    ) -> list[Any]:
        """For each (ids, positions, turn indices): a (len(positions), dim) tensor."""
        import torch

        out: list[Any] = []
        decoder = self.model.get_decoder()
        for s in range(0, len(seqs), batch):
            chunk = seqs[s : s + batch]
            width = min(self.max_len, max(len(ids) for ids, _, _ in chunk))
            ids = torch.zeros((len(chunk), width), dtype=torch.long)  # (B, T)
            for b, (row, _, _) in enumerate(chunk):
                row = list(row)[:width]
                ids[b, : len(row)] = torch.tensor(row)
            with torch.no_grad():
                h = decoder(input_ids=ids.to(self.device), use_cache=False).last_hidden_state
                h = h.float()  # (B, T, d); right padding never reaches a real token
                steps = torch.arange(1, width + 1, device=h.device).view(1, -1, 1)
                mean = h.cumsum(dim=1) / steps  # (B, T, d): mean over the context so far
            for b, (row, positions, turns) in enumerate(chunk):
                last = min(len(row), width) - 1
                pos = torch.tensor([min(max(p, 0), last) for p in positions], device=h.device)
                frac = torch.tensor(
                    [[t / self.max_steps] for t in turns], device=h.device, dtype=h.dtype
                )
                out.append(torch.cat([h[b, pos], mean[b, pos], frac], dim=-1).cpu())  # (P, dim)
        return out


# --------------------------------------------------------------------------------------
# 3) heads
# --------------------------------------------------------------------------------------


def MLPHead(dim: int, hidden: int, out: int = 1) -> Any:
    """LayerNorm, then Linear-ReLU-Linear-ReLU-Linear (step 3)."""
    import torch

    return torch.nn.Sequential(
        torch.nn.LayerNorm(dim),
        torch.nn.Linear(dim, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, out),
    )


# --------------------------------------------------------------------------------------
# 4) statistics
# --------------------------------------------------------------------------------------


def explained_variance(predicted: Sequence[float], target: Sequence[float]) -> float:
    """1 − Var(target − predicted) / Var(target); 0 when the target does not vary.

    >>> explained_variance([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    1.0
    >>> explained_variance([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    0.0
    """
    n = len(target)
    if n == 0:
        return 0.0
    mean_t = sum(target) / n
    var_t = sum((y - mean_t) ** 2 for y in target) / n
    if var_t < 1e-12:
        return 0.0
    res = [y - p for y, p in zip(target, predicted, strict=True)]
    mean_r = sum(res) / n
    var_r = sum((r - mean_r) ** 2 for r in res) / n
    return 1.0 - var_r / var_t


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties ½;
    None without both classes.

    >>> auc([0.9, 0.2, 0.6, 0.4], [True, False, True, False])
    1.0
    >>> auc([0.5, 0.5], [True, False])
    0.5
    """
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    # rank-sum (Mann-Whitney U) with average ranks for ties
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    rank_pos = sum(r for r, y in zip(ranks, labels, strict=True) if y)
    u = rank_pos - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))


def whiten(values: Sequence[float], *, center: bool = True) -> list[float]:
    """(x − mean) / std over a batch (population std); ``center=False`` only divides.

    >>> whiten([1.0, 3.0])
    [-1.0, 1.0]
    """
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    shift = mean if center else 0.0
    return [(v - shift) / max(std, 1e-6) for v in values]
