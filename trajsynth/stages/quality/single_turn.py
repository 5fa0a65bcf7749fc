"""``single_turn``: each trajectory's first decision as a training row of its own.

Single-turn benchmarks (BFCL's simple, multiple, parallel, irrelevance and live categories)
score one thing: given the offered functions and one request, the first assistant message —
the right call or calls with the right arguments, or no call when no function fits or a
required value is missing. A multi-turn trajectory spends most of its tokens on tool results,
later turns and the final answer; a student trained on a budget of tokens (a small model on a
CPU) sees a few hundred such rows and few of the first decisions that a benchmark asks for.
This stage makes the first decisions cheap to train on:

1) each row's opening (system prompt, the user's request: every message before the first
   assistant message) and that first assistant message form the view; a row without an
   assistant message is passed over (``no_assistant``);
2) with ``drop_needless`` (default), a view whose decision is of the wrong kind for its
   task's first turn is passed over: one that asks or answers where that turn wants calls
   (the teacher asked for a value it had been given, then went on: ``needless``), or one
   that calls where that turn wants no call (no function fits, or a required value is
   missing: ``spurious``). A benchmark scores either first decision as wrong, and a verify
   that checks the final state passes a read-only call made where none was wanted;
3) the view is classed by its decision: ``none`` (no call: an answer or a question),
   ``one`` (one call) or ``several`` (calls in one turn);
4) with ``focus`` p, a share p of the call views that offer functions besides the ones they
   call (a draw seeded with the row's id, apart from withhold's) also yields a focused view:
   the same request and calls with only the called functions offered, in their order (ours,
   not Hammer's). Single-call benchmarks offer one function that fits (BFCL's simple and
   live_simple, parallel: one function called several times), and Magnet's tasks mostly
   offer distractors, so without it a view offering one function is a no-call answer far
   more often than a call (two in three of a benchmark run's one-function views: irrelevance
   tasks, questions for a missing value and contrast views), and a student declines a
   single offered function that fits. A focused view is a view like the rest in steps 5
   and 6: repeated by its class and drawn for withhold on its own (its contrast offers one
   function of another domain: the same request with and without the function it needs).
   ``views.focused`` counts them;
5) each view is emitted ``repeat[class]`` times (default once each; e.g. ``{none: 3}`` to
   give no-call decisions a larger share when the rows are mostly calls), with ids derived from
   the row's id, ``parent_ids`` naming it, and ``extra["single_turn"]`` saying the class and
   copy; step-level fields (rewards, flags, state changes) keep the first step's values. With
   ``repeat_as: weight`` the view is emitted once and its sample weight (``extra["weight"]``,
   times the weight it had) is the count instead: the same share of the loss for the tokens
   of one copy, so a trainer that reads weights (``train_sft``'s ``weights``) spends its time
   budget on distinct rows rather than on exact copies (ours);
6) with ``withhold`` p, a share p of the call views (chosen by a draw seeded with the row's
   id) also yields a contrast view, as Hammer builds its irrelevance data (Lin et al.,
   "Hammer: Robust Function-Calling for On-Device Language Models via Function Masking",
   arXiv:2410.04587): the same request with every function the view calls taken out of the
   offered functions (with those its task calls later, and any other offered function alike
   to a called one: name and description words with Jaccard similarity ≥ 0.5), and as the
   answer no call, a sentence saying that no offered function can do what was asked, in the
   request's terms and never naming a function (``phrasing.refusal``, drawn like the rest).
   With ``swap`` (default), each function taken out is replaced, in its place, by a function
   of another domain offered to another row of the batch (drawn by the same seed, none alike
   to what went), so the contrast view offers as many functions as the view: otherwise a
   view with one function left is a decline far more often than a call (78% of the
   one-function views of a benchmark run), and a student learns to decline whenever one
   function is offered, which is how single-call benchmarks ask (``withhold.swapped``
   counts them; a batch of one domain shrinks the list as before). A view whose functions
   would all go and that gets no replacement is passed over (``withhold.nothing_left``).
   The student sees the same request with and without the function it needs: the one thing
   BFCL's irrelevance categories score;
7) with ``opaque`` p, a share p of the views (each drawn on its own, seeded by its id,
   contrast views and copies too) offer every function under an opaque name, as many real
   APIs name theirs (``ChaFod``, ``ThinQ_Connect``, ``GetProductDetailsV1``): each word's
   first three letters, capitalized and run together (``change_food`` → ``ChaFoo``,
   ``search_flights`` → ``SeaFli``; a number after a name another function took), the calls
   renamed alike, in the message and the ground truth (ours). The request never names a
   function but echoes its words, so without it whether a function fits is read off its
   name: 8% of a benchmark run's call views share no name word with their request, against
   38% of BFCL live_simple's questions, and the student declined functions whose names its
   request did not echo. Behind an opaque name the description is what tells, in call and
   contrast views alike (``views.opaque``);
8) with ``keep_rows`` the original rows flow on too (after their views).

Metrics: ``rows``, ``views``, ``views.<class>``, ``views.withheld``, ``views.focused``,
``views.opaque``, ``no_assistant``, ``needless``, ``spurious``, ``withhold.swapped``,
``withhold.nothing_left``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from ...core.batch import to_records
from ...core.extras import weight_of
from ...core.schema import Message, Trajectory
from ...core.task import GoldTurn, GroundTruth
from ...core.text import split_words
from ...llm.sim.phrasing import refusal
from ..context import Context
from ..kinds import MapStage, Output, StageConfig
from ..registry import register

__all__ = [
    "SingleTurn",
    "SingleTurnConfig",
    "decision_class",
    "first_decision",
    "needless",
    "opaque_name",
    "opaque_view",
    "spurious",
    "withheld_view",
]

Decision = Literal["none", "one", "several"]
CLASSES: tuple[Decision, ...] = ("none", "one", "several")


class SingleTurnConfig(StageConfig):
    repeat: dict[str, int] = Field(
        default_factory=dict,
        description="Copies of a view per decision class (none, one, several); a class not "
        "named is emitted once, 0 drops it.",
    )
    repeat_as: Literal["copies", "weight"] = Field(
        "copies",
        description="How repeat is applied: as copies of a view, or as one view whose sample "
        "weight (extra.weight) is the count (train_sft reads it with weights: true).",
    )
    withhold: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of call views that also yield a contrast view: the called "
        "functions taken out of the offered ones, no call as the answer (irrelevance).",
    )
    swap: bool = Field(
        True,
        description="Withhold: replace each function taken out by one of another domain "
        "from the same batch, so a contrast view offers as many functions as its view.",
    )
    focus: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of call views offering other functions besides those called "
        "that also yield a focused view: only the called functions offered, the same calls "
        "(a benchmark's single-function questions).",
    )
    opaque: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of views whose offered functions are renamed as opaque API names "
        "('ChaFoo' for change_food), their calls too: the description, not the name, tells "
        "whether a function fits.",
    )
    drop_needless: bool = Field(
        True,
        description="Pass over a view whose decision is of the wrong kind for its task's "
        "first turn: no call where calls are wanted (a question the request had already "
        "answered), or a call where no call is (no function fits, or a value is missing).",
    )
    keep_rows: bool = Field(False, description="Pass the original rows on too.")

    @field_validator("repeat")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(CLASSES))
        if unknown:
            raise ValueError(f"unknown decision class {unknown}; the classes: {list(CLASSES)}")
        if any(n < 0 for n in value.values()):
            raise ValueError("repeat counts are 0 or more")
        return value


def decision_class(row: Trajectory) -> Decision:
    """The class of a view's (or a row's last) assistant message."""
    calls = len(row.messages[-1].tool_calls or [])
    return "none" if calls == 0 else "one" if calls == 1 else "several"


def first_decision(row: Trajectory) -> Trajectory | None:
    """Step 1: the opening and the first assistant message (None: no assistant message)."""
    first = next((i for i, m in enumerate(row.messages) if m.role == "assistant"), None)
    if first is None:
        return None
    return row.derive(  # step-level fields keep the first assistant step's values
        messages=row.messages[: first + 1],
        step_rewards=row.step_rewards[:1],
        step_flags=row.step_flags[:1],
        step_diffs=row.step_diffs[:1],
    )


def needless(view: Trajectory) -> bool:
    """Step 2: a no-call first decision where the task's first turn wants calls."""
    gt = view.ground_truth
    first = gt.turns[0] if gt is not None and gt.turns else None
    return (
        decision_class(view) == "none"
        and first is not None
        and first.kind == "tool"
        and any(first.steps)
    )


def spurious(view: Trajectory) -> bool:
    """Step 2: a call first decision where the task's first turn wants no call (it declines,
    answers without tools, or asks for a missing value)."""
    gt = view.ground_truth
    first = gt.turns[0] if gt is not None and gt.turns else None
    return decision_class(view) != "none" and first is not None and first.kind != "tool"


def _function(tool: Any) -> dict[str, Any]:
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    return fn if isinstance(fn, dict) else {}


def _words(tool: Any) -> set[str]:
    fn = _function(tool)
    return set(split_words(f"{fn.get('name', '')} {fn.get('description', '')}".lower()))


def _tools(row: Trajectory) -> list[Any]:
    return row.tools if isinstance(row.tools, list) else []


def _names(row: Trajectory) -> set[str]:
    return {str(_function(t).get("name", "")) for t in _tools(row)}


def _called(view: Trajectory) -> set[str]:
    """The names the view's last message calls."""
    return {c.name for c in view.messages[-1].tool_calls or []}


def _alike(a: set[str], b: set[str]) -> bool:
    return bool(a and b) and len(a & b) / len(a | b) >= 0.5


def focused_view(view: Trajectory) -> Trajectory | None:
    """Step 4: ``view`` (a call view) offering only the functions it calls, in their order;
    None when it offers nothing else (or a called function is not offered)."""
    called = _called(view)
    tools = _tools(view)
    kept = [t for t in tools if _function(t).get("name") in called]
    if not called or len(kept) < len(called) or len(kept) == len(tools):
        return None
    return view.derive(tools=kept)


def withheld_view(
    view: Trajectory, rng: random.Random, others: list[tuple[str, Any]] | None = None
) -> Trajectory | None:
    """Step 6: ``view`` (a call view) without the functions it calls among its offered ones,
    answered with no call; None when no offered function would be left (or a called one is
    not offered). ``others`` ((domain, tool) pairs offered elsewhere): each function taken
    out is replaced in its place by one of another domain, none alike to what went."""
    called = _called(view)
    tools = _tools(view)
    gone = [t for t in tools if _function(t).get("name") in called]
    if not called or len(gone) < len(called):
        return None
    # what the task calls later goes too: a request half of which could still be done is
    # not one that no function fits
    needed = (
        called | {c.name for c in view.ground_truth.flat_calls()} if view.ground_truth else called
    )
    gone_words = [_words(t) for t in gone]
    names = _names(view)  # and each swapped-in one: the refusal names none of them
    swaps: list[Any] = []
    for _ in range(20 * len(called) if others else 0):  # draws until each place is filled
        domain, t = others[rng.randrange(len(others))]
        name = str(_function(t).get("name", ""))
        if (
            domain != view.domain
            and name not in names
            and not any(_alike(_words(t), w) for w in gone_words)
        ):
            swaps.append(t)
            names.add(name)
            if len(swaps) == len(called):
                break
    left = []
    for t in tools:
        if _function(t).get("name") in called:
            if swaps:  # the called function's place goes to one of another domain
                left.append(swaps.pop())
        elif _function(t).get("name") not in needed and not any(
            _alike(_words(t), w) for w in gone_words
        ):
            left.append(t)
    if not left:
        return None
    target = _function(rng.choice(gone))
    answer = refusal(str(target.get("name", "")), str(target.get("description", "")), rng, names)
    request = next((m.content or "" for m in reversed(view.messages) if m.role == "user"), "")
    return view.derive(
        tools=left,
        messages=[*view.messages[:-1], Message(role="assistant", content=answer)],
        capabilities=["no_tool_needed"],
        ground_truth=GroundTruth(
            turns=[GoldTurn(request=request, kind="no_tool", answer=answer)],
            env_seed=view.ground_truth.env_seed if view.ground_truth else 0,
        ),
    )


def opaque_name(name: str, taken: set[str]) -> str:
    """Step 7: each word's first three letters, capitalized, run together ("change_food" →
    "ChaFoo"); a number after it when ``taken`` holds it already."""
    words = split_words(name.replace(".", "_")) or [name]
    base = "".join(w[:3].capitalize() for w in words)
    out, n = base, 2
    while out in taken:
        out, n = f"{base}{n}", n + 1
    return out


def opaque_view(view: Trajectory) -> Trajectory:
    """Step 7: ``view`` with every offered function under an opaque name, and its calls (in
    the last message and the ground truth) renamed alike."""
    renamed: dict[str, str] = {}
    for t in _tools(view):
        name = str(_function(t).get("name", ""))
        renamed.setdefault(name, opaque_name(name, set(renamed.values())))
    tools = []
    for t in _tools(view):
        fn = _function(t)
        new = {**fn, "name": renamed[str(fn.get("name", ""))]}
        tools.append({**t, "function": new} if "function" in t else new)
    last = view.messages[-1]
    if last.tool_calls:
        calls = [
            c.model_copy(update={"name": renamed.get(c.name, c.name)}) for c in last.tool_calls
        ]
        last = last.model_copy(update={"tool_calls": calls})
    messages = [*view.messages[:-1], last]
    gt = view.ground_truth
    if gt is not None:
        gt = gt.model_copy(
            update={
                "turns": [
                    turn.model_copy(
                        update={
                            "steps": [
                                [c.model_copy(update={"name": renamed.get(c.name, c.name)})
                                 for c in step]
                                for step in turn.steps
                            ]
                        }
                    )
                    for turn in gt.turns
                ]
            }
        )  # fmt: skip
    return view.derive(tools=tools, messages=messages, ground_truth=gt, step_diffs=view.step_diffs)


def _offered(rows: list[Trajectory]) -> list[tuple[str, Any]]:
    """Every function offered in ``rows``, once by (domain, name), in first-seen order."""
    seen: dict[tuple[str, str], Any] = {}
    for row in rows:
        for t in _tools(row):
            seen.setdefault((row.domain, str(_function(t).get("name", ""))), t)
    return [(domain, t) for (domain, _), t in seen.items()]


@register
class SingleTurn(MapStage[SingleTurnConfig]):
    """Each row's opening and first assistant message as a row of its own."""

    name = "single_turn"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        for batch in batches:
            out: list[Trajectory] = []
            rows = to_records(batch)
            others = _offered(rows) if self.config.withhold and self.config.swap else None
            for row in rows:
                ctx.metrics.inc("rows")
                view = first_decision(row)
                if view is None:
                    ctx.metrics.inc("no_assistant")
                elif self.config.drop_needless and needless(view):  # 2)
                    ctx.metrics.inc("needless")
                elif self.config.drop_needless and spurious(view):
                    ctx.metrics.inc("spurious")
                else:
                    kind = decision_class(view)  # 3)
                    variants: list[tuple[Trajectory, tuple[str, ...]]] = [(view, ())]
                    focus = self.config.focus if kind != "none" else 0.0
                    if focus and random.Random(ctx.row_seed("focus", row.id)).random() < focus:
                        focused = focused_view(view)  # 4)
                        if focused is not None:
                            variants.append((focused, ("focus",)))
                            ctx.metrics.inc("views.focused")
                    for variant, tag in variants:
                        out.extend(self._emit(row, variant, kind, tag, others, ctx))
                if self.config.keep_rows:  # 8)
                    out.append(row)
            if out:
                yield out

    def _emit(
        self,
        row: Trajectory,
        view: Trajectory,
        kind: Decision,
        tag: tuple[str, ...],
        others: list[tuple[str, Any]] | None,
        ctx: Context,
    ) -> Iterator[Trajectory]:
        """Steps 5 and 6 for one view of ``row`` (``tag`` tells a focused view's ids and
        draws from the view's own)."""
        focus = {"focus": True} if tag else {}
        count = self.config.repeat.get(kind, 1)  # 5)
        copies, weight = (count, 1) if self.config.repeat_as == "copies" else (min(count, 1), count)
        if weight != 1:  # the row's own weight, kept: 0 stays 0
            had = weight_of(row.extra)
            weighted = {"weight": weight * (1.0 if had is None else had)}
        else:
            weighted = {}
        for copy in range(copies):
            ctx.metrics.inc("views")
            ctx.metrics.inc(f"views.{kind}")
            yield self._opaque(
                view.derive(
                    id=Trajectory.make_id(row.id, "single_turn", *tag, copy),
                    parent_ids=[row.id],
                    extra={
                        **(row.extra or {}),
                        **weighted,
                        "single_turn": {"class": kind, "copy": copy, **focus},
                    },
                ),
                ctx,
            )
        withhold = self.config.withhold
        rng = random.Random(ctx.row_seed("withhold", row.id, *tag))
        if kind == "none" or not withhold or rng.random() >= withhold:  # 6)
            return
        contrast = withheld_view(view, rng, others)
        if contrast is None:
            ctx.metrics.inc("withhold.nothing_left")
            return
        ctx.metrics.inc("views")
        ctx.metrics.inc("views.withheld")
        if _names(contrast) - _names(view):
            ctx.metrics.inc("withhold.swapped")
        yield self._opaque(
            contrast.derive(
                id=Trajectory.make_id(row.id, "single_turn", *tag, "withheld"),
                parent_ids=[row.id],
                extra={
                    **(row.extra or {}),
                    "single_turn": {"class": "none", "withheld": kind, **focus},
                },
            ),
            ctx,
        )

    def _opaque(self, view: Trajectory, ctx: Context) -> Trajectory:
        """Step 7 for one emitted view (drawn by its id)."""
        p = self.config.opaque
        if not p or random.Random(ctx.row_seed("opaque", view.id)).random() >= p:
            return view
        ctx.metrics.inc("views.opaque")
        return opaque_view(view)
