"""Simulated writers: the director (LoopTool planner), the query writer (Magnet
back-translation) and the expander (LoopTool EDDE).

- director: a turn-by-turn outline of *user needs only* — never a tool name — each turn
  labelled tool_call / non_tool / chit_chat / clarify, adjacent turns related, at least one
  need that takes several tools (LoopTool ``dialog_generation`` planner rules);
- query writer: several natural requests for one call path, each carrying every argument
  value the user must state (values that come from an earlier call's output are referred
  to, not repeated), never naming a function nor repeating a tool's description, varied in
  wording, sentence form, order, persona and style (:mod:`.phrasing`);
- expander: new samples around an error seed — same tools, same call structure, new argument
  values and a new request — in LoopTool's ``INPUT: … OUTPUT: <tool_call>…`` form, with a
  share of unusable generations so that the stage's validation has work to do.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from ...core.task import GoldCall
from ..parsing import format_hermes
from .actor import SimOutput
from .contracts import DirectorMeta, ExpanderMeta, QueryWriterMeta, SimConfig
from .phrasing import PERSONA_OPENERS, compose_query, intent_phrase, lower_first
from .text import ToolIndex, fresh_value, param_words

__all__ = ["direct", "expand", "write_queries"]

_KIND_NAMES = {"tool": "tool_call", "no_tool": "non_tool", "clarify": "clarify"}
_CHIT_CHAT = [
    "The user makes small talk about their day.",
    "The user thanks the assistant and mentions their plans.",
    "The user asks how the assistant is doing.",
]
_NON_TOOL = [
    "The user asks a general question the assistant can answer from knowledge.",
    "The user asks for advice that needs no lookup.",
    "The user asks the assistant to explain a term.",
]
_FOLLOW = ["Following up on that, ", "Building on the previous answer, ", "Next, ", "Then "]


_WANTS = [
    "The user wants to ",
    "The user needs to ",
    "The user asks to ",
    "The user would like to ",
]


def _need(calls: list[GoldCall], tools: ToolIndex, r: random.Random) -> str:
    taboo = set(tools.names)
    verbs = []
    for c in calls:
        info = tools.get(c.name)
        verbs.append(intent_phrase(c.name, info.description if info else "", r, taboo))
    then = r.choice([", then ", " and then ", ", after that "])
    return (
        r.choice(_WANTS)
        + (verbs[0] if len(verbs) == 1 else then.join(verbs[:-1]) + " and finally " + verbs[-1])
        + "."
    )


def direct(
    meta: DirectorMeta, tools_list: list | None, cfg: SimConfig, rng: Callable[..., random.Random]
) -> SimOutput:
    """A turn-by-turn outline as JSON ``{"turns": [{turn, type, need}]}``."""
    tools = ToolIndex(meta.tools if meta.tools is not None else tools_list)
    r = rng("plan")
    turns: list[dict[str, Any]] = []
    if meta.ground_truth is not None:
        for i, g in enumerate(meta.ground_truth.turns):
            calls = [c for step in g.steps for c in step]
            if g.kind == "no_tool" or not calls:
                need = r.choice(_NON_TOOL)
            elif g.kind == "clarify":
                missing = next(iter(calls[0].arguments), "detail")
                need = _need(calls, tools, r)[:-1] + f", but leaves out the {param_words(missing)}."
            else:
                need = _need(calls, tools, r)
            if i > 0:
                need = r.choice(_FOLLOW) + lower_first(need)
            turns.append({"turn": i + 1, "type": _KIND_NAMES.get(g.kind, g.kind), "need": need})
    else:
        names = tools.names
        count = meta.num_turns or r.randint(2, 4)
        complex_at = r.randrange(count)
        for i in range(count):
            if names and i == complex_at:
                kind = "tool_call"
            else:
                kind = r.choices(
                    ["tool_call", "non_tool", "chit_chat", "clarify"],
                    weights=[0.6, 0.15, 0.15, 0.1],
                )[0]
            if kind in ("tool_call", "clarify") and names:
                k = min(len(names), r.randint(2, 3) if i == complex_at else r.randint(1, 2))
                picked = r.sample(names, k)
                need = _need([GoldCall(name=n) for n in picked], tools, r)
                if kind == "clarify":
                    need = need[:-1] + ", but leaves out a required detail."
            else:
                kind = kind if kind in ("non_tool", "chit_chat") else "non_tool"
                need = r.choice(_CHIT_CHAT if kind == "chit_chat" else _NON_TOOL)
            if i > 0:
                need = r.choice(_FOLLOW) + lower_first(need)
            turns.append({"turn": i + 1, "type": kind, "need": need})
    return SimOutput(content=json.dumps({"turns": turns}, ensure_ascii=False))


def write_queries(
    meta: QueryWriterMeta,
    tools_list: list | None,
    cfg: SimConfig,
    rng: Callable[..., random.Random],
) -> SimOutput:
    """``meta.n_queries`` distinct phrasings of the call path, as JSON ``{"queries": [...]}``."""
    tools = ToolIndex(meta.tools if meta.tools is not None else tools_list)
    queries: list[str] = []
    seen: set[str] = set()
    for i in range(meta.n_queries * 4):
        q = compose_query(meta.steps, tools, rng("q", i), persona=meta.persona, style=meta.style)
        if q not in seen:
            seen.add(q)
            queries.append(q)
        if len(queries) == meta.n_queries:
            break
    return SimOutput(content=json.dumps({"queries": queries}, ensure_ascii=False))


def expand(
    meta: ExpanderMeta, tools_list: list | None, cfg: SimConfig, rng: Callable[..., random.Random]
) -> SimOutput:
    """One new sample: ``INPUT: <request>\\nOUTPUT: <tool_call>...</tool_call>``."""
    tools = ToolIndex(meta.tools if meta.tools is not None else tools_list)
    r = rng("expand")
    garbage = meta.garbage_rate if meta.garbage_rate is not None else cfg.expander_garbage_rate
    if r.random() < garbage:
        return SimOutput(
            content=r.choice(
                [
                    "I'm sorry, I can't generate a new sample for this.",
                    "INPUT: " + (meta.query or "a request") + "\nOUTPUT: I would call a tool here.",
                    "Here are some ideas for new samples: vary the amounts and the names.",
                ]
            ),
            uncertain=True,
        )
    new_calls = [
        GoldCall(name=c.name, arguments={k: fresh_value(v, r) for k, v in c.arguments.items()})
        for c in meta.correct
    ]
    persona = None
    if meta.variation and "persona" in meta.variation:
        persona = r.choice(sorted(PERSONA_OPENERS))
    style = "formal" if meta.variation and "style" in meta.variation else None
    query = compose_query([[c] for c in new_calls], tools, r, persona=persona, style=style)
    output = format_hermes([(c.name, c.arguments) for c in new_calls])
    return SimOutput(content=f"INPUT: {query}\nOUTPUT: {output}")
