"""Call matching with BFCL's AST semantics, and LoopTool's binary exact-multiset reward.

BFCL (Patil et al., Berkeley Function Calling Leaderboard; ``bfcl_eval/eval_checker/
ast_eval/ast_checker.py``), as FORMATS.md §3.1 describes it. :func:`match_call` is
``simple_function_checker``:

1) the name must match. BFCL renames a gold name ``.`` → ``_`` for function-calling models
   (whose tool names cannot hold a dot) and compares it as written for prompt-style models
   (whose calls are parsed from text and keep the dotted name): the ``names`` option,
   ``"underscore"`` or ``"as_written"``, chosen from the model's call format
   (:func:`name_mode`); by default (``"auto"``) a predicted name with a dot means the model
   wrote its calls as text (``as_written``), otherwise ``underscore``. The written name of a
   :class:`~trajsynth.core.task.GoldCall` is its tool's ``source_name``;
2) every parameter the doc requires must be present → ``missing_required``;
3) every parameter the model gave must be in the doc *and* in the gold → ``unexpected_param``;
4) type check against the doc type (string→str, integer→int, number/float→float,
   boolean→bool, array/tuple→list, object/dict→dict): an int is accepted (and converted) for a
   float, a float is not accepted for an integer, ``True`` is not an int; arrays check their
   elements one level deep; when the gold alternatives have another type than the doc (a
   variable name), a value of the gold's type is accepted → ``wrong_type``;
5) value check: strings are compared after :func:`standardize_string` (drop `` ,./-_*^``,
   lowercase, ``'`` → ``"``); lists element-wise in order; dicts key by key against each
   acceptable dict; lists of dicts pairwise; other values with ``in`` → ``wrong_value``;
6) a gold parameter the model left out must list ``""`` among its alternatives →
   ``missing_optional``.

:func:`match_parallel` is ``parallel_function_checker_no_order`` (counts equal; each gold call,
in order, takes the first unmatched model call that passes step 1-6), :func:`match_multiple`
the "multiple" checker (exactly one call, checked against the gold's doc), and
:func:`bfcl_check` dispatches on the category name like BFCL does, including the
relevance categories.

Deviation: for Java/JavaScript, BFCL first parses the model's Java/JS literal strings with
``java_type_converter``/``js_type_converter``; here a value must instead have the type of the
gold alternatives (mostly strings holding literals, sometimes lists) and is compared as in
step 5, so a few literal spellings BFCL accepts (``1L`` vs ``1``) count as different.

LoopTool (arXiv:2511.09148) rewards a step 1 when the predicted calls equal the gold calls as
a multiset of (name, arguments) and 0 otherwise: :func:`exact_multiset_reward`.

>>> from trajsynth.core.task import GoldCall
>>> gold = GoldCall(name="f", acceptable={"x": [1], "unit": ["cm", ""]})
>>> spec = {"type": "object", "properties": {"x": {"type": "integer"},
...         "unit": {"type": "string"}}, "required": ["x"]}
>>> bool(match_call({"name": "f", "arguments": {"x": 1}}, gold, spec))
True
>>> match_call({"name": "f", "arguments": {"x": 1.0}}, gold, spec).category
'wrong_type'
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...core.ids import canonical_json
from ...core.schema import Message, ToolCall
from ...core.task import GoldCall
from ..spec import Toolset, ToolSpec
from .schema import normalize_call

__all__ = [
    "MatchResult",
    "NameMode",
    "bfcl_check",
    "exact_multiset_reward",
    "gold_alternatives",
    "match_call",
    "match_multiple",
    "match_parallel",
    "name_mode",
    "standardize_string",
]

_PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "object": dict,
    "dict": dict,
    "any": str,
}
_STRIP = str.maketrans("", "", " ,./-_*^")


@dataclass(frozen=True)
class MatchResult:
    """Whether a prediction matches, and if not, the first reason (a category and detail)."""

    ok: bool
    category: str | None = None
    detail: str = ""

    def __bool__(self) -> bool:
        return self.ok


_OK = MatchResult(True)


def _fail(category: str, detail: str) -> MatchResult:
    return MatchResult(False, category, detail)


def standardize_string(text: str) -> str:
    """BFCL's ``standardize_string``.

    >>> standardize_string("April 1, 2024") == standardize_string("april 1 2024")
    True
    """
    return text.translate(_STRIP).lower().replace("'", '"')


def gold_alternatives(gold: GoldCall | Mapping[str, Any]) -> tuple[str, dict[str, list[Any]]]:
    """(name, {param: acceptable values}) from a GoldCall or a BFCL ``{func: {param: [..]}}``."""
    if isinstance(gold, GoldCall):
        if gold.acceptable is not None:
            return gold.name, {k: list(v) for k, v in gold.acceptable.items()}
        return gold.name, {k: [v] for k, v in gold.arguments.items()}
    ((name, params),) = gold.items()
    return name.replace(".", "_"), {k: list(v) for k, v in params.items()}


NameMode = Literal["auto", "underscore", "as_written"]


def name_mode(call_format: str) -> NameMode:
    """BFCL's name mode for a model's call format: ``"fc"`` (tool calls, as OpenAI-style
    function-calling models emit them) → ``underscore``; ``"prompt"`` (calls written as text
    and parsed) → ``as_written``.

    >>> name_mode("fc"), name_mode("prompt")
    ('underscore', 'as_written')
    """
    modes: dict[str, NameMode] = {"fc": "underscore", "prompt": "as_written"}
    try:
        return modes[call_format]
    except KeyError:
        raise ValueError(f"unknown call format {call_format!r}: use fc or prompt") from None


def _resolve_names(names: NameMode, calls: Sequence[Any]) -> NameMode:
    if names != "auto":
        return names
    dotted = any("." in normalize_call(c)[0] for c in calls)
    return "as_written" if dotted else "underscore"


def _written_name(gold: GoldCall | Mapping[str, Any], spec: Any, renamed: str) -> str:
    """The gold function's name as its source wrote it (dots kept)."""
    if not isinstance(gold, GoldCall):
        return str(next(iter(gold)))
    if isinstance(spec, ToolSpec) and spec.source_name:
        return spec.source_name
    return renamed


def _params(spec: ToolSpec | Mapping[str, Any] | None) -> dict[str, Any]:
    if spec is None:
        return {}
    if isinstance(spec, ToolSpec):
        return spec.parameters
    return dict(spec.get("parameters", spec)) if "parameters" in spec else dict(spec)


def _args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
    return raw if isinstance(raw, dict) else None


def _type_of_alternatives(alts: list[Any]) -> type | None:
    for a in alts:
        if a != "":
            return type(a)
    return None


def _type_ok(value: Any, expected: type) -> bool:
    if expected is float:
        return type(value) in (float, int)
    return type(value) is expected


def _std(value: Any) -> Any:
    return standardize_string(value) if isinstance(value, str) else value


def _dict_match(value: dict[str, Any], alt: dict[str, Any]) -> bool:
    for key, v in value.items():
        if key not in alt:
            return False
        choices = alt[key] if isinstance(alt[key], list) else [alt[key]]
        if _std(v) not in [_std(c) for c in choices]:
            return False
    for key, choices in alt.items():
        choices = choices if isinstance(choices, list) else [choices]
        if key not in value and "" not in choices:
            return False
    return True


def _value_ok(value: Any, alts: list[Any]) -> bool:
    candidates = [a for a in alts if a != ""]
    if isinstance(value, str):
        return standardize_string(value) in [
            standardize_string(a) for a in candidates if isinstance(a, str)
        ]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return any(
            isinstance(a, list)
            and len(a) == len(value)
            and all(
                isinstance(d, dict) and _dict_match(v, d) for v, d in zip(value, a, strict=True)
            )
            for a in candidates
        )
    if isinstance(value, list):
        std = [_std(v) for v in value]
        return any(isinstance(a, list) and [_std(v) for v in a] == std for a in candidates)
    if isinstance(value, dict):
        return any(isinstance(a, dict) and _dict_match(value, a) for a in candidates)
    return value in candidates


def match_call(
    call: ToolCall | Mapping[str, Any] | tuple[str, Any],
    gold: GoldCall | Mapping[str, Any],
    spec: ToolSpec | Mapping[str, Any] | None = None,
    *,
    language: str = "python",
    names: NameMode = "auto",
) -> MatchResult:
    """BFCL's ``simple_function_checker`` (steps 1-6 of the module docstring).

    ``spec`` is the tool's doc (a :class:`ToolSpec` or its ``parameters`` schema); without it
    the types are taken from the gold values. ``names``: see step 1.
    """
    name, raw = normalize_call(call)
    gold_name, gold_params = gold_alternatives(gold)
    # 1) name
    if _resolve_names(names, [call]) == "as_written":
        gold_name = _written_name(gold, spec, gold_name)
    if name != gold_name:
        return _fail("wrong_name", f"called {name!r}, expected {gold_name!r}")
    args = _args(raw)
    if args is None:
        return _fail("malformed_arguments", "arguments are not a JSON object")
    params = _params(spec)
    props: dict[str, Any] = params.get("properties") or {}
    # 2) required
    for req in params.get("required") or []:
        if req not in args:
            return _fail("missing_required", f"missing required parameter {req!r}")
    for pname, value in args.items():
        # 3) known to the doc and to the gold
        if (props and pname not in props) or pname not in gold_params:
            return _fail("unexpected_param", f"unexpected parameter {pname!r}")
        alts = gold_params[pname]
        # 4) type
        doc_type = (props.get(pname) or {}).get("type")
        expected = _PY_TYPES.get(doc_type) if isinstance(doc_type, str) else None
        gold_type = _type_of_alternatives(alts)
        if language in ("java", "javascript"):
            expected = gold_type or str  # see the deviation in the module docstring
        if expected is None:
            expected = gold_type
        elif (
            gold_type is not None
            and gold_type is not expected
            and not (expected is float and gold_type is int)
        ):
            expected = gold_type  # the "variable" escape: accept the gold's type
        if expected is not None and not _type_ok(value, expected):
            return _fail(
                "wrong_type",
                f"{pname}: expected {expected.__name__}, got {type(value).__name__} {value!r}",
            )
        if expected is float and type(value) is int:
            value = float(value)
        if expected is list and isinstance(value, list) and language == "python":
            items = (props.get(pname) or {}).get("items") or {}
            item_doc = items.get("type") if isinstance(items, dict) else None
            # a JSON Schema type may be a list (["integer", "null"]): no one type to check
            item_type = _PY_TYPES.get(item_doc) if isinstance(item_doc, str) else None
            if item_type is not None and not all(_type_ok(v, item_type) for v in value):
                return _fail("wrong_type", f"{pname}: items must be {item_type.__name__}")
        # 5) value
        if not _value_ok(value, alts):
            shown = [a for a in alts if a != ""]
            return _fail("wrong_value", f"{pname}={value!r} is not one of {shown!r}")
    # 6) omitted gold parameters must be optional
    for pname, alts in gold_params.items():
        if pname not in args and "" not in alts:
            return _fail("missing_optional", f"parameter {pname!r} was left out")
    return _OK


def _spec_lookup(tools: Toolset | Mapping[str, Any] | Sequence[Any] | None) -> dict[str, Any]:
    if tools is None:
        return {}
    if isinstance(tools, Toolset):
        return {t.name: t for t in tools.tools}
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in Toolset.shared(list(tools)).tools}


def _calls(predicted: Message | Sequence[Any] | None) -> list[Any]:
    if predicted is None:
        return []
    if isinstance(predicted, Message):
        return list(predicted.tool_calls)
    return list(predicted)


def match_parallel(
    calls: Message | Sequence[Any],
    golds: Sequence[GoldCall | Mapping[str, Any]],
    tools: Toolset | Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    language: str = "python",
    names: NameMode = "auto",
) -> MatchResult:
    """BFCL's ``parallel_function_checker_no_order``: order-insensitive greedy matching."""
    predicted = _calls(calls)
    names = _resolve_names(names, predicted)
    if len(predicted) != len(golds):
        return _fail("wrong_count", f"{len(predicted)} calls, expected {len(golds)}")
    specs = _spec_lookup(tools)
    used: set[int] = set()
    for gold in golds:
        gname, _ = gold_alternatives(gold)
        last: MatchResult | None = None
        for i, call in enumerate(predicted):
            if i in used:
                continue
            res = match_call(call, gold, specs.get(gname), language=language, names=names)
            if res:
                used.add(i)
                break
            last = res
        else:
            why = f" (closest: {last.category}: {last.detail})" if last else ""
            return _fail("no_match", f"no call matches gold {gname}{why}")
    return _OK


def match_multiple(
    calls: Message | Sequence[Any],
    golds: Sequence[GoldCall | Mapping[str, Any]],
    tools: Toolset | Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    language: str = "python",
    names: NameMode = "auto",
) -> MatchResult:
    """BFCL's "multiple" checker: as many calls as gold calls (always one), checked against the
    doc of the *gold* function."""
    predicted = _calls(calls)
    names = _resolve_names(names, predicted)
    if len(predicted) != len(golds):
        return _fail("wrong_count", f"{len(predicted)} calls, expected {len(golds)}")
    specs = _spec_lookup(tools)
    for call, gold in zip(predicted, golds, strict=True):
        gname, _ = gold_alternatives(gold)
        res = match_call(call, gold, specs.get(gname), language=language, names=names)
        if not res:
            return res
    return _OK


def bfcl_check(
    calls: Message | Sequence[Any] | None,
    golds: Sequence[GoldCall | Mapping[str, Any]],
    tools: Toolset | Mapping[str, Any] | Sequence[Any] | None,
    category: str,
    *,
    language: str | None = None,
    names: NameMode = "auto",
) -> MatchResult:
    """Dispatch on a BFCL category name as the AST checker does; ``names`` is BFCL's name
    mode (step 1), e.g. ``name_mode("prompt")`` for a prompt-style model."""
    predicted = _calls(calls)
    if language is None:
        language = (
            "javascript" if "javascript" in category else "java" if "java" in category else "python"
        )
    if "irrelevance" in category:
        return _OK if not predicted else _fail("unexpected_call", "no call was expected")
    if "relevance" in category:
        return _OK if predicted else _fail("no_call", "a call was expected")
    if "parallel" in category:
        return match_parallel(predicted, golds, tools, language=language, names=names)
    if "multiple" in category:
        return match_multiple(predicted, golds, tools, language=language, names=names)
    if len(predicted) != 1:
        return _fail("wrong_count", f"{len(predicted)} calls, expected 1")
    gname, _ = gold_alternatives(golds[0])
    spec = _spec_lookup(tools).get(gname)
    return match_call(predicted[0], golds[0], spec, language=language, names=names)


# --------------------------------------------------------------------------------------
# LoopTool
# --------------------------------------------------------------------------------------


def _normal(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _call_key(call: Any) -> str:
    if isinstance(call, GoldCall):
        return canonical_json([call.name, _normal(call.arguments)])
    name, raw = normalize_call(call)
    args = _args(raw)
    return canonical_json([name, _normal(args) if args is not None else {"<malformed>": raw}])


def exact_multiset_reward(
    predicted: Message | Sequence[Any] | str | None,
    gold: Sequence[GoldCall | Any] | str | None,
) -> float:
    """LoopTool's binary reward for one step: 1.0 when the predicted calls equal the gold calls
    as a multiset of (name, arguments), else 0.0. Text (no calls) against text is 1.0; text
    against calls is 0.0. Numbers compare by value (``1 == 1.0``).

    >>> from trajsynth.core.task import GoldCall
    >>> a, b = GoldCall(name="f", arguments={"x": 1}), GoldCall(name="g")
    >>> exact_multiset_reward([b, a], [a, b]), exact_multiset_reward([a, b, b], [a, b])
    (1.0, 0.0)
    >>> exact_multiset_reward("Done.", "Sure."), exact_multiset_reward("Done.", [a])
    (1.0, 0.0)
    """
    pred_calls = [] if isinstance(predicted, str) else _calls(predicted)
    gold_calls = [] if gold is None or isinstance(gold, str) else list(gold)
    if not pred_calls and not gold_calls:
        return 1.0
    return float(Counter(map(_call_key, pred_calls)) == Counter(map(_call_key, gold_calls)))
