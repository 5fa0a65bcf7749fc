"""Typed records for the ``extra`` keys that one module writes and others read.

A row's ``extra`` column is free JSON: a method keeps there whatever no other column holds.
Most keys are read only by the stage that wrote them, but a few are a contract between
modules — a pair for DPO export, STeCa's calibration record, LoopTool's provenance, GCP's
probe outcome, a sample weight. Each of those has a model here, named by its key, and two
helpers: :func:`get` reads it (validated once, a clear :class:`DataError` when it does not
fit) and :func:`with_` writes it (``extra`` stays JSON: the record's dump, fields in the
model's order, only those that were set, so the stored text is what the writers built by
hand before).

>>> pair = DpoPair(prompt_len=2, chosen_len=1, rejected=[])
>>> extra = with_({"end": "answered"}, pair)
>>> extra
{'end': 'answered', 'dpo': {'prompt_len': 2, 'chosen_len': 1, 'rejected': []}}
>>> get(extra, DpoPair).chosen_len
1
>>> get({}, DpoPair) is None
True
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import DataError
from .schema import Message

__all__ = [
    "DpoPair",
    "ExtraRecord",
    "GcpRecord",
    "JglvRecord",
    "LoopToolOrigin",
    "StecaRecord",
    "get",
    "weight_of",
    "with_",
]


class ExtraRecord(BaseModel):
    """A record kept under one key of ``extra`` (``KEY``); fields the readers do not name
    are kept as they are."""

    model_config = ConfigDict(extra="allow")

    KEY: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The record as ``extra`` keeps it: the fields that were set, in the model's order
        (nested records whole), then any others it carried."""
        dump = self.model_dump(mode="json")
        kept = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in dump.items() if k in kept}


R = TypeVar("R", bound=ExtraRecord)


class DpoPair(ExtraRecord):
    """``extra["dpo"]``: a preference pair on the row's own messages (STeCa, Magnet), which
    ``trajsynth export --format dpo`` writes: the prompt is ``messages[:prompt_len]``, the
    chosen continuation the next ``chosen_len`` messages."""

    KEY: ClassVar[str] = "dpo"

    turn: int | None = Field(default=None, description="User turn the pair is about (Magnet).")
    prompt_len: int = Field(description="Messages before the pair's continuations.")
    chosen_len: int = Field(description="Messages of the chosen continuation.")
    rejected: list[Message] = Field(
        default_factory=list, description="The rejected continuation's messages."
    )
    negative_rollout: int | None = Field(
        default=None, description="Which negative rollout the rejected side came from (Magnet)."
    )


class StecaRecord(ExtraRecord):
    """``extra["steca"]``: STeCa's calibration of one deviated step (the ``steca`` stage);
    its weight is the row's default sample weight in training and its pair the STeCa
    export's record."""

    KEY: ClassVar[str] = "steca"

    t: int | None = Field(default=None, description="The deviated assistant step.")
    deviation: float | None = Field(default=None, description="How far the step deviated.")
    reward: float | None = Field(default=None, description="The calibration weight.")
    prompt_len: int | None = Field(default=None, description="As in DpoPair.")
    chosen_len: int | None = Field(default=None, description="As in DpoPair.")
    rejected: list[Message] = Field(default_factory=list, description="As in DpoPair.")


class LoopToolOrigin(ExtraRecord):
    """``extra["looptool"]``: where a LoopTool dataset row came from (the round stage)."""

    KEY: ClassVar[str] = "looptool"

    origin: str = Field(description="seed, hard, corrected, edde, ... (stages.common.looptool).")
    iteration: int = Field(default=0, description="Loop iteration that made the row.")


class GcpRecord(ExtraRecord):
    """``extra["gcp"]``: GCP's probe of the row (status, which policy on which set, the
    scores; for a failure, the first mismatching step), read by JGLV, EDDE, the round and
    the report."""

    KEY: ClassVar[str] = "gcp"

    status: Literal["failed", "hard", "easy"] | None = Field(
        default=None, description="The probe's verdict."
    )
    policy: str = Field(default="student", description="Role that was probed.")
    set: str = Field(default="data", description="Name of the probed set.")
    step: int | None = Field(default=None, description="First mismatching step (failed).")
    label: Any = Field(
        default=None, description="That step's gold: its calls as [{name, arguments}], or 'text'."
    )
    prediction: Any = Field(
        default=None, description="What the policy did there, in the label's form ('none')."
    )
    prediction_text: str | None = Field(default=None, description="The policy's text reply.")
    context: list[dict[str, Any]] = Field(
        default_factory=list, description="The conversation before the step (message dicts)."
    )


class JglvRecord(ExtraRecord):
    """``extra["jglv"]``: JGLV's judged verdict on a GCP failure, which EDDE expands."""

    KEY: ClassVar[str] = "jglv"

    status: str = Field(description="model_incorrect, original_incorrect, both_correct, ...")
    consensus: bool = Field(default=False, description="Did enough votes agree?")
    votes: list[str | None] = Field(default_factory=list, description="Each vote's verdict.")
    error_analysis: str = Field(default="", description="The majority's analysis.")
    correct: Any = Field(default=None, description="The response judged correct.")
    incorrect: Any = Field(default=None, description="The response judged incorrect.")


def _record(extra: Any, key: str) -> Any:
    return extra.get(key) if isinstance(extra, dict) else None


def get(extra: Any, model: type[R]) -> R | None:
    """The ``model.KEY`` record of a row's ``extra``, validated; None when it has none.

    Raises :class:`DataError` when the value is there but is not such a record."""
    value = _record(extra, model.KEY)
    if value is None:
        return None
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise DataError(
            f'extra["{model.KEY}"] is not a {model.__name__}: {where}: {first["msg"]}'
        ) from None


def with_(extra: dict[str, Any] | None, record: ExtraRecord) -> dict[str, Any]:
    """A copy of ``extra`` holding ``record`` under its key (as JSON: the fields that were
    set, in the model's order, nested records whole)."""
    return {**(extra or {}), record.KEY: record.to_json()}


def weight_of(extra: Any) -> float | None:
    """``extra["weight"]`` (any exporter or user may set it), else STeCa's calibration
    weight, else None; :class:`DataError` when it is not a finite number ≥ 0."""
    value = _record(extra, "weight")
    if value is None:
        steca = get(extra, StecaRecord) if isinstance(_record(extra, "steca"), dict) else None
        value = steca.reward if steca is not None else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"its weight {value!r} is not a number")
    if not value >= 0 or value == float("inf"):
        raise DataError(f"its weight {value} is not a finite number ≥ 0")
    return float(value)
