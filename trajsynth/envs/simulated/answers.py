"""Step 5 of :mod:`trajsynth.envs.simulated`: the world's proposal (the response schema filled
from facts), what an answering model is asked (:class:`ToolQuery`), the check of its answer
against the response schema (patterns matched under a time limit), and the answer cache."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from ...core.ids import stable_hash
from ...core.jsonvalues import pattern_search
from ..spec import ToolSpec
from .values import fill, make_value

# --------------------------------------------------------------------------------------
# the answer's check against the tool's response schema, with bounded patterns
# --------------------------------------------------------------------------------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """jsonschema's ``pattern`` keyword under :func:`pattern_search`'s time limit (the
    instance is a model's answer; one that cannot be matched in time does not match)."""
    if validator.is_type(instance, "string"):
        try:
            matched = pattern_search(pattern, instance)
        except TimeoutError:
            matched = False
        if matched is False:
            yield jsonschema.ValidationError(f"{instance[:200]!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's ``patternProperties`` keyword, its keys matched under the time limit."""
    if validator.is_type(instance, "object"):
        for pattern, subschema in properties.items():
            for k, v in instance.items():
                try:
                    matched = pattern_search(pattern, k)
                except TimeoutError:
                    matched = False
                if matched:
                    yield from validator.descend(v, subschema, path=k, schema_path=pattern)


_BOUNDED: dict[type, type] = {}


def validate_response(answer: Any, schema: dict[str, Any]) -> None:
    """``jsonschema.validate(answer, schema)``, with ``pattern`` and ``patternProperties``
    matched under a time limit. Raises ``jsonschema.SchemaError`` for a bad schema and
    ``jsonschema.ValidationError`` for an answer that breaks it."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    bounded = _BOUNDED.get(cls)
    if bounded is None:
        keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
        bounded = _BOUNDED[cls] = jsonschema.validators.extend(cls, keywords)
    error = jsonschema.exceptions.best_match(bounded(schema).iter_errors(answer))
    if error is not None:
        raise error


# --------------------------------------------------------------------------------------
# answering
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolQuery:
    """What an answering model is given for one call (step 5)."""

    seed: int
    state_hash: str
    tool: dict[str, Any]  # the spec: name, description, parameters, response
    call: dict[str, Any]  # {name, arguments}
    ledger: dict[str, dict[str, Any]]  # the entity tables the call involves
    proposal: dict[str, Any]  # the world's answer: {"output": ...} or {"error": {...}}

    def key(self) -> str:
        return stable_hash([self.seed, self.state_hash, self.call])

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "state_hash": self.state_hash,
            "tool": self.tool,
            "call": self.call,
            "ledger": self.ledger,
            "proposal": self.proposal,
        }


class AnswerCache:
    """Answers by (seed, state hash, call), shared by the environments of one factory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        with self._lock:
            return self._answers.get(key)

    #: answers kept at most (then the oldest half is dropped; a dropped answer is recomputed
    #: identically, so this bounds memory, never changes a result)
    LIMIT = 200_000

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            if len(self._answers) >= self.LIMIT:
                for old in list(self._answers)[: self.LIMIT // 2]:
                    del self._answers[old]
            self._answers.setdefault(key, value)

    def __len__(self) -> int:
        return len(self._answers)


#: an answering model: the query → the output (None: keep the proposal)
Answerer = Callable[[ToolQuery], Any]


def _result(spec: ToolSpec, args: Mapping[str, Any], rng: random.Random) -> Any:
    if spec.response is not None:
        return make_value("result", spec.response, rng)
    return f"{spec.name} result {rng.randint(100, 999)}"


def _answer(
    spec: ToolSpec,
    facts: Mapping[str, Any],
    rng: random.Random,
    *,
    rows: list[Mapping[str, Any]] | None = None,
    result: Any = None,
) -> Any:
    """The proposal: the response schema filled from ``facts``; without a response schema,
    the facts under ``result`` (what the graph's untyped ``result`` field feeds)."""
    if spec.response is None:
        out = {k: v for k, v in facts.items() if not isinstance(v, (dict, list))}
        return {"result": result, **{k: v for k, v in out.items() if k != "result"}}
    value = fill(spec.response, "result", facts, rng, rows=rows)
    if rows is not None and isinstance(value, list):
        return value
    return value
