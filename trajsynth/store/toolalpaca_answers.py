"""ToolAlpaca's evaluation instructions and golden answers as first-decision rows (Tang et al.
2023, "ToolAlpaca: Generalized Tool Learning for Language Models with 3000 Simulated Cases",
arXiv:2306.05301; ``data/eval_real.json``, ``data/eval_simulated.json``).

Each record is one API with ``Instructions`` (requests written for it) and ``Golden_Answers``
(per instruction, the actions that answer it: ``{"Action": function, "Action_Input": JSON
text}``). The answers hold no tool results, and later actions refer to earlier results
(``${animeId from searchAnime}``), so only the first decision is certain: the calls to make
before any result is seen. :func:`toolalpaca_answers` turns each instruction into one row:

1) the API's functions come in as OpenAI tools by the name the answers use (the CLI converts
   the records with the toolset importer ``envs.importers.toolalpaca``); an instruction whose
   API has none is passed over (``unknown_api``), as is one whose first action names a
   function the API lacks (``unknown_function``), whose input is not a JSON object
   (``bad_input``) or refers to a result there is none of yet (``refers_to_result``);
2) ``messages``: the instruction as the user message and one assistant message with the first
   decision: the first action, and with it the actions right after it that call the same
   function with inputs that refer to no earlier result (several calls in one turn, as the
   answer makes them one after another with nothing between them to wait for);
3) ``tools``: every function of the API (the offered list, as ToolAlpaca offers it);
4) ``ground_truth``: one tool turn whose one step is that decision; the later actions are
   kept as written in its ``extra["later_actions"]`` (their references cannot be resolved
   without the results);
5) outcome: ``success`` is null: the row stops at the first decision, nothing was run
   (``extra["first_decision"]`` says so; ``single_turn`` and SFT read it as it is);
6) unstated optional arguments are dropped (``unstated_optional``, counted per argument): the
   answers fill optional parameters the instruction never states (``"page": 1``, a default),
   and a student that learns to invent them is scored wrong for it; an argument stays when its
   parameter is required or undeclared, or the instruction states its value in one of its
   surface forms (``core.surface``: "March 5, 2024" for ``"2024-03-05"``, "three" for ``3``;
   comma-separated text item by item, ``"true"`` as a boolean, a code by the label the
   parameter's description gives it: "Fahrenheit" for ``"f"``); the assistant's calls and the
   ground truth lose the same arguments;
7) provenance: ``method`` ``import:toolalpaca``, ``domain`` ``toolalpaca``, ``id`` a hash of
   (file name, API, instruction index), ``created_at`` the file's modification time.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ..core.errors import DataError
from ..core.ids import stable_id
from ..core.schema import Message, ToolCall, Trajectory
from ..core.surface import stated
from ..core.task import GoldCall, GoldTurn, GroundTruth
from .importers import _load_json, source_files

__all__ = ["toolalpaca_answers", "toolalpaca_files"]


def toolalpaca_files(src: str | Path) -> list[Path]:
    """The ToolAlpaca JSON files in ``src`` (a file, or a folder of ``*.json``)."""
    return source_files(src, "*.json", "ToolAlpaca JSON files")


def _input(action: Any) -> dict[str, Any] | None:
    raw = action.get("Action_Input") if isinstance(action, dict) else None
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _first_decision(actions: list[Any]) -> int:
    """Step 2: how many leading actions form the first decision."""
    first = actions[0].get("Action")
    n = 1
    while n < len(actions):
        nxt = actions[n]
        raw = nxt.get("Action_Input") if isinstance(nxt, dict) else None
        if not isinstance(nxt, dict) or nxt.get("Action") != first or not isinstance(raw, str):
            break
        if "${" in raw or _input(nxt) is None:
            break
        n += 1
    return n


def _states(text: str, value: Any, param: str, spec: dict[str, Any]) -> bool:
    """Whether ``text`` states ``value`` (step 6): in a surface form, item by item when it is
    comma-separated text (``"USD,EUR"``), as a boolean when it is ``"true"``/``"false"``, or by
    the label the parameter's description gives a code (``"f: Fahrenheit"``, ``"L -> low"``)."""
    if stated(value, text, param):
        return True
    if not isinstance(value, str | int) or isinstance(value, bool) or not str(value).strip():
        return False
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return stated(value.lower() == "true", text, param)
    if isinstance(value, str) and "," in value:
        return all(stated(v.strip(), text, param) for v in value.split(","))
    code = re.escape(str(value))
    label = re.search(rf"(?<!\w){code}\s*(?::|->|=)\s*([^;,)\n]+)", str(spec.get("description")))
    return label is not None and stated(label.group(1).strip(), text)


def _stated_only(
    args: dict[str, Any], tool: dict[str, Any], text: str, dropped: Counter[str]
) -> dict[str, Any]:
    """Step 6: ``args`` without the optional arguments ``text`` does not state (an argument the
    schema does not declare is no optional one: it stays)."""
    schema = tool.get("function", tool).get("parameters") or {}
    required = set(schema.get("required") or [])
    props = schema.get("properties") or {}
    kept = {
        k: v
        for k, v in args.items()
        if k in required or k not in props or _states(text, v, k, props[k] or {})
    }
    if len(kept) < len(args):
        dropped["unstated_optional"] += len(args) - len(kept)
    return kept


def toolalpaca_answers(
    src: str | Path, tools: dict[str, dict[str, dict[str, Any]]], *, keep_unstated: bool = False
) -> tuple[list[Trajectory], Counter[str]]:
    """Rows for every instruction in ``src`` (steps 2–7), given each API's functions as OpenAI
    tools by the name the answers use (step 1: ``{api: {function: tool}}``), and the count of
    instructions passed over by reason, with the count of arguments dropped in step 6
    (``unstated_optional``; ``keep_unstated`` keeps them as the answers wrote them)."""
    rows: list[Trajectory] = []
    skipped: Counter[str] = Counter()
    for file in toolalpaca_files(src):
        records = _load_json(file)
        if not isinstance(records, list):
            raise DataError(f"{file}: expected a list of ToolAlpaca records")
        created = dt.datetime.fromtimestamp(file.stat().st_mtime, dt.UTC)
        for record in records:
            if not isinstance(record, dict):
                skipped["bad_record"] += 1
                continue
            api = str(record.get("Name", ""))
            functions = tools.get(api) or {}
            instructions = record.get("Instructions") or []
            answers = record.get("Golden_Answers") or []
            for k, (text, actions) in enumerate(zip(instructions, answers, strict=False)):
                if not functions:
                    skipped["unknown_api"] += 1
                    continue
                if not isinstance(actions, list) or not actions:
                    skipped["no_action"] += 1
                    continue
                if any(
                    not isinstance(a, dict) or a.get("Action") not in functions for a in actions[:1]
                ):
                    skipped["unknown_function"] += 1
                    continue
                if "${" in str(actions[0].get("Action_Input", "")):
                    skipped["refers_to_result"] += 1
                    continue
                n = _first_decision(actions)
                first = [_input(a) for a in actions[:n]]
                if any(args is None for args in first):
                    skipped["bad_input"] += 1
                    continue
                if not keep_unstated:
                    first = [
                        _stated_only(args or {}, functions[str(a["Action"])], str(text), skipped)
                        for a, args in zip(actions[:n], first, strict=True)
                    ]
                calls = [
                    ToolCall(
                        id=f"call_{i}",
                        name=str(a["Action"]),
                        arguments=json.dumps(args, ensure_ascii=False),
                    )
                    for i, (a, args) in enumerate(zip(actions[:n], first, strict=True))
                ]
                steps = [
                    [
                        GoldCall(name=c.name, arguments=args or {})
                        for c, args in zip(calls, first, strict=True)
                    ]
                ]
                request = str(text)
                rows.append(
                    Trajectory(
                        id=stable_id("toolalpaca", file.name, api, k),
                        task_id=stable_id("toolalpaca", file.name, api, k),
                        goal=request,
                        domain="toolalpaca",
                        capabilities=[
                            "single_call" if len(actions) == 1 else "multi_call",
                            *(["parallel_calls"] if n > 1 else []),
                        ],
                        ground_truth=GroundTruth(
                            turns=[GoldTurn(request=request, kind="tool", steps=steps)],
                            extra={
                                "source": "ToolAlpaca golden answer",
                                "later_actions": actions[n:],
                            },
                        ),
                        tools=list(functions.values()),
                        messages=[
                            Message(role="user", content=request),
                            Message(role="assistant", content="", tool_calls=calls),
                        ],
                        success=None,
                        method="import:toolalpaca",
                        stage_id="import",
                        generator="toolalpaca",
                        created_at=created,
                        extra={
                            "source": f"toolalpaca/{file.name}",
                            "api": api,
                            "instruction": k,
                            "first_decision": True,
                        },
                    )
                )
    return rows, skipped
