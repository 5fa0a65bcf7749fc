"""``edde``: LoopTool's Error-Driven Data Expansion (Zhang et al. 2025, "LoopTool: Closing the
Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148, "EDDE"; official code
``dataloop/error_data_expansion.py``).

Input: JGLV's consensus failures (``extra["jglv"]``: status, the correct and the incorrect
response, the judge's error analysis; ``extra["gcp"]``: the conversation before the step).

1) seeds: status ``model_incorrect`` (correct = the label) or ``original_incorrect`` (correct
   = the prediction), with consensus, whose correct side has tool calls; others are skipped;
2) per seed, ``samples`` (k = 3) new samples, each with a random **scenario variation** —
   LoopTool's ``randint(0, 6) % 4`` over complexity variation, user persona, interaction
   style, data variation (the first three twice as likely);
3) the prompt (role ``expander``): LoopTool's "expert data engineer" system text and
   requirements (correct usage, different parameter values, the same error pattern, only
   ``INPUT: … OUTPUT: …``), the original input, the correct response, the incorrect response,
   the judge's analysis and the variation; the same tool list is offered;
4) each generation is validated: ``INPUT``/``OUTPUT`` parsed from the raw text, ``OUTPUT``
   holds ``<tool_call>`` blocks that parse, every call names a tool of the *same toolset* and
   its arguments validate against the schema, and the calls **execute** in a fresh
   environment of the seed's domain and state without an error; a rejected generation (or a
   request the endpoint refused: ``request_failed``) is retried (a new request) up to
   ``max_tries`` (3) times, then the sample is given up. A request lost to the endpoint
   (retries exhausted, 429s, circuit open) is no generation: the sample is not retried with
   another seed nor given up, it is dropped from every output and counted as lost to the
   endpoint (``infra.lost`` of ``infra.units``, the samples asked);
5) a kept sample becomes a task row (one tool turn: the request, the calls as gold, the
   trajectory rebuilt by executing them) with provenance: ``method`` ``edde``,
   ``parent_ids`` the seed, ``extra["original_sample"]`` (the seed's id, task, request,
   step, correct and incorrect responses) and ``extra["edde"]`` (variation, tries);
6) counts (seeds, generations, rejections by reason, kept) in the metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.errors import InfraError
from ...core.extras import GcpRecord, JglvRecord, get
from ...core.ids import stable_id
from ...core.schema import Message, Trajectory
from ...core.task import GoldCall, GoldTurn, GroundTruth
from ..common.looptool import calls_json, context_calls, run_gold, step_text
from ..context import Context
from ..kinds import Emit, GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["EDDE", "VARIATIONS", "EDDEConfig", "parse_generation"]

#: LoopTool's scenario variations, drawn as ``randint(0, 6) % 4``
VARIATIONS = ("complexity variation", "user persona", "interaction style", "data variation")

SYSTEM = """You are an expert data engineer who creates training data for function calling. \
Given a sample a model got wrong, generate NEW training samples that teach the correct usage.

Requirements:
1. Show the CORRECT usage of the functions, as in the correct response.
2. Use different parameter values (names, amounts, places, symbols) from the original.
3. Keep the same error pattern the model fell into, but change the complexity or the flow \
of the dialog; you may switch between single-turn and multi-turn.
4. Use only the tools listed below.
5. Output only:
INPUT: <the user's request>
OUTPUT: <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call> (one block per call)

Tools:
<tools>
{tools}
</tools>"""

USER = """Original input:
{original}

Correct response:
{correct}

Incorrect response:
{incorrect}

Error analysis from the judges:
{analysis}

Scenario variation for the new sample: {variation}

Example (single tool):
INPUT: What's the weather in Lisbon tomorrow?
OUTPUT: <tool_call>{{"name": "get_weather",
"arguments": {{"city": "Lisbon", "day": "tomorrow"}}}}</tool_call>

Example (multiple tools):
INPUT: Convert 20 EUR to USD and 15 GBP to JPY.
OUTPUT: <tool_call>{{"name": "convert",
"arguments": {{"amount": 20, "from": "EUR", "to": "USD"}}}}</tool_call>
<tool_call>{{"name": "convert",
"arguments": {{"amount": 15, "from": "GBP", "to": "JPY"}}}}</tool_call>

Example (multi-turn):
INPUT: USER: I need a taxi. ASSISTANT: Where to? USER: To the airport from 5 Main St.
OUTPUT: <tool_call>{{"name": "book_taxi",
"arguments": {{"from": "5 Main St", "to": "airport"}}}}</tool_call>

Now write one new sample."""


class EDDEConfig(StageConfig):
    role: str = Field("expander", description="LLM role that writes the new samples.")
    samples: int = Field(3, ge=1, le=20, description="New samples per seed (k; LoopTool: 3).")
    max_tries: int = Field(3, ge=1, le=10, description="Generations per sample at most.")
    temperature: float = Field(1.0, ge=0, description="LoopTool: 1.0.")
    top_p: float = Field(0.9, gt=0, le=1, description="LoopTool: 0.9.")


def parse_generation(text: str | None, tools: list[dict[str, Any]]) -> tuple[Any, str]:
    """Step 4 without execution: ``((request, calls), "")`` or ``(None, reason)``."""
    from ...envs.verifiers.schema import check_call
    from ...llm.parsing import parse_output

    # the first INPUT: and the first OUTPUT: after it (str.find: a lazy pattern with
    # whitespace on both sides of the request took cubic time on a long reply)
    text = text or ""
    start = text.find("INPUT:")
    end = text.find("OUTPUT:", start + len("INPUT:")) if start >= 0 else -1
    if end < 0:
        return None, "no_input_output"
    request = text[start + len("INPUT:") : end].strip()
    output = text[end + len("OUTPUT:") :].strip()
    if not request:
        return None, "empty_input"
    if "<tool_call>" not in output:
        return None, "no_tool_call"
    parsed = parse_output(output)
    if parsed.errors or not parsed.calls:
        return None, "unparsable_call"
    for call in parsed.calls:
        issues = check_call(call, tools)
        if issues:
            return None, "unknown_tool" if issues[0].category == "unknown_tool" else "schema"
    return (request, parsed.calls), ""


def _original(context: list[dict[str, Any]]) -> str:
    lines = []
    for m in context:
        if m.get("role") in ("user", "assistant") and (m.get("content") or m.get("tool_calls")):
            if m.get("tool_calls"):
                body = step_text(context_calls(m))
            else:
                body = str(m["content"])
            lines.append(f"{m['role'].upper()}\n{body}")
    return "\n\n".join(lines)


@register
class EDDE(GlobalStage[EDDEConfig]):
    """LoopTool EDDE: k new, executed and verified samples per consensus failure."""

    name = "edde"
    outputs = ("main", "rejected")
    io_bound = True

    async def _sample(
        self, row: Trajectory, gt: GroundTruth, jglv: JglvRecord, k: int, ctx: Context
    ) -> tuple[Trajectory | None, list[str], str]:
        """Steps 2-5 for sample ``k`` of a seed: (row or None, rejection reasons, variation)."""
        cfg = self.config
        gcp = get(row.extra, GcpRecord) or GcpRecord()
        # 2) the scenario variation
        variation = VARIATIONS[int(ctx.rng(row.id, "variation", k).integers(0, 7)) % 4]
        # 3) the prompt
        tools = row.tools or []
        correct, incorrect = jglv.correct, jglv.incorrect
        messages = [
            Message(
                role="system",
                content=SYSTEM.format(
                    tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
                ),
            ),
            Message(
                role="user",
                content=USER.format(
                    original=_original(gcp.context),
                    correct=step_text(correct),
                    incorrect=step_text(
                        incorrect if isinstance(incorrect, list) else None,
                        gcp.prediction_text,
                    ),
                    analysis=jglv.error_analysis or "(none)",
                    variation=variation,
                ),
            ),
        ]
        query = next(
            (m["content"] for m in reversed(gcp.context) if m.get("role") == "user"),
            row.goal,
        )
        meta = {
            "role": "expander",
            "correct": correct,
            "query": query,
            "incorrect": incorrect if isinstance(incorrect, list) else "(text reply)",
            "error_analysis": jglv.error_analysis or None,
            "variation": variation,
            "sample": k,
        }
        reasons: list[str] = []
        client = ctx.llm(cfg.role)
        for attempt in range(cfg.max_tries):
            result = await client.chat(
                messages,
                tools or None,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                seed=ctx.row_seed(row.id, "edde", k, attempt),
                metadata={**meta, "attempt": attempt},
            )
            result.raise_for_infra()  # the endpoint's failure: the sample is lost (step 4)
            if not result.ok:
                reasons.append("request_failed")
                continue
            choice = result.choices[0]
            text = choice.raw if choice.raw is not None else choice.message.content
            # 4) parse and validate, then execute
            parsed, reason = parse_generation(text, tools)
            if parsed is None:
                reasons.append(reason)
                continue
            request, calls = parsed
            new = self._execute(row, gt, request, calls, ctx)
            if new is None:
                reasons.append("execution")
                continue
            # 5) the row, with provenance
            kept = new.derive(
                id=stable_id("edde", row.id, k, attempt, text),
                task_id=stable_id("edde-task", row.task_id, k, attempt, text),
                extra={
                    "original_sample": {
                        "id": row.id,
                        "task_id": row.task_id,
                        "goal": row.goal,
                        "capabilities": list(row.capabilities or []),
                        "step": gcp.step,
                        "correct": correct,
                        "incorrect": incorrect,
                    },
                    "edde": {
                        "variation": variation,
                        "tries": attempt + 1,
                        "seed_status": jglv.status,
                        "rejections": reasons,
                    },
                },
                **ctx.provenance(method="edde", parent_ids=[row.id], generator=result.model),
            )
            return kept, reasons, variation
        return None, reasons, variation

    async def _sample_or_lost(
        self, row: Trajectory, gt: GroundTruth, jglv: JglvRecord, k: int, ctx: Context
    ) -> tuple[Trajectory | None, list[str], str] | InfraError:
        try:
            return await self._sample(row, gt, jglv, k, ctx)
        except InfraError as exc:
            return exc

    def _execute(
        self, row: Trajectory, gt: GroundTruth, request: str, calls: list[Any], ctx: Context
    ) -> Trajectory | None:
        """Step 4's execution and step 5's trajectory: the calls run in the seed's domain and
        state; any error rejects the sample."""
        called = calls_json(calls)
        assert not isinstance(called, str), "a list of calls is no text step"
        gold = [
            GoldCall(name=c["name"], arguments=c["arguments"])
            for c in called
            if isinstance(c["arguments"], dict)
        ]
        if len(gold) != len(calls):
            return None
        new_gt = GroundTruth(
            turns=[GoldTurn(request=request, kind="tool", steps=[gold])],
            env_seed=gt.env_seed,
            initial_state=gt.initial_state,
        )
        capabilities = ["single_call"] if len(gold) == 1 else ["multi_call", "parallel_calls"]
        task = row.derive(goal=request, capabilities=capabilities)
        return run_gold(task, new_gt, ctx)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        jobs: list[tuple[Trajectory, GroundTruth, JglvRecord, int]] = []
        # 1) seeds
        for row in (r for b in batches for r in to_records(b)):
            jglv = get(row.extra, JglvRecord)
            gt = row.ground_truth
            if (
                gt is None
                or jglv is None
                or not jglv.consensus
                or jglv.status not in ("model_incorrect", "original_incorrect")
                or not isinstance(jglv.correct, list)
                or not jglv.correct
            ):
                ctx.metrics.inc("not_a_seed")
                continue
            ctx.metrics.inc("seeds")
            jobs.extend((row, gt, jglv, k) for k in range(cfg.samples))
        ctx.metrics.inc("infra.units", len(jobs))
        results = ctx.gather([self._sample_or_lost(*j, ctx) for j in jobs], limit=32)
        kept, rejected = [], []
        for (row, _, _, k), res in zip(jobs, results, strict=True):
            if isinstance(res, InfraError):  # the endpoint's failure: in no output
                ctx.lost_to_infra(res, unit="samples")
                continue
            new, reasons, variation = res
            # 6) counts
            ctx.metrics.inc("generations", len(reasons) + (new is not None))
            for reason in reasons:
                ctx.metrics.inc(f"rejected.{reason}")
            if new is not None:
                kept.append(new)
            else:
                ctx.metrics.inc("given_up")
                rejected.append(
                    row.derive(
                        id=stable_id("edde-rejected", row.id, k),
                        extra={
                            **(row.extra or {}),
                            "edde": {"sample": k, "variation": variation, "rejections": reasons},
                        },
                    )
                )
        ctx.metrics.inc("kept", len(kept))
        if kept:
            yield kept
        if rejected:
            yield Emit("rejected", rejected)
