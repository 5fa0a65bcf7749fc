"""SFT data: trajectories → token ids with an assistant-only loss mask → packed batches.

1) render each row's ``messages`` and ``tools`` with the tokenizer's chat template and take the
   ``{% generation %}`` spans as the mask (``return_assistant_tokens_mask``): 1 on what the
   assistant wrote (reasoning, text, calls, the closing ``<|im_end|>``), 0 on the system
   prompt, the tool list, user turns and tool results; the model is never trained to
   produce a tool's output. Steps flagged ``deviated`` (``Trajectory.context_steps``: STeCa
   keeps the agent's wrong step as context before its reflection) are masked out too;
2) keep the start of a sequence longer than ``max_len`` (counted in :class:`DataStats`); a row
   with no assistant token left is left out and counted apart (``cut_off``: a row the pipeline
   made that training cannot use; :func:`left_out_note` says so and what to raise);
3) pack: best-fit decreasing of whole sequences into rows of ``max_len`` tokens. Positions
   restart at 0 in each sequence, and the model is given ``position_ids`` and no attention
   mask, so transformers builds a block-diagonal causal mask: a token never attends to
   another sequence of the same row. Unpacked, a batch is right-padded (with causal attention a
   real token never sees the padding on its right, so no mask is needed either);
4) batches: ``input_ids``, ``position_ids`` and ``labels`` (-100 where the mask is 0, on each
   sequence's first token and on padding), each ``(B, T)``; with weights, ``loss_weights``
   ``(B, T)`` too.

Weights (``weights=True``): a row's *sample weight* is ``extra["weight"]`` when it has one
(any exporter or user can set it), else STeCa's calibration weight ``extra["steca"]["reward"]``
(1 + 0.01 · nDTW deviation, the per-sample factor of STeCa's loss), else 1; its *step
weights*, one per assistant message, are ``extra["step_weights"]`` (like the per-message
``weight`` of OpenAI's fine-tuning format, but any value ≥ 0). Each assistant token's loss
weight is the product of the two (:func:`sample_weight`, :func:`step_weights`); a step of
weight 0 is masked out like a context step. The trainer drops a row of weight 0 before it
does anything else, so such a row changes nothing.

Decision weight (``decision_weight`` ≠ 1): the first token of each assistant message is where
the model decides between calling a tool, asking and answering (``<`` of ``<tool_call>``
against "Sorry", "I", "Which" ...); it is one token of the tens the message holds, so its
share of the gradient is small. Its loss weight is multiplied by ``decision_weight`` (on top
of the sample and step weights).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import DataError
from ..core.extras import weight_of
from ..core.schema import Trajectory
from .template import row_messages

__all__ = [
    "IGNORE_INDEX",
    "Batch",
    "DataStats",
    "Example",
    "batches",
    "left_out_note",
    "pack",
    "sample_weight",
    "step_weights",
    "tokenize_row",
    "tokenize_rows",
]

IGNORE_INDEX = -100  # the label of a token that carries no loss


@dataclass
class Example:
    """One tokenized conversation: ids and the assistant mask (1 = loss on this token)."""

    input_ids: list[int]
    mask: list[int]
    row_id: str = ""
    weights: list[float] | None = None  # per-token loss weight (None: all 1)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class DataStats:
    rows: int = 0
    examples: int = 0
    #: rows without an assistant message (nothing to learn from them)
    skipped_no_assistant: int = 0
    #: rows longer than max_len whose start was kept (the end of the conversation is lost)
    truncated: int = 0
    #: rows longer than max_len with no assistant token before it: left out
    cut_off: int = 0
    #: tokens of the longest row, before any cut
    longest: int = 0
    tokens: int = 0
    loss_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Batch:
    """Step 4: one micro-batch as python lists (tensors are made by the trainer)."""

    input_ids: list[list[int]]  # (B, T)
    position_ids: list[list[int]]  # (B, T)
    labels: list[list[int]]  # (B, T)
    real_tokens: int = 0  # tokens that are not padding
    sequences: int = 0  # conversations in the batch
    row_ids: list[str] = field(default_factory=list)
    loss_weights: list[list[float]] | None = None  # (B, T), aligned with labels

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.input_ids), len(self.input_ids[0]) if self.input_ids else 0

    @property
    def loss_tokens(self) -> int:
        """Tokens with a loss: labels shifted by one, as the trainer counts them."""
        return sum(1 for row in self.labels for x in row[1:] if x != IGNORE_INDEX)

    @property
    def loss_weight(self) -> float:
        """The summed loss weight of those tokens (their count without weights)."""
        if self.loss_weights is None:
            return float(self.loss_tokens)
        return sum(
            w
            for row, weights in zip(self.labels, self.loss_weights, strict=True)
            for x, w in zip(row[1:], weights[1:], strict=True)
            if x != IGNORE_INDEX
        )


def sample_weight(row: Trajectory) -> float:
    """A row's sample weight (module docstring): ``extra["weight"]``, else STeCa's
    calibration weight, else 1.

    >>> sample_weight(Trajectory(id="r", task_id="t", extra={"steca": {"reward": 1.01}}))
    1.01
    """
    try:
        value = weight_of(row.extra)
    except DataError as exc:
        raise DataError(f"row {row.id}: {exc}") from None
    return 1.0 if value is None else value


def step_weights(row: Trajectory) -> list[float] | None:
    """A row's per-step weights (``extra["step_weights"]``), or None."""
    extra = row.extra if isinstance(row.extra, dict) else {}
    value = extra.get("step_weights")
    if value is None:
        return None
    n = len(row.assistant_steps())
    ok = isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf")
        for v in value
    )
    if not ok or len(value) != n:
        raise DataError(
            f"row {row.id}: step_weights must be {n} numbers ≥ 0, one per assistant message"
        )
    return [float(v) for v in value]


def tokenize_row(
    tokenizer: Any,
    row: Trajectory,
    *,
    reasoning: bool = True,
    weights: bool = False,
    decision_weight: float = 1.0,
) -> Example:
    """Step 1 for one row; ``weights``: the per-token loss weights too, ``decision_weight``:
    the factor on each assistant message's first token (module docstring)."""
    enc = tokenizer.apply_chat_template(
        row_messages(row, reasoning=reasoning),
        tools=row.tools or None,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    mask = list(enc["assistant_masks"])
    per_step = step_weights(row) if weights else None
    context = set(row.context_steps())
    if per_step is not None:
        context |= {t for t, w in enumerate(per_step) if w == 0}
    if context:
        mask = _mask_steps(mask, context, row)
    token_weights = None
    if weights:
        w = sample_weight(row)
        if per_step is None:
            token_weights = [w * m for m in mask] if w != 1.0 else None
        else:
            token_weights = [0.0] * len(mask)
            for step, (start, end) in enumerate(_runs(list(enc["assistant_masks"]), row)):
                for i in range(start, end):
                    token_weights[i] = w * per_step[step] * mask[i]
    if decision_weight != 1.0:
        if token_weights is None:
            w = sample_weight(row) if weights else 1.0
            token_weights = [w * m for m in mask]
        for start, _ in _runs(list(enc["assistant_masks"]), row):
            token_weights[start] *= decision_weight
    return Example(list(enc["input_ids"]), mask, row.id, token_weights)


def _runs(mask: list[int], row: Trajectory) -> list[tuple[int, int]]:
    """Each assistant message's run of 1s in the template's generation mask, in order."""
    runs: list[tuple[int, int]] = []
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            runs.append((i, i + 1))
        elif m:
            runs[-1] = (runs[-1][0], i + 1)
    n_assistant = sum(1 for m in row.messages if m.role == "assistant")
    if len(runs) != n_assistant:
        raise DataError(
            f"row {row.id}: the chat template marked {len(runs)} assistant spans for "
            f"{n_assistant} assistant messages, so its steps cannot be masked or weighted"
        )
    return runs


def _mask_steps(mask: list[int], steps: set[int], row: Trajectory) -> list[int]:
    """Zero the loss on the assistant steps in ``steps`` (STeCa's deviated step is context the
    model reads, not a target; a step of weight 0)."""
    out = list(mask)
    runs = _runs(mask, row)
    for step in steps:
        if step < len(runs):
            start, end = runs[step]
            out[start:end] = [0] * (end - start)
    return out


def tokenize_rows(
    tokenizer: Any,
    rows: Iterable[Trajectory],
    *,
    max_len: int,
    reasoning: bool = True,
    weights: bool = False,
    decision_weight: float = 1.0,
) -> tuple[list[Example], DataStats]:
    """Steps 1-2 for every row with at least one assistant message."""
    stats = DataStats()
    out: list[Example] = []
    for row in rows:
        stats.rows += 1
        if not any(m.role == "assistant" for m in row.messages):
            stats.skipped_no_assistant += 1
            continue
        ex = tokenize_row(
            tokenizer, row, reasoning=reasoning, weights=weights, decision_weight=decision_weight
        )
        stats.longest = max(stats.longest, len(ex))
        cut = len(ex) > max_len
        if cut:
            kept = ex.weights[:max_len] if ex.weights is not None else None
            ex = Example(ex.input_ids[:max_len], ex.mask[:max_len], ex.row_id, kept)
        if not any(ex.mask[1:]):
            if cut:
                stats.cut_off += 1
            else:
                stats.skipped_no_assistant += 1
            continue
        stats.truncated += cut
        stats.examples += 1
        stats.tokens += len(ex)
        stats.loss_tokens += sum(ex.mask[1:])
        out.append(ex)
    return out, stats


def left_out_note(data: dict[str, int], max_len: int) -> str | None:
    """What ``max_len`` cost the training, in one sentence (None when it cost nothing): the
    rows it left out whole and the rows whose end it cut, with the length that keeps them.

    >>> note = left_out_note({"rows": 100, "cut_off": 3, "truncated": 2, "longest": 1900}, 1024)
    >>> print(note.replace("; ", ";\\n"))
    3 of 100 rows left out: their first assistant message starts past max_len (1,024 tokens);
    2 more lost their end;
    the longest row has 1,900 tokens: raise max_len to keep them
    """
    lost, cut = data.get("cut_off", 0), data.get("truncated", 0)
    if not lost and not cut:
        return None
    rows, limit = f"{data.get('rows', 0):,} rows", f"max_len ({max_len:,} tokens)"
    head = (
        f"{lost} of {rows} left out: their first assistant message starts past {limit}"
        if lost
        else f"{cut} of {rows} lost their end past {limit}"
    )
    more = f"; {cut} more lost their end" if lost and cut else ""
    longest = data.get("longest", 0)
    return f"{head}{more}; the longest row has {longest:,} tokens: raise max_len to keep them"


def pack(examples: Sequence[Example], max_len: int) -> list[list[Example]]:
    """Step 3: best-fit decreasing; each bin holds whole examples, at most ``max_len`` tokens.

    >>> bins = pack([Example([1] * n, [1] * n) for n in (6, 5, 4, 3, 2)], max_len=10)
    >>> [[len(e) for e in b] for b in bins]
    [[6, 4], [5, 3, 2]]
    """
    import bisect

    order = sorted(range(len(examples)), key=lambda i: -len(examples[i]))
    bins: list[list[Example]] = []
    free: list[tuple[int, int]] = []  # (free space, bin index), sorted
    for i in order:
        n = len(examples[i])
        k = bisect.bisect_left(free, (n, -1))
        if k < len(free):
            space, b = free.pop(k)
            bins[b].append(examples[i])
            bisect.insort(free, (space - n, b))
        else:
            bins.append([examples[i]])
            bisect.insort(free, (max_len - n, len(bins) - 1))
    return bins


def _row(
    seqs: list[Example], width: int, pad_id: int
) -> tuple[list[int], list[int], list[int], list[float]]:
    ids: list[int] = []
    pos: list[int] = []
    labels: list[int] = []
    weights: list[float] = []
    for ex in seqs:
        ids += ex.input_ids
        pos += range(len(ex))
        lab = [t if m else IGNORE_INDEX for t, m in zip(ex.input_ids, ex.mask, strict=True)]
        lab[0] = IGNORE_INDEX  # never predict a sequence's first token from the previous one
        labels += lab
        weights += ex.weights if ex.weights is not None else [float(m) for m in ex.mask]
    n_pad = width - len(ids)
    ids += [pad_id] * n_pad
    pos += range(n_pad)
    labels += [IGNORE_INDEX] * n_pad
    weights += [0.0] * n_pad
    return ids, pos, labels, weights


def batches(
    examples: Sequence[Example],
    *,
    batch_size: int,
    max_len: int,
    pack_sequences: bool,
    pad_id: int,
    seed: int,
) -> list[Batch]:
    """Steps 3-4: the micro-batches of one epoch, in a seeded random order."""
    groups = pack(examples, max_len) if pack_sequences else [[e] for e in examples]
    rng = random.Random(seed)
    rng.shuffle(groups)
    out = []
    for start in range(0, len(groups), batch_size):
        chunk = groups[start : start + batch_size]
        width = max(sum(len(e) for e in g) for g in chunk)
        rows = [_row(g, width, pad_id) for g in chunk]
        weighted = any(e.weights is not None for g in chunk for e in g)
        out.append(
            Batch(
                input_ids=[r[0] for r in rows],
                position_ids=[r[1] for r in rows],
                labels=[r[2] for r in rows],
                real_tokens=sum(len(e) for g in chunk for e in g),
                sequences=sum(len(g) for g in chunk),
                row_ids=[e.row_id for g in chunk for e in g],
                loss_weights=[r[3] for r in rows] if weighted else None,
            )
        )
    return out
