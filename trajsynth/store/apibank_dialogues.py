"""API-Bank's level-1 dialogues as trajsynth rows (Li et al. 2023, "API-Bank: A Comprehensive
Benchmark for Tool-Augmented LLMs", arXiv:2304.08244; ``lv1-lv2-samples/level-1-given-desc``).

Each ``*.jsonl`` file is one dialogue written by people: lines ``{"role": "User"|"AI", "text"}``
and ``{"role": "API", "api_name", "param_dict", "result": {"output", "exception"}}``. The
requests are what a person writes (dates as "September 12th at 2pm", values the assistant
has to ask for), which synthetic requests only approximate. :func:`apibank_dialogues` turns
each into one row:

1) the API descriptions come in as OpenAI tools by name (the CLI converts the level-1 test
   file, ``test-data/level-1-api.json``, found above the dialogues with :func:`find_apis`, with
   the toolset importer ``envs.importers.apibank``: converting specs is the envs layer's job);
2) ``messages``: User → user; AI → assistant; an API line → a call (id ``call_<n>``, the
   ``param_dict`` as JSON arguments) on the assistant message just before it when that one has
   no call yet (API-Bank writes "Thank you." and then the call; one message carries both),
   else on a new assistant message, followed by its tool message (the output as JSON, or
   ``Error: <exception>``);
3) ``tools``: the APIs the dialogue calls, in order of first use; a dialogue that calls an API
   the descriptions lack (``ToolSearcher`` of level 2) is passed over and counted
   (``unknown_api``), as is one without a call or a line that is not a dialogue line
   (``no_call``, ``bad_line``);
4) ``ground_truth``: one tool turn whose steps are the calls in order, with the first user
   message as the request;
5) outcome: ``success`` when no call raised (the dialogue's own results: these are recorded
   conversations, nothing is replayed), ``reward`` 1.0 or 0.0;
6) provenance: ``method`` ``import:api-bank``, ``domain`` ``api-bank``, ``id`` a hash of the
   file name, ``created_at`` the file's modification time (a re-import gives identical rows).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ..core.errors import InputNotFoundError
from ..core.ids import stable_id
from ..core.schema import Message, ToolCall, Trajectory
from ..core.task import GoldCall, GoldTurn, GroundTruth
from .importers import source_files

__all__ = ["apibank_dialogues", "find_apis"]

_SPEC_FILE = "test-data/level-1-api.json"


def find_apis(src: str | Path) -> Path:
    """API-Bank's API descriptions (``test-data/level-1-api.json``) in ``src`` or a folder above."""
    path = Path(src)
    for base in (path, *path.parents):
        candidate = base / _SPEC_FILE
        if candidate.is_file():
            return candidate
    raise InputNotFoundError(
        f"no {_SPEC_FILE} found above {path}",
        hint="pass --apis PATH/TO/level-1-api.json (API-Bank's API descriptions)",
    )


def _read_lines(file: Path) -> list[dict[str, Any]] | None:
    lines = []
    for raw in file.read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            return None
        if not isinstance(line, dict) or line.get("role") not in ("User", "AI", "API"):
            return None
        lines.append(line)
    return lines


def _tool_content(result: Any) -> str:
    result = result if isinstance(result, dict) else {}
    if result.get("exception"):
        return f"Error: {result['exception']}"
    return json.dumps(result.get("output"), ensure_ascii=False)


def _row(file: Path, lines: list[dict[str, Any]], tools: dict[str, dict[str, Any]]) -> Trajectory:
    messages: list[Message] = []
    gold: list[list[GoldCall]] = []
    used: list[str] = []
    failed = False
    for line in lines:
        if line["role"] == "User":
            messages.append(Message(role="user", content=str(line.get("text", ""))))
        elif line["role"] == "AI":
            messages.append(Message(role="assistant", content=str(line.get("text", ""))))
        else:
            name = str(line.get("api_name", ""))
            args = line.get("param_dict") or {}
            call = ToolCall(
                id=f"call_{len(gold)}", name=name, arguments=json.dumps(args, ensure_ascii=False)
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and not last.tool_calls:
                messages[-1] = last.model_copy(update={"tool_calls": [call]})
            else:
                messages.append(Message(role="assistant", content="", tool_calls=[call]))
            result = line.get("result")
            failed = failed or bool(isinstance(result, dict) and result.get("exception"))
            messages.append(
                Message(role="tool", tool_call_id=call.id, name=name, content=_tool_content(result))
            )
            gold.append([GoldCall(name=name, arguments=args if isinstance(args, dict) else {})])
            if name not in used:
                used.append(name)
    request = next((m.content or "" for m in messages if m.role == "user"), "")
    calls = len(gold)
    return Trajectory(
        id=stable_id("api-bank", file.name),
        task_id=stable_id("api-bank", file.name),
        goal=request,
        domain="api-bank",
        capabilities=["single_call" if calls == 1 else "multi_call"],
        ground_truth=GroundTruth(
            turns=[GoldTurn(request=request, kind="tool", steps=gold)],
            extra={"source": "API-Bank level-1 dialogue"},
        ),
        tools=[tools[n] for n in used],
        messages=messages,
        success=not failed,
        reward=0.0 if failed else 1.0,
        reward_components={"task": 0.0 if failed else 1.0},
        method="import:api-bank",
        stage_id="import",
        generator="human",
        created_at=dt.datetime.fromtimestamp(file.stat().st_mtime, dt.UTC),
        extra={"source": f"api-bank/{file.parent.name}/{file.name}"},
    )


def apibank_dialogues(
    src: str | Path, tools: dict[str, dict[str, Any]]
) -> tuple[list[Trajectory], Counter[str]]:
    """Rows for every dialogue in ``src`` (a ``.jsonl`` file or a folder of them; steps 2–6)
    given the APIs as OpenAI tools by name (step 1), and the count of dialogues passed over by
    reason."""
    files = source_files(src, "*.jsonl", "API-Bank dialogue (.jsonl) files")
    rows: list[Trajectory] = []
    skipped: Counter[str] = Counter()
    for file in files:
        lines = _read_lines(file)
        if lines is None:
            skipped["bad_line"] += 1
            continue
        names = [str(line.get("api_name", "")) for line in lines if line["role"] == "API"]
        if not names:
            skipped["no_call"] += 1
        elif any(n not in tools for n in names):
            skipped["unknown_api"] += 1
        else:
            rows.append(_row(file, lines, tools))
    return rows, skipped
