"""Base classes for configuration models, and the marker that keeps a new option from
redrawing the data of configs that do not use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["AsBefore", "StrictModel", "identity_dump"]


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys, so a typo in YAML fails loudly."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


@dataclass(frozen=True)
class AsBefore:
    """Marks an option added to a model that has already made data: ``value`` is the setting
    under which it behaves as before it existed. At that setting :func:`identity_dump` leaves
    it out, so the hash that names a stage's rows (and seeds every draw keyed on their ids)
    stays what it was and adding the option redraws nothing; any other setting is hashed as
    usual. ``value`` is the old behaviour, not the default: changing the default later still
    changes the hash. Example::

        bundle_share: Annotated[float, AsBefore(0.0)] = Field(0.0, ge=0, le=1)
    """

    value: Any


def identity_dump(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(mode="json")`` less the :class:`AsBefore` options that are at their
    old-behaviour value, at every level of nesting: what a config's identity hash reads."""
    dump = model.model_dump(mode="json")
    _drop_as_before(model, dump)
    return dump


def _drop_as_before(model: BaseModel, dump: dict[str, Any]) -> None:
    for name, info in type(model).model_fields.items():
        if name not in dump:
            continue
        value = getattr(model, name)
        marks = [m for m in info.metadata if isinstance(m, AsBefore)]
        if any(_same(value, m.value) for m in marks):
            del dump[name]
        elif isinstance(value, BaseModel) and isinstance(dump[name], dict):
            _drop_as_before(value, dump[name])


def _same(a: Any, b: Any) -> bool:
    """The same setting: equal and of one type, or equal plain numbers (0 and 0.0 are the same
    setting; True is not 1)."""
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    return (type(a) is type(b) or numbers) and a == b
