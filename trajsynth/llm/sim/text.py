"""Tool and value helpers shared by the simulated roles: the offered tools by name
(:class:`ToolIndex`), the simulator's mistakes (a plausible wrong value, a hallucinated tool
name), fresh values and its token counts. How the roles word requests and thoughts is in
:mod:`.phrasing`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from ...core.surface import param_words
from ...core.task import GoldCall

__all__ = [
    "ToolIndex",
    "count_tokens",
    "default_args",
    "fresh_value",
    "hallucinate_name",
    "param_words",
    "perturb_value",
    "tokenize",
]

_CITIES = ["Paris", "Lisbon", "Tokyo", "Denver", "Oslo", "Cairo", "Lima", "Seoul", "Austin", "Rome"]
_NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivan", "Jun"]
_CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "CAD", "AUD", "SEK"]
_TICKERS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "META", "IBM"]
_WORDS = ["blue", "report", "garden", "invoice", "winter", "summit", "river", "notes", "draft"]
_VOCABS = (_CITIES, _NAMES, _CURRENCIES, _TICKERS, _WORDS)

_TOKEN = re.compile(r"\w+|[^\w\s]")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------


@dataclass
class ToolInfo:
    name: str
    description: str = ""
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)


class ToolIndex:
    """Name → description and parameter schema, from an OpenAI ``tools`` list (or bare
    function dicts, as BFCL writes them)."""

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        self.tools: dict[str, ToolInfo] = {}
        for t in tools or []:
            if not isinstance(t, dict):
                continue
            fn = t["function"] if isinstance(t.get("function"), dict) else t
            name = fn.get("name")
            if not isinstance(name, str):
                continue
            params = fn.get("parameters") or {}
            props = params.get("properties") if isinstance(params, dict) else None
            req = params.get("required") if isinstance(params, dict) else None
            self.tools[name] = ToolInfo(
                name=name,
                description=str(fn.get("description") or ""),
                properties=props if isinstance(props, dict) else {},
                required=[r for r in (req or []) if isinstance(r, str)],
            )

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def get(self, name: str) -> ToolInfo | None:
        return self.tools.get(name)

    def optional_args(self, call: GoldCall) -> list[str]:
        """Arguments of ``call`` that may be omitted (schema not-required, or BFCL '')."""
        out = []
        info = self.tools.get(call.name)
        for k in call.arguments:
            bfcl_optional = bool(call.acceptable and "" in (call.acceptable.get(k) or []))
            schema_optional = info is not None and bool(info.properties) and k not in info.required
            if bfcl_optional or schema_optional:
                out.append(k)
        return out

    def valid(self, name: str, args: Any) -> bool:
        """Known function, required arguments present, no unknown ones, JSON types right."""
        info = self.tools.get(name)
        if info is None or not isinstance(args, dict):
            return False
        if any(r not in args for r in info.required):
            return False
        for k, v in args.items():
            if info.properties and k not in info.properties:
                return False
            spec = info.properties.get(k) or {}
            if not _type_ok(v, spec.get("type")):
                return False
        return True


def _type_ok(value: Any, expected: Any) -> bool:
    if not isinstance(expected, str):
        return True
    table = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    check = table.get(expected.lower())
    return True if check is None else check(value)


# --------------------------------------------------------------------------------------
# values: mistakes and fresh values
# --------------------------------------------------------------------------------------


def perturb_value(value: Any, rng: random.Random) -> Any:
    """A plausible wrong value of the same type (never equal to ``value``)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, 2, 3, 5, 10, -1, -2])
    if isinstance(value, float):
        return round(value * rng.choice([1.5, 2.0, 0.5]) + 1.0, 4)
    if isinstance(value, str):
        m = _DATE.match(value)
        if m:
            day = int(m.group(3)) % 28 + 1
            return f"{m.group(1)}-{m.group(2)}-{day:02d}" if day != int(m.group(3)) else value + "x"
        for vocab in _VOCABS:
            if value in vocab:
                return rng.choice([v for v in vocab if v != value])
        if any(ch.isdigit() for ch in value):
            out = "".join(str((int(ch) + 1) % 10) if ch.isdigit() else ch for ch in value)
            if out != value:
                return out
        if not value:
            return "unknown"
        return value[:-1] if len(value) > 3 else value + "s"
    if isinstance(value, list):
        if len(value) > 1:
            return value[:-1]
        return [*value, perturb_value(value[0], rng)] if value else ["unknown"]
    if isinstance(value, dict):
        if not value:
            return {"unknown": True}
        key = rng.choice(sorted(value))
        return {**value, key: perturb_value(value[key], rng)}
    return "unknown"


def fresh_value(value: Any, rng: random.Random) -> Any:
    """A different but equally valid value of the same kind (EDDE: new data, same pattern)."""
    if isinstance(value, bool):
        return rng.random() < 0.5
    if isinstance(value, int):
        lo = 0 if value >= 0 else value * 2
        return max(lo, int(abs(value) * rng.uniform(0.3, 3.0)) + rng.randint(1, 9))
    if isinstance(value, float):
        return round(abs(value) * rng.uniform(0.3, 3.0) + rng.uniform(0.1, 5.0), 2)
    if isinstance(value, str):
        for vocab in _VOCABS:
            if value in vocab:
                return rng.choice([v for v in vocab if v != value])
        m = _DATE.match(value)
        if m:
            year = int(m.group(1)) + rng.randint(0, 1)
            return f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if any(ch.isdigit() for ch in value):
            return "".join(str(rng.randint(0, 9)) if ch.isdigit() else ch for ch in value)
        return rng.choice(_WORDS) + "_" + str(rng.randint(10, 99)) if value else rng.choice(_WORDS)
    if isinstance(value, list):
        return [fresh_value(v, rng) for v in value]
    if isinstance(value, dict):
        return {k: fresh_value(v, rng) for k, v in value.items()}
    return value


def hallucinate_name(name: str, taken: set[str], rng: random.Random) -> str:
    """A plausible tool name that is not offered."""
    base = name.split(".")[-1]
    candidates = [
        f"{base}_info",
        f"{base}_v2",
        f"fetch_{base}",
        f"{base}_data",
        "lookup_" + base.split("_", 1)[-1],
        base.replace("get_", "retrieve_") if "get_" in base else f"do_{base}",
    ]
    rng.shuffle(candidates)
    for c in candidates:
        if c not in taken and c != name:
            return c
    return f"{base}_{rng.randint(100, 999)}"


def default_args(info: ToolInfo, rng: random.Random) -> dict[str, Any]:
    """Plausible arguments for a tool's required parameters (for a spurious call)."""
    out: dict[str, Any] = {}
    for k in info.required or list(info.properties)[:1]:
        kind = (info.properties.get(k) or {}).get("type")
        out[k] = {
            "integer": rng.randint(1, 10),
            "number": round(rng.uniform(1, 100), 2),
            "boolean": True,
            "array": [],
            "object": {},
        }.get(kind if isinstance(kind, str) else "", rng.choice(_WORDS))  # ["integer", "null"]
    return out


# --------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """Word and punctuation tokens (the simulator's stand-in for a tokenizer)."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """About one token per four characters, as for English BPE vocabularies."""
    return max(1, (len(text) + 3) // 4) if text else 0
