"""Typed records for the shared ``extra`` keys: read once, validated, written as the same JSON
the writers built by hand.

Run: python -m pytest tests/core/test_extras.py -q
"""

from __future__ import annotations

import json

import pytest

from trajsynth.core import DataError, Message, Trajectory, to_batch
from trajsynth.core.extras import (
    DpoPair,
    GcpRecord,
    LoopToolOrigin,
    StecaRecord,
    get,
    weight_of,
    with_,
)

REJECTED = [Message(role="assistant", content="no")]


def test_with_writes_the_same_text_as_the_hand_built_dict() -> None:
    by_hand = {
        "end": "answered",
        "dpo": {
            "turn": 1,
            "prompt_len": 3,
            "chosen_len": 2,
            "rejected": [m.model_dump(mode="json") for m in REJECTED],
            "negative_rollout": 0,
        },
    }
    pair = DpoPair(turn=1, prompt_len=3, chosen_len=2, rejected=REJECTED, negative_rollout=0)
    typed = with_({"end": "answered"}, pair)
    assert json.dumps(typed) == json.dumps(by_hand)
    # fields left unset are not written (STeCa's pair has no turn)
    assert list(DpoPair(prompt_len=1, chosen_len=1).to_json()) == ["prompt_len", "chosen_len"]
    row = Trajectory(id="r", task_id="t", extra=typed)
    assert to_batch([row]).column("extra")[0].as_py() == json.dumps(by_hand)


def test_get_reads_each_record_typed_and_keeps_what_it_does_not_name() -> None:
    extra = {
        "gcp": {"status": "failed", "set": "probe", "step": 2, "mean_logprob": -0.5},
        "looptool": {"origin": "corrected", "iteration": 3},
        "steca": {"t": 1, "deviation": 0.5, "reward": 1.2, "prompt_len": 4, "chosen_len": 2},
    }
    gcp = get(extra, GcpRecord)
    assert gcp is not None and (gcp.status, gcp.policy, gcp.set, gcp.step) == (
        "failed",
        "student",
        "probe",
        2,
    )
    assert gcp.model_extra == {"mean_logprob": -0.5} and gcp.label is None
    assert get(extra, LoopToolOrigin) == LoopToolOrigin(origin="corrected", iteration=3)
    steca = get(extra, StecaRecord)
    assert steca is not None and steca.reward == 1.2 and steca.rejected == []
    assert get(extra, DpoPair) is None and get(None, DpoPair) is None and get([], GcpRecord) is None


def test_a_record_that_does_not_fit_is_one_clear_error() -> None:
    with pytest.raises(DataError, match=r'extra\["dpo"\] is not a DpoPair: prompt_len'):
        get({"dpo": {"chosen_len": 1}}, DpoPair)
    with pytest.raises(DataError, match=r'extra\["gcp"\] is not a GcpRecord: status'):
        get({"gcp": {"status": "lost"}}, GcpRecord)


def test_weight_is_the_rows_own_else_stecas_calibration_weight() -> None:
    assert weight_of({"weight": 2, "steca": {"reward": 1.5}}) == 2.0
    assert weight_of({"steca": {"reward": 1.5}}) == 1.5
    assert weight_of({"steca": "not a record"}) is None and weight_of(None) is None
    with pytest.raises(DataError, match="not a number"):
        weight_of({"weight": True})
    with pytest.raises(DataError, match="finite number"):
        weight_of({"weight": float("inf")})
