"""Language and value helpers shared by the simulated roles.

Templates, not a language model: requests are built from each tool's description and the
calls' argument values, varied by seeded choices of template, persona and connector. The
helpers also make the simulator's mistakes (a plausible wrong value, a hallucinated tool name)
and its token counts.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from ...core.task import GoldCall

__all__ = [
    "ToolIndex",
    "compose_query",
    "count_tokens",
    "describe_call",
    "fresh_value",
    "hallucinate_name",
    "lower_first",
    "perturb_value",
    "render_value",
    "tokenize",
]

_CITIES = ["Paris", "Lisbon", "Tokyo", "Denver", "Oslo", "Cairo", "Lima", "Seoul", "Austin", "Rome"]
_NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivan", "Jun"]
_CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF", "CAD", "AUD", "SEK"]
_TICKERS = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "TSLA", "META", "IBM"]
_WORDS = ["blue", "report", "garden", "invoice", "winter", "summit", "river", "notes", "draft"]
_VOCABS = (_CITIES, _NAMES, _CURRENCIES, _TICKERS, _WORDS)

_PERSONAS = {
    None: ["", "", ""],
    "busy professional": ["Quick one: ", "No time to waste — ", "Between meetings: "],
    "student": ["Hi! For a project, ", "Hey, ", "I'm still learning this, but "],
    "retiree": ["Good morning. ", "Hello dear, ", "If it is not too much trouble, "],
    "developer": ["FYI: ", "Heads up — ", "Ticket request: "],
}
_STYLE_OPENERS = {
    "plain": ["", "Please "],
    "casual": ["Hey, can you ", "Yo, "],
    "formal": ["I would kindly ask you to ", "Would you please "],
    "terse": ["", ""],
}
_TEMPLATES = [
    "{Verb}{with}.",
    "Could you {verb}{with}?",
    "I need to {verb}{with}.",
    "Please {verb}{with}.",
    "Can you help me {verb}{with}?",
    "I'd like to {verb}{with}.",
]
_CONNECTORS = [" Then ", " After that, ", " Once that's done, ", " Next, "]
_PARALLEL = [" Also, ", " At the same time, ", " And "]

_POLITE_WORDS = r"(Could you|Can you help me|I'd like to|I need to|Please)\s+"
_POLITE = re.compile(rf"^{_POLITE_WORDS}|(?<=\. ){_POLITE_WORDS}")
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
            fn = t.get("function") if isinstance(t.get("function"), dict) else t
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
            bfcl_optional = bool(call.acceptable) and "" in (call.acceptable.get(k) or [])
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
# phrasing
# --------------------------------------------------------------------------------------


def verb_phrase(name: str, description: str) -> str:
    """'get the current weather for a city' from the description (never the identifier)."""
    text = description.strip().split("\n")[0]
    text = re.split(r"(?<=[.!?])\s", text)[0].rstrip(".!? ")
    if not text:
        words = re.sub(r"([a-z])([A-Z])", r"\1 \2", name.replace(".", " ")).replace("_", " ")
        text = f"take care of the {words.lower().strip()} request"
    text = _scrub(text, [name])
    if text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    first = text.split(" ", 1)[0].lower()
    # "Returns the weather" → "get the weather"; "Books a flight" → "book a flight"
    if first.endswith("s") and not first.endswith("ss") and len(first) > 3:
        rest = text.split(" ", 1)[1] if " " in text else ""
        base = {"returns": "get", "retrieves": "retrieve", "gets": "get"}.get(first, first[:-1])
        if first.endswith("ies"):
            base = first[:-3] + "y"
        elif first.endswith(("ches", "shes", "xes", "sses")):
            base = first[:-2]
        text = f"{base} {rest}".strip()
    return text


def lower_first(text: str) -> str:
    """Lower-case the first letter to continue a sentence (but keep "I", "I'd", acronyms)."""
    if not text or text.startswith(("I ", "I'")) or text[1:2].isupper():
        return text
    return text[0].lower() + text[1:]


def param_words(param: str) -> str:
    return re.sub(r"([a-z])([A-Z])", r"\1 \2", param).replace("_", " ").lower()


def render_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        items = [render_value(v) for v in value]
        if len(items) <= 1:
            return "".join(items)
        return ", ".join(items[:-1]) + " and " + items[-1]
    if isinstance(value, dict):
        return ", ".join(f"{param_words(str(k))} {render_value(v)}" for k, v in value.items())
    if value is None:
        return "none"
    return json.dumps(value)


def _scrub(text: str, names: list[str]) -> str:
    """Remove function identifiers from text (queries must never name the function)."""
    for name in names:
        if name and len(name) > 1:
            words = param_words(name.replace(".", "_"))
            text = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w])", words, text)
    return text


def _derived(value: Any, outputs: list[Any]) -> bool:
    """Does ``value`` come from an earlier call's output (so the user would not say it)?"""
    if value is None or isinstance(value, bool) or value == "":
        return False
    needle = value if isinstance(value, str) else json.dumps(value)
    for out in outputs:
        if out is None:
            continue
        hay = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        if isinstance(value, str) and len(value) < 3:
            continue
        if (
            needle == hay
            or (isinstance(value, str) and f'"{value}"' in hay)
            or (not isinstance(value, str) and needle in re.findall(r"-?\d+(?:\.\d+)?", hay))
        ):
            return True
    return False


def describe_call(
    call: GoldCall,
    tools: ToolIndex,
    rng: random.Random,
    *,
    prior_outputs: list[Any] = (),  # type: ignore[assignment]
    template: str | None = None,
) -> str:
    """One sentence asking for ``call``: its purpose from the description, every value given
    by the user (values from earlier outputs are referred to, not repeated)."""
    info = tools.get(call.name)
    verb = verb_phrase(call.name, info.description if info else "")
    given, implicit = [], []
    for k, v in call.arguments.items():
        (implicit if _derived(v, list(prior_outputs)) else given).append((k, v))
    parts = [f"the {param_words(k)} {render_value(v)}" for k, v in given]
    if implicit:
        parts.append(
            "the " + " and ".join(param_words(k) for k, _ in implicit) + " from that result"
        )
    if not parts:
        with_ = ""
    elif len(parts) == 1:
        with_ = f" using {parts[0]}"
    else:
        with_ = " using " + ", ".join(parts[:-1]) + " and " + parts[-1]
    tpl = template or rng.choice(_TEMPLATES)
    sentence = tpl.format(Verb=verb[:1].upper() + verb[1:], verb=verb, **{"with": with_})
    return _scrub(sentence, [call.name])


def compose_query(
    steps: list[list[GoldCall]],
    tools: ToolIndex,
    rng: random.Random,
    *,
    persona: str | None = None,
    style: str | None = None,
    prior_outputs: list[Any] = (),  # type: ignore[assignment]
) -> str:
    """A request for a whole call path: steps in order, parallel calls joined."""
    outputs = list(prior_outputs)
    sentences = []
    for s, step in enumerate(steps):
        for c, call in enumerate(step):
            sentence = describe_call(call, tools, rng, prior_outputs=outputs)
            if s > 0 and c == 0:
                joiner = rng.choice(_CONNECTORS)
                sentence = joiner.strip() + " " + lower_first(sentence)
            elif c > 0:
                joiner = rng.choice(_PARALLEL)
                sentence = joiner.strip() + " " + lower_first(sentence)
            sentences.append(sentence)
        outputs.extend(call.output for call in step)
    text = " ".join(sentences)
    opener = rng.choice(_PERSONAS.get(persona, [f"As a {persona}, "] if persona else [""]))
    if style == "terse":
        text = _POLITE.sub("", text)
        text = text[:1].upper() + text[1:]
    elif style in _STYLE_OPENERS:
        lead = rng.choice(_STYLE_OPENERS[style])
        if lead:
            opener = opener + (lower_first(lead) if opener.rstrip().endswith(",") else lead)
            text = lower_first(_POLITE.sub("", text, count=1))
    if opener and not opener.rstrip().endswith((".", "!", "?", ":", "—")):
        text = lower_first(text)
    text = (opener + text).strip()
    names = [c.name for st in steps for c in st]
    return _scrub(text, names)


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
        }.get(kind, rng.choice(_WORDS))
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
