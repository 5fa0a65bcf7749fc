"""Import BFCL function docs (Berkeley Function Calling Leaderboard v4, Patil et al.,
gorilla ``berkeley-function-call-leaderboard/bfcl_eval/data``), following FORMATS.md §2.

Conversion of one function doc (BFCL's own ``model_handler/utils.py::convert_to_tool``):

1) name: ``.`` → ``_`` (OpenAI allows ``^[a-zA-Z0-9_-]{1,64}$``); the dotted original is kept
   in ``source_name`` so the renaming can be undone (``Toolset.by_source_name``);
2) types: ``dict`` → ``object`` and every property type through :data:`GORILLA_TO_OPENAPI`
   (float → number, tuple → array, any → string, Java/JS types ...), recursively in
   ``properties`` and ``items``; an unknown type fails that one function;
3) ``required``, ``default``, ``enum`` and other JSON Schema keys are kept; BFCL's
   non-standard ``optional`` key is dropped (``required`` already says it);
4) the multi-turn docs' ``response`` schema is converted the same way and kept as the spec's
   response schema; Java/JavaScript docs record ``extra["language"]`` (their values are
   strings holding Java/JS literals, which the call matcher needs to know).

Inputs: a question file (``BFCL_v4_*.json``, JSON Lines whose records carry ``function``),
a func-doc file (``multi_turn_func_doc/*.json``), a multi-turn question file (its tools are
the docs of its ``involved_classes``, read from the sibling ``multi_turn_func_doc``), or a
folder of any of these. A record of none of these shapes is listed as a failure.

Beyond the toolset, :func:`read_entries` reads whole test entries (messages per turn, the
entry's own tools, and gold calls from ``possible_answer``) as :class:`BfclEntry`, turning
possible answers into :class:`~trajsynth.core.GoldCall` with BFCL's acceptable-value lists and
multi-turn call strings (``cd(folder='document')``) into calls with named arguments.

:func:`bfcl_data_dir` finds the benchmark's data (the ``bfcl-eval`` wheel's ``data/``) and
:func:`single_turn_index` lists every single-turn function name and question: the benchmark
itself, which must never enter training data (``EnvConfig.decontaminate``, the
``decontaminate`` stage, ``trajsynth.train.bfcl.contamination``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...core.errors import InputNotFoundError, SpecError
from ...core.task import GoldCall
from ..spec import Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, iter_json_records, require_path

__all__ = [
    "CLASS_TO_FILE",
    "GORILLA_TO_OPENAPI",
    "INSTALL_HINT",
    "BfclEntry",
    "SingleTurnIndex",
    "bfcl_data_dir",
    "convert_function",
    "gold_from_possible_answer",
    "import_bfcl",
    "normal_text",
    "parse_call_string",
    "read_entries",
    "single_turn_index",
]

#: BFCL's type table (``GORILLA_TO_OPENAPI`` in bfcl_eval/constants), plus the few spellings
#: seen in the data that it folds in elsewhere (Boolean, int, Integer, Float, Long).
GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "int": "integer",
    "Integer": "integer",
    "Long": "integer",
    "double": "number",
    "Float": "number",
    "Double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
    "Boolean": "boolean",
}

#: involved class → func-doc file (bfcl_eval/constants/executable_backend_config.py)
CLASS_TO_FILE = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
    "WebSearchAPI": "web_search.json",
    "MemoryAPI_kv": "memory_kv.json",
    "MemoryAPI_vector": "memory_vector.json",
    "MemoryAPI_rec_sum": "memory_rec_sum.json",
}

FUNC_DOC_DIR = "multi_turn_func_doc"
ANSWER_DIR = "possible_answer"
#: keys BFCL adds that are not JSON Schema (dropped; `required` carries the information)
_NON_SCHEMA_KEYS = {"optional"}


def language_of(category: str) -> str:
    """python, java or javascript, from a file or category name."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return "python"


def _cast_schema(schema: Any, where: str) -> dict[str, Any]:
    """Step 2: a BFCL parameter schema → JSON Schema, recursively."""
    if not isinstance(schema, dict):
        raise ConversionError(f"{where}: schema must be an object, got {schema!r}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _NON_SCHEMA_KEYS:
            continue
        if key == "type":
            if not isinstance(value, str) or value not in GORILLA_TO_OPENAPI:
                raise ConversionError(f"{where}: unknown parameter type {value!r}")
            out["type"] = GORILLA_TO_OPENAPI[value]
        elif key == "properties":
            if not isinstance(value, dict):
                raise ConversionError(f"{where}: properties must be an object")
            out["properties"] = {n: _cast_schema(p, f"{where}.{n}") for n, p in value.items()}
        elif key == "items" and isinstance(value, list):  # a tuple: draft-4 items array
            out["prefixItems"] = [_cast_schema(v, f"{where}[{i}]") for i, v in enumerate(value)]
        elif key == "items":
            out["items"] = _cast_schema(value, f"{where}[]")
        elif key == "required" and not isinstance(value, list):
            continue  # a stray boolean `required` inside a property
        else:
            out[key] = value
    return out


def convert_function(fn: dict[str, Any], *, language: str = "python", source: str = "") -> ToolSpec:
    """Steps 1-4 for one BFCL function doc."""
    name = fn["name"]
    if not isinstance(name, str) or not name:
        raise ConversionError("function has no name")
    params = _cast_schema(fn.get("parameters") or {"type": "dict", "properties": {}}, name)
    params["type"] = "object"
    params.setdefault("properties", {})
    response = _cast_schema(fn["response"], f"{name}->response") if "response" in fn else None
    new_name = name.replace(".", "_")
    return ToolSpec(
        name=new_name,
        description=str(fn.get("description") or ""),
        parameters=params,
        response=response,
        source_name=name if new_name != name else None,
        source=source,
        extra={} if language == "python" else {"language": language},
    )


# --------------------------------------------------------------------------------------
# toolset import
# --------------------------------------------------------------------------------------


def _func_doc_dir(file: Path) -> Path | None:
    for cand in (file.parent / FUNC_DOC_DIR, file.parent.parent / FUNC_DOC_DIR):
        if cand.is_dir():
            return cand
    return None


def _involved_docs(file: Path, classes: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(locator, doc) for the func docs of ``classes`` (multi-turn records)."""
    doc_dir = _func_doc_dir(file)
    if doc_dir is None:
        raise ConversionError(f"{FUNC_DOC_DIR}/ not found next to {file.name}")
    out = []
    for cls in classes:
        fname = CLASS_TO_FILE.get(cls)
        if cls == "MemoryAPI":
            raise ConversionError(
                "BFCL picks the memory backend (kv, vector, rec_sum) at run time; import "
                f"{FUNC_DOC_DIR}/memory_*.json directly"
            )
        if fname is None or not (doc_dir / fname).is_file():
            raise ConversionError(f"no func-doc file for involved class {cls!r}")
        for n, doc in iter_json_records(doc_dir / fname):
            if isinstance(doc, dict):
                out.append((f"{FUNC_DOC_DIR}/{fname}:{n}", doc))
    return out


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = [
        p
        for p in sorted(path.rglob("*.json"))
        if ANSWER_DIR not in p.parts and "format_sensitivity" not in p.name
    ]
    if not files:
        raise InputNotFoundError(f"{path}: no BFCL .json files")
    return files


def import_bfcl(src: str | Path) -> Toolset:
    """Import every distinct function of BFCL question or func-doc files."""
    path = require_path(src)
    builder = ToolsetBuilder(name=path.stem, format="bfcl", source=path)
    for file in _files(path):
        language = language_of(file.name)
        seen_classes: set[str] = set()
        for n, record in iter_json_records(file):
            builder.records += 1
            locator = f"{file.name}:{n}"
            if isinstance(record, ConversionError):
                builder.fail(locator, str(record), locator)
                continue
            if not isinstance(record, dict):
                builder.fail(locator, "record is not a JSON object", locator)
                continue
            if isinstance(record.get("function"), list):
                fns = record["function"]
                functions = [(f"{locator}#{record.get('id', '')}", f) for f in fns]
            elif "parameters" in record and "name" in record:
                functions = [(locator, record)]
            elif record.get("involved_classes") and "question" in record:
                new = [c for c in record["involved_classes"] if c not in seen_classes]
                seen_classes.update(new)
                try:
                    functions = _involved_docs(file, new)
                except ConversionError as exc:
                    builder.fail(str(record.get("id", locator)), str(exc), locator)
                    continue
            else:
                keys = ", ".join(sorted(map(str, record))[:8])
                builder.fail(
                    str(record.get("id", locator)),
                    "not a BFCL record (no 'function' list, no 'name' and 'parameters', no "
                    f"'involved_classes'; keys: {keys}); an OpenAI tool? use --format openai",
                    locator,
                )
                continue
            for loc, fn in functions:
                name = fn.get("name", loc) if isinstance(fn, dict) else loc
                builder.add(
                    str(name),
                    partial(convert_function, fn, language=language, source=loc),
                    source=loc,
                )
    return builder.build()


# --------------------------------------------------------------------------------------
# entries: questions + possible answers
# --------------------------------------------------------------------------------------


class BfclEntry(BaseModel):
    """One BFCL test entry, converted: its turns, its tools and its gold calls."""

    model_config = ConfigDict(extra="forbid")

    id: str
    category: str = Field(description="simple_python, parallel, live_multiple, multi_turn_base …")
    language: str = "python"
    turns: list[list[dict[str, Any]]] = Field(
        default_factory=list, description="Messages per turn ({role, content})."
    )
    tools: Toolset = Field(default_factory=Toolset)
    gold: list[list[GoldCall]] | None = Field(
        default=None,
        description="Gold calls per turn (single-turn: one turn whose calls may be parallel); "
        "None when the category has no possible answer.",
    )
    involved_classes: list[str] = Field(default_factory=list)
    initial_config: dict[str, Any] = Field(default_factory=dict)
    missed_function: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = Field(
        default=None,
        description="Why the entry's functions could not be converted (then it "
        "has no tools and no gold: an evaluator counts it, rather than silently skip it).",
    )


def _concrete(value: Any) -> Any:
    """An acceptable dict holds lists of alternatives per key: take the first real one."""
    if isinstance(value, dict):
        out = {}
        for k, alts in value.items():
            options = [a for a in alts if a != ""] if isinstance(alts, list) else [alts]
            if options:
                out[k] = _concrete(options[0])
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_concrete(v) for v in value]
    return value


def gold_from_possible_answer(
    ground_truth: list[dict[str, Any]], tools: Toolset | None = None
) -> list[GoldCall]:
    """A single-turn possible answer → gold calls (FORMATS.md §2 step 5).

    ``arguments`` takes, per parameter, the first alternative that is not ``""`` (a parameter
    whose only alternative is ``""`` is left out; with ``tools``, so is an optional parameter
    the function's doc does not declare, which a few answers list, e.g. parallel_multiple_12's
    ``permeability``); ``acceptable`` keeps every alternative, so the call matcher applies
    BFCL's semantics.

    >>> g = gold_from_possible_answer([{"math.hypot": {"x": [4], "y": [5], "z": ["", 0]}}])
    >>> g[0].name, g[0].arguments, g[0].acceptable["z"]
    ('math_hypot', {'x': 4, 'y': 5, 'z': 0}, ['', 0])
    """
    calls = []
    for item in ground_truth:
        if not isinstance(item, dict) or len(item) != 1:
            raise SpecError(f"a possible answer must map one function to its parameters: {item!r}")
        ((fname, params),) = item.items()
        spec = tools.get(fname.replace(".", "_")) if tools is not None else None
        args = {}
        for pname, alts in params.items():
            chosen = [a for a in alts if a != ""]
            undeclared = spec is not None and pname not in spec.properties()
            if chosen and not (undeclared and "" in alts):
                args[pname] = _concrete(chosen[0])
        calls.append(
            GoldCall(name=fname.replace(".", "_"), arguments=args, acceptable=dict(params))
        )
    return calls


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        raise SpecError(f"argument {ast.unparse(node)!r} is not a literal") from exc


def parse_call_string(text: str, tools: Toolset | None = None) -> GoldCall:
    """A multi-turn gold call string → a gold call with named arguments.

    Positional arguments are named in the order of the tool's ``properties`` (as BFCL's func
    docs list them), so ``tools`` is needed when there are any.

    >>> parse_call_string("mv(source='a.txt', destination='tmp')").arguments
    {'source': 'a.txt', 'destination': 'tmp'}
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise SpecError(f"gold call {text!r} is not Python syntax") from exc
    if not isinstance(node, ast.Call):
        raise SpecError(f"gold call {text!r} is not a call")
    name = ast.unparse(node.func).replace(".", "_")
    args: dict[str, Any] = {}
    if node.args:
        spec = tools.get(name) if tools is not None else None
        if spec is None:
            raise SpecError(f"gold call {text!r} has positional arguments but no doc for {name!r}")
        order = list(spec.properties())
        if len(node.args) > len(order):
            raise SpecError(f"gold call {text!r} has more positional arguments than {name} takes")
        for pname, arg in zip(order, node.args, strict=False):
            args[pname] = _literal(arg)
    for kw in node.keywords:
        if kw.arg is None:
            raise SpecError(f"gold call {text!r} uses **kwargs")
        args[kw.arg] = _literal(kw.value)
    return GoldCall(name=name, arguments=args)


def _answers(file: Path, answers: Path | None) -> dict[str, Any]:
    cand = answers or file.parent / ANSWER_DIR / file.name
    if not cand.is_file():
        return {}
    return {
        r["id"]: r["ground_truth"]
        for _, r in iter_json_records(cand)
        if isinstance(r, dict) and "id" in r
    }


def read_entries(path: str | Path, *, answers: str | Path | None = None) -> Iterator[BfclEntry]:
    """Every entry of one BFCL question file, with its tools and (when there is a
    ``possible_answer`` file beside it) its gold calls. An entry whose functions cannot be
    converted is still yielded, with ``error`` set (for evaluation, a silent skip would bias
    scores); a line that is not JSON raises :class:`SpecError`.
    """
    file = require_path(path)
    category = file.stem.removeprefix("BFCL_v4_").removeprefix("BFCL_v3_")
    language = language_of(category)
    gold_by_id = _answers(file, Path(answers) if answers else None)
    doc_cache: dict[str, list[ToolSpec]] = {}
    for n, record in iter_json_records(file):
        if isinstance(record, ConversionError) or not isinstance(record, dict):
            raise SpecError(f"{file.name}:{n}: not a JSON object")
        rid = str(record.get("id", n))
        try:
            if "function" in record:
                specs = [
                    convert_function(f, language=language, source=f"{file.name}#{rid}")
                    for f in record["function"]
                ]
            else:
                specs = []
                for cls in record.get("involved_classes", []):
                    if cls not in doc_cache:
                        docs = _involved_docs(file, [cls])
                        doc_cache[cls] = [convert_function(d, source=loc) for loc, d in docs]
                    specs += doc_cache[cls]
        except ConversionError as exc:
            yield BfclEntry(id=rid, category=category, language=language,
                            turns=record.get("question") or [], error=str(exc))  # fmt: skip
            continue
        tools = Toolset(name=rid, tools=list({s.name: s for s in specs}.values()), format="bfcl")
        raw_gold = gold_by_id.get(rid)
        gold: list[list[GoldCall]] | None = None
        if raw_gold is not None and category.startswith("multi_turn"):
            gold = [[parse_call_string(c, tools) for c in turn] for turn in raw_gold]
        elif raw_gold is not None and raw_gold and isinstance(raw_gold[0], dict):
            gold = [gold_from_possible_answer(raw_gold, tools)]
        yield BfclEntry(
            id=rid,
            category=category,
            language=language,
            turns=record.get("question") or [],
            tools=tools,
            gold=gold,
            involved_classes=record.get("involved_classes", []),
            initial_config=record.get("initial_config") or {},
            missed_function=record.get("missed_function") or {},
        )


# --------------------------------------------------------------------------------------
# the benchmark's own data: where it is, and what of it must never enter training data
# --------------------------------------------------------------------------------------

WHEEL = "bfcl_eval"
INSTALL_HINT = "make install (or: pip install --no-deps bfcl-eval), or pass --data-dir"


def bfcl_data_dir(data_dir: str | Path | None = None) -> Path:
    """``data_dir`` when given, else the ``data/`` folder of the installed ``bfcl-eval`` wheel
    (found without importing it: its own dependencies are not installed)."""
    if data_dir is not None:
        path = Path(data_dir)
        if not path.is_dir():
            raise InputNotFoundError(f"BFCL data folder {path} does not exist")
        return path
    try:
        spec = importlib.util.find_spec(WHEEL)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "data"
        if path.is_dir():
            return path
    raise InputNotFoundError("the bfcl-eval wheel is not installed", hint=INSTALL_HINT)


_WORD = re.compile(r"[a-z0-9]+")


def normal_text(text: str) -> str:
    """Lower case, words only: how questions are compared (case and punctuation aside)."""
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class SingleTurnIndex:
    """Every single-turn BFCL function name (as written and in function-calling form) and
    question text (normalized: lower case, words only)."""

    names: frozenset[str]
    questions: frozenset[str]


def single_turn_index(data_dir: str | Path | None = None) -> SingleTurnIndex:
    """The names and questions of every single-turn file of the BFCL data (all categories
    but multi-turn, memory, web search and format sensitivity)."""
    data = bfcl_data_dir(data_dir)
    names: set[str] = set()
    questions: set[str] = set()
    for file in sorted(data.glob("BFCL_v4_*.json")):
        cat = file.stem.removeprefix("BFCL_v4_")
        if cat.startswith(("multi_turn", "memory", "web_search", "format_sensitivity")):
            continue
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            for fn in record.get("function") or []:
                name = str(fn.get("name", ""))
                names.update({name, name.replace(".", "_")})
            for turn in record.get("question") or []:
                for m in turn:
                    if m.get("role") == "user" and m.get("content"):
                        q = normal_text(str(m["content"]))
                        if len(q) >= 20:  # "hi", "yes": not a question of the benchmark's
                            questions.add(q)
    names.discard("")
    return SingleTurnIndex(frozenset(names), frozenset(questions))
