"""Simulated judges: LoopTool's JGLV verdicts, APIGen's semantic check, Magnet's edge check,
and HardGen's verifier.

Each judge first works out the *true* verdict — from what the stage says it is (``truth``),
else from the truly correct calls (``reference``), else from rules (calls valid against the
tool schemas; results without errors) — and then reports it with probability ``accuracy``,
otherwise a different verdict drawn at random. Draws depend on the request seed and the
choice index, so independent votes disagree the way real judges do, which is what LoopTool's
consensus rule (≥ 2 of 3 votes) needs to be tested against.

Output formats follow the methods' prompts:

- JGLV (``looptool``): ``"RESPONSE2_INCORRECT.\\nError Analysis: … Correct Approach: …"`` (one
  of RESPONSE1_INCORRECT, RESPONSE2_INCORRECT, BOTH_CORRECT, BOTH_INCORRECT; Response 1 is
  the label, Response 2 the prediction), parsed upstream by substring as LoopTool does;
- single-response filter (``looptool_single``): ``"CORRECT."`` / ``"INCORRECT.\\nError
  Analysis: …"``;
- APIGen semantic check: JSON ``{"thought": …, "passes": "yes"|"no"}``;
- Magnet edge: JSON ``{"related": "yes"|"no", "reason": …}``;
- HardGen verifier: JSON ``{"correct": bool, "hint": …}``; the hint names the kind and place
  of the first discrepancy and never a gold value.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...core.ids import canonical_json
from ...core.task import GoldCall
from ..parsing import parse_output
from .actor import SimOutput
from .contracts import VERDICT_STATUS, VERDICTS, JudgeMeta, SimConfig, VerifierMeta
from .text import ToolIndex, param_words

__all__ = ["VERDICTS", "judge", "multiset_equal", "verify"]

_TRUTH_ALIASES = {
    "label_wrong": "RESPONSE1_INCORRECT",
    "pred_wrong": "RESPONSE2_INCORRECT",
    "prediction_wrong": "RESPONSE2_INCORRECT",
    **{status: verdict for verdict, status in VERDICT_STATUS.items()},
}
_ERROR_WORDS = re.compile(r"\b(error|exception|failed|failure|invalid|not found)\b", re.I)
_STOP = {"the", "a", "an", "of", "for", "to", "and", "or", "in", "on", "by", "with", "id", "get"}

Calls = list[tuple[str, Any]]  # (name, arguments dict, or None when not JSON)


def as_calls(value: Any) -> Calls | str | None:
    """Calls from GoldCall objects or model text; plain text stays text."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = parse_output(value)
        if not parsed.calls and parsed.errors:
            # calls that could not be read count as calls with unreadable arguments
            return [("", None) for _ in parsed.errors]
        if not parsed.calls:
            return (parsed.content or "").strip()
        return [(c.name, c.parsed_arguments()) for c in parsed.calls]
    out: Calls = []
    for c in value:
        if isinstance(c, GoldCall):
            out.append((c.name, c.arguments))
        elif isinstance(c, dict):
            out.append((str(c.get("name")), c.get("arguments")))
    return out


def multiset_equal(a: Calls | str | None, b: Calls | str | None) -> bool:
    """LoopTool's comparison: same calls regardless of order (text: both text)."""
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return isinstance(a, str) and isinstance(b, str)
    return Counter(canonical_json(x) for x in a) == Counter(canonical_json(x) for x in b)


def _valid(x: Calls | str | None, tools: ToolIndex) -> bool:
    if x is None:
        return False
    if isinstance(x, str):
        return True
    if not x:
        return False
    if not tools.names:
        return all(isinstance(args, dict) for _, args in x)
    return all(tools.valid(name, args) for name, args in x)


def _difference(bad: Calls | str | None, good: Calls | str | None, who: str) -> str:
    """One sentence on why ``bad`` is wrong (compared with ``good`` when known)."""
    if bad is None:
        return f"{who} is empty."
    if isinstance(bad, str):
        return f"{who} answers in text where a tool call is needed."
    if isinstance(good, str):
        return f"{who} calls a tool although the request needs no tool."
    if any(args is None for _, args in bad):
        return f"{who} has arguments that are not valid JSON."
    if good is None:
        return f"{who} does not match the tool schemas (unknown function or wrong arguments)."
    if len(bad) != len(good):
        return f"{who} makes {len(bad)} call(s) where {len(good)} are needed."
    good_names = Counter(n for n, _ in good)
    for name, _ in bad:
        if good_names[name] == 0:
            return f"{who} calls {name}, which does not fit the request."
    for (name, args), (_, gargs) in zip(sorted(bad, key=str), sorted(good, key=str), strict=False):
        if isinstance(args, dict) and isinstance(gargs, dict):
            for k in gargs:
                if k not in args:
                    return f"{who} omits the argument {k} of {name}."
            for k in args:
                if k in gargs and args[k] != gargs[k]:
                    return f"{who} gives a wrong value for {k} of {name}."
    return f"{who} differs from what the request asks."


def _pick(truth: str, options: tuple[str, ...], accuracy: float, r: random.Random) -> str:
    if r.random() < accuracy:
        return truth
    return r.choice([o for o in options if o != truth])


def judge(
    meta: JudgeMeta, tools_list: list | None, cfg: SimConfig, rng: Callable[..., random.Random]
) -> SimOutput:
    """The judge's verdict text for ``meta.mode`` (see the module docstring)."""
    tools = ToolIndex(meta.tools if meta.tools is not None else tools_list)
    accuracy = meta.accuracy if meta.accuracy is not None else cfg.judge_accuracy
    r = rng("judge")
    if meta.mode == "looptool":
        return _looptool(meta, tools, accuracy, r)
    if meta.mode == "looptool_single":
        return _single(meta, tools, accuracy, r)
    if meta.mode == "apigen":
        return _apigen(meta, tools, accuracy, r)
    if meta.mode == "rubric":
        return _rubric(meta, tools, accuracy, r)
    return _edge(meta, accuracy, r)


def _looptool(meta: JudgeMeta, tools: ToolIndex, accuracy: float, r: random.Random) -> SimOutput:
    label, pred = as_calls(meta.label), as_calls(meta.prediction)
    ref = as_calls(meta.reference)
    if isinstance(meta.truth, str):
        truth = _TRUTH_ALIASES.get(meta.truth.lower(), meta.truth.upper())
        if truth not in VERDICTS:
            truth = "BOTH_CORRECT"
    else:
        if ref is not None:
            l_ok, p_ok = multiset_equal(label, ref), multiset_equal(pred, ref)
        else:
            l_ok, p_ok = _valid(label, tools), _valid(pred, tools)
            if l_ok and p_ok and not multiset_equal(label, pred):
                p_ok = False  # both well-formed and different: trust the label
        truth = {
            (True, True): "BOTH_CORRECT",
            (False, True): "RESPONSE1_INCORRECT",
            (True, False): "RESPONSE2_INCORRECT",
            (False, False): "BOTH_INCORRECT",
        }[(l_ok, p_ok)]
    verdict = _pick(truth, VERDICTS, accuracy, r)
    good = ref if ref is not None else None
    if verdict == "RESPONSE1_INCORRECT":
        analysis = _difference(label, good if good is not None else pred, "Response 1")
        approach = "Follow Response 2's calls, which match the request."
    elif verdict == "RESPONSE2_INCORRECT":
        analysis = _difference(pred, good if good is not None else label, "Response 2")
        approach = "Use the calls of Response 1, which match the request."
    elif verdict == "BOTH_INCORRECT":
        analysis = (
            _difference(pred, good, "Response 2") + " " + _difference(label, good, "Response 1")
        )
        approach = "Call the tools the request needs with the values the user gave."
    else:
        analysis = "Both responses satisfy the request."
        approach = "Either response is acceptable."
    return SimOutput(
        content=f"{verdict}.\nError Analysis: {analysis} Correct Approach: {approach}",
        uncertain=verdict != truth,
    )


def _single(meta: JudgeMeta, tools: ToolIndex, accuracy: float, r: random.Random) -> SimOutput:
    resp, ref = as_calls(meta.response), as_calls(meta.reference)
    if isinstance(meta.truth, (bool, str)):
        ok = meta.truth is True or (isinstance(meta.truth, str) and meta.truth.upper() == "CORRECT")
    else:
        ok = multiset_equal(resp, ref) if ref is not None else _valid(resp, tools)
    truth = "CORRECT" if ok else "INCORRECT"
    verdict = _pick(truth, ("CORRECT", "INCORRECT"), accuracy, r)
    if verdict == "CORRECT":
        return SimOutput(content="CORRECT.", uncertain=verdict != truth)
    analysis = _difference(resp, ref, "The response")
    return SimOutput(
        content=f"INCORRECT.\nError Analysis: {analysis} Correct Approach: Call the tools the "
        "request needs with the values the user gave.",
        uncertain=verdict != truth,
    )


def _apigen(meta: JudgeMeta, tools: ToolIndex, accuracy: float, r: random.Random) -> SimOutput:
    calls, ref = as_calls(meta.calls), as_calls(meta.reference)
    reasons = []
    if isinstance(meta.truth, (bool, str)):
        ok = meta.truth is True or (
            isinstance(meta.truth, str) and meta.truth.lower() in ("yes", "pass", "true")
        )
        if not ok:
            reasons.append("the calls do not fulfil the query")
    else:
        ok = True
        if not _valid(calls, tools):
            ok = False
            reasons.append("the calls do not match the available functions and their arguments")
        for res in meta.results or []:
            text = res if isinstance(res, str) else json.dumps(res)
            if _ERROR_WORDS.search(text) or (isinstance(res, dict) and "error" in res):
                ok = False
                reasons.append("an execution result reports an error")
                break
        if ref is not None and not multiset_equal(calls, ref):
            ok = False
            reasons.append("the calls do not match the user's intent")
    passes = _pick("yes" if ok else "no", ("yes", "no"), accuracy, r)
    if passes == "yes":
        thought = "The function calls align with the query and the results are relevant."
    else:
        thought = "The data fails the check: " + ("; ".join(reasons) or "the calls look off") + "."
    return SimOutput(
        content=json.dumps({"thought": thought, "passes": passes}),
        uncertain=passes != ("yes" if ok else "no"),
    )


def _rubric(meta: JudgeMeta, tools: ToolIndex, accuracy: float, r: random.Random) -> SimOutput:
    """A judge reward's rubric scores (JudgeMeta, ``rubric``)."""
    calls = as_calls(meta.calls) if meta.calls is not None else []
    calls = calls if isinstance(calls, list) else []
    ref = as_calls(meta.reference)
    ref = ref if isinstance(ref, list) else None
    answer = (meta.answer or "").strip()
    if ref is not None:
        left = Counter(canonical_json(c) for c in calls)
        hit = 0
        for c in ref:
            key = canonical_json(c)
            if left[key] > 0:
                left[key] -= 1
                hit += 1
        share = hit / max(len(ref), len(calls)) if (ref or calls) else 1.0
        complete = float(hit == len(ref) == len(calls) and bool(answer))
    else:
        share = 1.0 if _valid(calls, tools) or not calls else 0.0
        complete = float(bool(answer))
    structure = float(meta.format_errors == 0 and (not calls or _valid(calls, tools)))
    outputs = meta.required_outputs or []
    folded = answer.casefold()
    cited = (
        sum(1 for o in outputs if str(o).casefold() in folded) / len(outputs)
        if outputs
        else float(bool(answer))
    )
    truth = {"completion": complete, "accuracy": share, "structure": structure, "citations": cited}
    scores = {}
    for d in meta.dimensions or list(truth):
        true = truth.get(d, complete)
        scores[d] = round(true if r.random() < accuracy else r.randint(0, 10) / 10, 4)
    return SimOutput(
        content=json.dumps(scores), uncertain=scores != {d: truth.get(d, complete) for d in scores}
    )


def _tool_words(tool: dict[str, Any] | None, *, params: bool) -> set[str]:
    if not tool:
        return set()
    fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
    words: set[str] = set()
    if params:
        for p in (fn.get("parameters") or {}).get("properties") or {}:
            words |= set(param_words(p).split())
    else:
        text = " ".join(
            str(fn.get(k) or "") for k in ("name", "description", "returns", "response")
        )
        words |= set(re.findall(r"[a-z]+", param_words(text.replace(".", " "))))
    return {w.rstrip("s") for w in words if w not in _STOP and len(w) > 2}


def _edge(meta: JudgeMeta, accuracy: float, r: random.Random) -> SimOutput:
    if isinstance(meta.truth, (bool, str)):
        related = meta.truth is True or (
            isinstance(meta.truth, str) and meta.truth.lower() == "yes"
        )
        shared: set[str] = set()
    else:
        shared = _tool_words(meta.source_tool, params=False) & _tool_words(
            meta.target_tool, params=True
        )
        related = bool(shared)
    answer = _pick("yes" if related else "no", ("yes", "no"), accuracy, r)
    reason = (
        f"The source's output provides the {', '.join(sorted(shared))} the target needs."
        if answer == "yes" and shared
        else "The source's output does not feed any input of the target."
        if answer == "no"
        else "The target can use what the source returns."
    )
    return SimOutput(content=json.dumps({"related": answer, "reason": reason}))


def _in_order(cand: Calls | str | None, steps: list[list[GoldCall]]) -> bool:
    """Same calls, steps in the gold order (calls within a step in any order)."""
    if not isinstance(cand, list) or len(cand) != sum(len(s) for s in steps):
        return False
    i = 0
    for step in steps:
        if not multiset_equal(cand[i : i + len(step)], [(c.name, c.arguments) for c in step]):
            return False
        i += len(step)
    return True


def verify(meta: VerifierMeta, cfg: SimConfig, rng: Callable[..., random.Random]) -> SimOutput:
    """HardGen's verifier: correct (same calls, gold step order) or not, and a hint that
    reveals no gold value."""
    gold = [(c.name, c.arguments) for step in meta.gold for c in step]
    cand = as_calls(meta.candidate)
    if _in_order(cand, meta.gold):
        return SimOutput(content=json.dumps({"correct": True, "hint": ""}))
    if isinstance(cand, str) or cand is None:
        hint = "The task needs tool calls; solve it by calling the tools step by step."
        return SimOutput(content=json.dumps({"correct": False, "hint": hint}))
    hint = "Recheck the calls against every detail of the request."
    gold_names = [n for n, _ in gold]
    for i in range(max(len(cand), len(gold))):
        if i >= len(cand):
            hint = f"The attempt stops after {len(cand)} call(s); the task needs more steps."
            break
        if i >= len(gold):
            hint = "There are more calls than the task needs; remove the extra ones."
            break
        (name, args), (gname, gargs) = cand[i], gold[i]
        if args is None:
            hint = f"The arguments of call {i + 1} are not valid JSON."
            break
        if name != gname:
            if name in gold_names[i + 1 :]:
                hint = (
                    f"Call {i + 1} comes too early: something it needs must be obtained by "
                    "another call first."
                )
            else:
                hint = f"Call {i + 1} uses a function that does not fit this step."
            break
        missing = [k for k in gargs if k not in args]
        if missing:
            hint = (
                f"Call {i + 1} leaves out the argument '{missing[0]}', which the request specifies."
            )
            break
        extra = [k for k in args if k not in gargs]
        if extra:
            hint = f"Call {i + 1} passes '{extra[0]}', which the request does not ask for."
            break
        wrong = [k for k in gargs if args.get(k) != gargs[k]]
        if wrong:
            hint = f"Check the value of '{wrong[0]}' in call {i + 1} against what the request says."
            break
    return SimOutput(content=json.dumps({"correct": False, "hint": hint}))
