"""Wrong labels with the truth kept aside: what the ``label_noise`` stage injects and what
``jglv`` and ``looptool_report`` read back.

A generator LLM's labels are sometimes wrong in ways no rule catches: the call is valid,
executes, and reaches a consistent state, but it is not what the user asked (LoopTool,
arXiv:2511.09148: "noisy labels ... wrong parameters, incomplete calls"). Offline, the
simulated teacher never errs that way, so a label-correcting method (JGLV) would have
nothing to find. :func:`corrupt_step` makes one such error in a gold step, of one of three
kinds:

- ``value``: one argument gets a plausible wrong value of the same type (a number shifted or
  scaled within the schema's bounds, another member of an ``enum``, one number inside a
  string changed, one element of a list changed);
- ``swap``: two arguments of the same type exchange their values (``from_unit`` and
  ``to_unit``, ``old_value`` and ``new_value``);
- ``missing``: an optional argument the request gave is left out.

The row records the truth in ``extra["label_noise"]`` (:data:`NOISE_KEY`): the flattened step
index (the order of :func:`trajsynth.train.eval.gold_steps`, the one GCP's ``step`` uses), the
kind, the call and argument, and the ``clean`` and ``noisy`` calls. Nothing a student reads
(the messages, the tools) mentions it.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from ...core.task import GoldCall, GroundTruth

__all__ = [
    "KINDS",
    "NOISE_KEY",
    "corrupt_step",
    "last_call_step",
    "noise_of",
    "step_index",
]

NOISE_KEY = "label_noise"
Kind = Literal["value", "swap", "missing"]
KINDS: tuple[Kind, ...] = ("value", "swap", "missing")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def noise_of(extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """The injected-noise record of a row's ``extra`` (None for a clean row)."""
    record = (extra or {}).get(NOISE_KEY)
    return record if isinstance(record, dict) else None


def step_index(gt: GroundTruth, turn: int, step: int) -> int:
    """The flattened index of step ``step`` of turn ``turn`` (the inverse of
    :func:`trajsynth.stages.common.looptool.locate_step`)."""
    k = 0
    for t, gold_turn in enumerate(gt.turns):
        if gold_turn.kind == "clarify" and gold_turn.clarification:
            k += 1
        if t == turn:
            return k + step
        k += len(gold_turn.steps) + 1
    raise IndexError(f"turn {turn} is not in the task")


def last_call_step(gt: GroundTruth) -> tuple[int, int] | None:
    """(turn, step) of the task's last step with calls: corrupting it leaves no later call
    depending on a value it changed."""
    for t in range(len(gt.turns) - 1, -1, -1):
        for s in range(len(gt.turns[t].steps) - 1, -1, -1):
            if gt.turns[t].steps[s]:
                return t, s
    return None


def _schemas(tools: Sequence[Any] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        if isinstance(tool, dict):
            fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
            if fn.get("name"):
                out[str(fn["name"])] = fn.get("parameters") or {}
    return out


def _shift_number(value: float, prop: dict[str, Any], rng: random.Random) -> float | int | None:
    """A different number of the same kind, inside the schema's bounds."""
    lo = prop.get("minimum", -math.inf)
    hi = prop.get("maximum", math.inf)
    if isinstance(value, int):
        options: list[float] = [value + d for d in (1, 2, 3, 5, 10, -1, -2)]
        options.append(value * 2)
    else:
        digits = len(repr(value).partition(".")[2]) if "." in repr(value) else 0
        options = [round(value * f, max(digits, 1)) for f in (2.0, 0.5, 1.5, 10.0)]
        options += [round(value + d, max(digits, 1)) for d in (1.0, -1.0)]
    options = [o for o in options if o != value and lo <= o <= hi]
    return rng.choice(options) if options else None


def _wrong_value(value: Any, prop: dict[str, Any], rng: random.Random) -> Any:
    """A plausible wrong value of the same type as ``value``, or None when there is none."""
    enum = prop.get("enum")
    if isinstance(value, bool):
        return not value
    if isinstance(enum, list) and value in enum:
        others = [e for e in enum if e != value]
        return rng.choice(others) if others else None
    if isinstance(value, (int, float)):
        return _shift_number(value, prop, rng)
    if isinstance(value, str):
        numbers = list(_NUMBER.finditer(value))
        if not numbers:
            return None
        m = rng.choice(numbers)
        old = float(m.group()) if "." in m.group() else int(m.group())
        new = _shift_number(old, {}, rng)
        if new is None or new < 0:
            return None
        return value[: m.start()] + str(new) + value[m.end() :]
    if isinstance(value, list) and value:
        items = prop["items"] if isinstance(prop.get("items"), dict) else {}
        i = rng.randrange(len(value))
        item = value[i]
        if isinstance(items.get("enum"), list):
            others = [e for e in items["enum"] if e not in value]
            new_item = rng.choice(others) if others else None
        else:
            new_item = _wrong_value(item, items, rng)
        if new_item is None:
            return None
        return [*value[:i], new_item, *value[i + 1 :]]
    return None


def _candidates(step: Sequence[GoldCall], schemas: dict[str, dict[str, Any]], kinds: Sequence[str]):
    """Every (kind, call index, argument or pair of arguments) the step offers."""
    out: list[tuple[str, int, tuple[str, ...]]] = []
    for i, call in enumerate(step):
        params = schemas.get(call.name, {})
        required = set(params.get("required") or [])
        args = call.arguments
        if "value" in kinds:
            out += [("value", i, (k,)) for k in sorted(args)]
        if "missing" in kinds:
            out += [("missing", i, (k,)) for k in sorted(args) if k not in required]
        if "swap" in kinds:
            keys = sorted(args)
            for a, x in enumerate(keys):
                for y in keys[a + 1 :]:
                    va, vb = args[x], args[y]
                    same = type(va) is type(vb) and isinstance(va, (str, int, float))
                    if same and not isinstance(va, bool) and va != vb:
                        out.append(("swap", i, (x, y)))
    return out


def corrupt_step(
    step: Sequence[GoldCall],
    tools: Sequence[Any] | None,
    rng: random.Random,
    kinds: Sequence[str] = KINDS,
) -> list[tuple[list[GoldCall], dict[str, Any]]]:
    """Wrong versions of ``step``, in a seeded random order: each is the step with one error
    (see the module docstring) and a record ``{kind, call, argument}``. The caller keeps the
    first that still executes."""
    schemas = _schemas(tools)
    cands = _candidates(step, schemas, kinds)
    rng.shuffle(cands)
    out = []
    for kind, i, keys in cands:
        call = step[i]
        props = (schemas.get(call.name, {}).get("properties") or {}) if schemas else {}
        args = dict(call.arguments)
        if kind == "value":
            new = _wrong_value(args[keys[0]], props.get(keys[0]) or {}, rng)
            if new is None:
                continue
            args[keys[0]] = new
        elif kind == "missing":
            del args[keys[0]]
        else:
            args[keys[0]], args[keys[1]] = args[keys[1]], args[keys[0]]
        wrong = GoldCall(name=call.name, arguments=args)
        calls = [wrong if j == i else c.model_copy() for j, c in enumerate(step)]
        out.append((calls, {"kind": kind, "call": i, "argument": "+".join(keys)}))
    return out
