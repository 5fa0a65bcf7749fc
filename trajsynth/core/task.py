"""The ground-truth contract carried in a row's ``ground_truth`` column.

Task synthesis writes it, verifiers and rewards read it. A task is a sequence of user turns;
each turn expects zero or more assistant steps, and each step is a list of calls made in one
assistant message (more than one = parallel calls). Values in ``arguments`` are the exact
gold values; ``acceptable`` optionally lists every acceptable value per parameter (BFCL's
possible-answer semantics, where ``""`` marks an optional parameter that may be omitted).

Example::

    gt = GroundTruth(turns=[GoldTurn(
        request="Convert 100 USD to EUR, then book flight FL12.",
        steps=[[GoldCall(name="convert_currency", arguments={"amount": 100, "from": "USD",
                                                              "to": "EUR"})],
               [GoldCall(name="book_flight", arguments={"flight_id": "FL12"})]])])
    gt.flat_calls()   # both calls, in order
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GoldCall", "GoldTurn", "GroundTruth"]


class GoldCall(BaseModel):
    """One expected call."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    acceptable: dict[str, list[Any]] | None = Field(
        default=None,
        description="Per parameter, every acceptable value (BFCL style); overrides `arguments` "
        "for matching. A list containing '' means the parameter may be omitted.",
    )
    output: Any = Field(default=None, description="What the call returned when the gold ran.")


class GoldTurn(BaseModel):
    """One user turn and what the assistant is expected to do about it."""

    model_config = ConfigDict(extra="forbid")

    request: str = Field(description="The user's message for this turn.")
    kind: Literal["tool", "no_tool", "clarify"] = Field(
        default="tool",
        description="tool: call tools; no_tool: answer in text; clarify: ask for a missing value.",
    )
    steps: list[list[GoldCall]] = Field(
        default_factory=list, description="Expected assistant steps, each a list of calls."
    )
    answer: str | None = Field(
        default=None, description="Expected text reply (no_tool/clarify turns), if known."
    )
    clarification: str | None = Field(
        default=None, description="For clarify turns: the user's follow-up giving the value."
    )


class GroundTruth(BaseModel):
    """Everything needed to verify a trajectory for a task without an LLM."""

    model_config = ConfigDict(extra="forbid")

    turns: list[GoldTurn] = Field(default_factory=list)
    env_seed: int = Field(default=0, description="Seed the environment is reset with.")
    initial_state: dict[str, Any] | None = Field(
        default=None, description="Environment state override applied at reset, if any."
    )
    final_state_hash: str | None = Field(
        default=None, description="state_hash() after replaying the gold calls."
    )
    required_outputs: list[str] = Field(
        default_factory=list, description="Strings the final answer must contain."
    )
    extra: dict[str, Any] = Field(default_factory=dict)

    def flat_calls(self) -> list[GoldCall]:
        """Every gold call across turns and steps, in order."""
        return [c for t in self.turns for s in t.steps for c in s]

    @classmethod
    def from_json(cls, value: Any) -> GroundTruth | None:
        """Parse the ``ground_truth`` column value (None stays None).

        Every rollout and every verification of a task reads its ground truth, so a value is
        parsed once per JSON text (a bounded cache keyed by that text) and the parsed object
        is shared: treat it as read-only (``model_copy`` to change it).
        """
        if value is None:
            return None
        if isinstance(value, GroundTruth):
            return value
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError):  # not plain JSON (holds records): parse it as it is
            return cls.model_validate(value)
        return _parse_ground_truth(text)

    @classmethod
    def from_text(cls, text: str) -> GroundTruth:
        """Parse the ``ground_truth`` column's JSON text (cached like :meth:`from_json`: the
        object is shared, read-only)."""
        return _parse_ground_truth(text)


@functools.lru_cache(maxsize=1024)
def _parse_ground_truth(text: str) -> GroundTruth:
    return GroundTruth.model_validate(json.loads(text))
