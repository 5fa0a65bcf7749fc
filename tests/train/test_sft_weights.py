"""SFT with sample and step weights: STeCa's calibration weight and ``extra["weight"]`` scale a
row's loss, ``extra["step_weights"]`` each step's, and a row of weight 0 changes nothing.

Run: python -m pytest tests/train/test_sft_weights.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trajsynth.core.errors import DataError  # noqa: E402
from trajsynth.train.data import batches, sample_weight, step_weights, tokenize_row  # noqa: E402
from trajsynth.train.sft import SFTConfig, masked_nll, train_sft  # noqa: E402

from .conftest import conversation  # noqa: E402

CITIES = ["Paris", "Oslo", "Lima", "Rome"]


def test_a_zero_weight_row_changes_nothing(tmp_path: Path) -> None:
    """The same SFT run with and without an extra row of weight 0 ends in the same weights
    (the tiny student's tokenizer too, since it is trained on the data)."""
    rows = [conversation(i, CITIES[i % 4]) for i in range(6)]
    zero = conversation(99, "Quito").derive(id="zero", extra={"weight": 0})
    cfg = SFTConfig(max_steps=3, batch_size=2, max_len=512, seed=3)
    cfg.tiny.vocab_size, cfg.tiny.hidden_size, cfg.tiny.intermediate_size = 400, 32, 64
    a = train_sft(rows, tmp_path / "a", cfg)
    b = train_sft([*rows[:3], zero, *rows[3:]], tmp_path / "b", cfg)
    assert a.final_loss == b.final_loss and a.tokens == b.tokens
    from safetensors.torch import load_file

    wa = load_file(str(tmp_path / "a" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # and it does change the run when its weight is 1
    c = train_sft([*rows[:3], zero.derive(extra={}), *rows[3:]], tmp_path / "c", cfg)
    assert c.tokens != a.tokens


def test_sample_weights_come_from_the_weight_column_else_stecas_calibration() -> None:
    row = conversation(0)
    assert sample_weight(row) == 1.0
    assert sample_weight(row.derive(extra={"steca": {"reward": 1.0042}})) == 1.0042
    assert sample_weight(row.derive(extra={"weight": 0.5, "steca": {"reward": 1.2}})) == 0.5
    for bad in (-1, "heavy", float("nan"), True):
        with pytest.raises(DataError):
            sample_weight(row.derive(extra={"weight": bad}))
    with pytest.raises(DataError, match="4 numbers"):
        step_weights(row.derive(extra={"step_weights": [1, 1]}))


def test_token_weights_are_sample_times_step_weight(tiny) -> None:
    _, tok = tiny
    row = conversation(0).derive(extra={"steca": {"reward": 1.05}, "step_weights": [1, 0, 0.5, 2]})
    plain = tokenize_row(tok, conversation(0))
    ex = tokenize_row(tok, row, weights=True)
    assert plain.weights is None and ex.input_ids == plain.input_ids
    runs, start = [], None
    for i, m in enumerate([*plain.mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    assert len(runs) == 4  # four assistant messages
    assert ex.weights is not None
    for (a, b), w in zip(runs, [1.05, 0.0, 0.525, 2.1], strict=True):
        assert ex.weights[a:b] == pytest.approx([w] * (b - a))
        assert ex.mask[a:b] == [int(w > 0)] * (b - a)  # a step of weight 0 is masked out
    assert all(w == 0 for i, w in enumerate(ex.weights) if not plain.mask[i])


def test_the_weighted_loss_is_the_weighted_sum_of_token_losses(tiny) -> None:
    model, tok = tiny
    a = tokenize_row(tok, conversation(0).derive(extra={"weight": 2.0}), weights=True)
    b = tokenize_row(tok, conversation(1, "Oslo"), weights=True)
    assert b.weights is None  # weight 1: nothing to carry

    def batch(examples):
        return batches(examples, batch_size=4, max_len=4096, pack_sequences=False, pad_id=0,
                       seed=0)[0]  # fmt: skip

    with torch.no_grad():
        both, n = masked_nll(model, batch([a, b]), "cpu", "fp32")
        alone_a, na = masked_nll(model, batch([a.__class__(a.input_ids, a.mask)]), "cpu", "fp32")
        alone_b, nb = masked_nll(model, batch([b]), "cpu", "fp32")
    assert n == na + nb
    assert float(both) == pytest.approx(2 * float(alone_a) + float(alone_b), rel=1e-5)
    assert batch([a, b]).loss_weight == pytest.approx(2 * na + nb)


def test_the_decision_weight_scales_each_assistant_messages_first_token_only(tiny) -> None:
    """``decision_weight``: the first token of each assistant message (call, ask or answer)
    carries that factor times its row's weight; every other token keeps its weight."""
    _, tok = tiny
    plain = tokenize_row(tok, conversation(0))
    ex = tokenize_row(tok, conversation(0), decision_weight=5.0)
    heavy = tokenize_row(
        tok, conversation(0).derive(extra={"weight": 0.5}), weights=True, decision_weight=5.0
    )
    assert ex.input_ids == plain.input_ids and ex.mask == plain.mask
    starts = [i for i, m in enumerate(plain.mask) if m and (i == 0 or not plain.mask[i - 1])]
    assert len(starts) == 4  # one per assistant message
    assert ex.weights is not None and heavy.weights is not None
    for i, m in enumerate(plain.mask):
        expected = 5.0 if i in starts else float(m)
        assert ex.weights[i] == expected
        assert heavy.weights[i] == pytest.approx(0.5 * expected)
    # the trainer takes it from its config
    assert SFTConfig(decision_weight=5.0).decision_weight == 5.0
    with pytest.raises(ValueError):
        SFTConfig(decision_weight=0)
