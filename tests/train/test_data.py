"""Tokenization with masks, packing and batch layout.

Run: python -m pytest tests/train/test_data.py -q
"""

from __future__ import annotations

import random

import pytest

from trajsynth.train.data import IGNORE_INDEX, Example, batches, pack


def _examples(lengths: list[int]) -> list[Example]:
    return [
        Example(list(range(100 + i, 100 + i + n)), [0] * (n // 2) + [1] * (n - n // 2), f"r{i}")
        for i, n in enumerate(lengths)
    ]


def test_best_fit_decreasing_keeps_every_example_whole() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(20, 300) for _ in range(200)]
    exs = _examples(lengths)
    bins = pack(exs, 512)
    assert sorted(len(e) for b in bins for e in b) == sorted(lengths)
    assert all(sum(len(e) for e in b) <= 512 for b in bins)
    fill = sum(lengths) / (len(bins) * 512)
    assert fill > 0.95  # many short sequences pack almost perfectly
    # an example longer than the row gets a row of its own (the tokenizer truncated it before)
    assert pack(_examples([600, 10]), 512)[0][0].input_ids[0] == 100


def test_packed_batch_layout() -> None:
    exs = _examples([6, 4, 5])
    (batch,) = batches(exs, batch_size=4, max_len=10, pack_sequences=True, pad_id=0, seed=0)
    assert batch.shape == (2, 10)
    assert batch.real_tokens == 15 and batch.sequences == 3
    for ids, pos, labels in zip(batch.input_ids, batch.position_ids, batch.labels, strict=True):
        starts = [i for i, p in enumerate(pos) if p == 0]
        for s in starts:
            assert labels[s] == IGNORE_INDEX  # never predict across a sequence boundary
        for i, (t, lab) in enumerate(zip(ids, labels, strict=True)):
            assert lab in (IGNORE_INDEX, t)
            if t == 0:  # padding
                assert lab == IGNORE_INDEX
            del i
    # the loss covers exactly the masked-in tokens except each sequence's first
    assert batch.loss_tokens == sum(sum(e.mask[1:]) for e in exs)


def test_unpacked_batches_are_right_padded() -> None:
    exs = _examples([3, 7])
    (batch,) = batches(exs, batch_size=2, max_len=64, pack_sequences=False, pad_id=9, seed=1)
    assert batch.shape == (2, 7)
    short = next(row for row in batch.input_ids if row.count(9) == 4)
    assert short[3:] == [9, 9, 9, 9]


def test_epoch_order_is_seeded() -> None:
    exs = _examples([5] * 40)
    a = batches(exs, batch_size=4, max_len=5, pack_sequences=False, pad_id=0, seed=3)
    b = batches(exs, batch_size=4, max_len=5, pack_sequences=False, pad_id=0, seed=3)
    c = batches(exs, batch_size=4, max_len=5, pack_sequences=False, pad_id=0, seed=4)
    assert [x.row_ids for x in a] == [x.row_ids for x in b] != [x.row_ids for x in c]


def test_tokenize_rows_truncates_and_skips(tiny) -> None:
    pytest.importorskip("transformers")
    from trajsynth.core.schema import Message, Trajectory
    from trajsynth.train.data import left_out_note, tokenize_rows

    from .conftest import conversation

    _, tok = tiny
    task_row = Trajectory(id="t", task_id="t", messages=[Message(role="user", content="hi")])
    rows = [conversation(0), conversation(1, "Oslo"), task_row]
    exs, stats = tokenize_rows(tok, rows, max_len=4096)
    assert stats.examples == 2 and stats.skipped_no_assistant == 1 and stats.truncated == 0
    longest = max(len(e) for e in exs)
    exs, stats = tokenize_rows(tok, rows, max_len=len(exs[0]) - 5)
    assert stats.truncated == 2 and all(len(e) == len(exs[0]) for e in exs)
    assert stats.longest == longest
    assert left_out_note(stats.as_dict(), len(exs[0])) == (
        f"2 of 3 rows lost their end past max_len ({len(exs[0])} tokens); the longest row "
        f"has {longest} tokens: raise max_len to keep them"
    )
    # a row cut before its first assistant token has nothing to train on: counted apart from a
    # row that never had an assistant message, and the note says how long a row to allow
    _, stats = tokenize_rows(tok, rows, max_len=20)
    assert stats.examples == 0 and stats.cut_off == 2 and stats.skipped_no_assistant == 1
    assert stats.truncated == 0
    note = left_out_note(stats.as_dict(), 20)
    assert note is not None and note.startswith("2 of 3 rows left out: their first assistant")
    assert f"the longest row has {longest} tokens" in note
    assert left_out_note(tokenize_rows(tok, rows, max_len=4096)[1].as_dict(), 4096) is None
