"""``jglv``: LoopTool's Judgement-Guided Label Verification (Zhang et al. 2025, "LoopTool: Closing
the Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148, "JGLV"; official code
``dataloop/judgement_label_verification.py``).

Input: GCP's failed samples (``extra["gcp"]``: the first mismatching step's label, the
student's prediction and the conversation before it). Per sample:

1) label and prediction equal, or equal as order-insensitive multisets of (name, arguments)
   → ``both_correct`` with **no judge call** (the released code's two shortcuts);
2) otherwise ``votes`` judge requests (default 3; the released default of one judge model
   gives one vote, so consensus — and EDDE — never happens) with LoopTool's
   prompt: the tools, the conversation, Response 1 = the label, Response 2 = the prediction,
   answer ``[RESPONSE1_INCORRECT/RESPONSE2_INCORRECT/BOTH_CORRECT/BOTH_INCORRECT]`` then
   ``Error Analysis: …``; each vote is a separate request (its own seed). The simulated
   judge, which cannot read prose, is told in the request's metadata what a judge reading
   the request works out: the calls it asks for at that step (``reference``: the label, or
   the clean calls where ``label_noise`` made the label wrong);
3) the verdict is read by substring as the released code does (an unreadable vote, or one
   whose request the endpoint refused, is ``llm_judge_failed``: counted apart as
   ``votes.unreadable`` and ``votes.request_failed``); majority label with
   ``consensus = top count ≥ min_consensus`` (default 2). A vote lost to the endpoint
   (retries exhausted, 429s, circuit open) is no vote: the sample is dropped from every
   output and counted as lost to the endpoint (``infra.lost``), so an endpoint's trouble
   never decides a consensus;
4) status: RESPONSE1_INCORRECT → ``original_incorrect`` (the label is wrong),
   RESPONSE2_INCORRECT → ``model_incorrect``, ``both_correct``, ``both_incorrect``;
5) routing: consensus ``original_incorrect`` → the label is replaced by the prediction (the
   gold step rewritten, the trajectory rebuilt by executing the new gold calls; one that does
   not execute cleanly is dropped) → output ``corrected`` (D_EE); consensus
   ``model_incorrect`` and ``original_incorrect`` are EDDE's seeds → ``main``, with
   ``extra["jglv"]`` (status, votes, the correct and incorrect responses, the error
   analysis); no consensus, ``both_incorrect`` (not expanded by the released filter),
   ``both_correct`` and failed judges → ``dropped``;
6) counts of every outcome in the metrics, and the number of judge calls; where rows carry
   ``label_noise``'s truth, ``noise.judged`` (wrong labels judged at their step),
   ``noise.found`` (those relabelled by consensus) and ``noise.false_alarms`` (right labels
   relabelled). A relabelled row drops the truth record when its new label is the clean one
   (and gets a ``relabelled`` record when a false alarm made it wrong).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.errors import InfraError
from ...core.extras import GcpRecord, JglvRecord, get, with_
from ...core.ids import stable_id
from ...core.schema import Message, Trajectory
from ...core.task import GoldCall
from ...llm.sim.contracts import VERDICT_STATUS, VERDICTS
from ..common.label_noise import NOISE_KEY, noise_of
from ..common.looptool import context_calls, locate_step, run_gold, step_text
from ..context import Context
from ..kinds import Emit, GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["JGLV", "JGLVConfig", "multiset_key", "parse_verdict"]

SYSTEM = """You are an expert evaluator of function calls. You compare two different \
function call responses to the same conversation and decide which is correct.

Available tools:
<tools>
{tools}
</tools>

Criteria: Correctness (the call does what the user asked), Parameter Accuracy (values match \
the request), Function Selection (the right functions), Completeness (nothing missing), \
Irrelevance (no needless calls)."""

USER = """Conversation:
{conversation}

Response 1:
{label}

Response 2:
{prediction}

Answer strictly in this form (each part at most two sentences):
[RESPONSE1_INCORRECT/RESPONSE2_INCORRECT/BOTH_CORRECT/BOTH_INCORRECT].
Error Analysis: ... Correct Approach: ..."""


class JGLVConfig(StageConfig):
    role: str = Field("judge", description="LLM role of the judges.")
    votes: int = Field(3, ge=2, description="Judge votes per sample (≥ 2, LoopTool intends 3).")
    min_consensus: int = Field(2, ge=2, description="Votes the majority verdict needs.")
    temperature: float = Field(0.0, ge=0, description="Judge temperature (LoopTool: 0).")
    replace_labels: bool = Field(
        True, description="Rewrite label-wrong samples with the prediction as their label."
    )


def multiset_key(step: Any) -> Any:
    """Step 1: a step's calls as an order-insensitive multiset (text steps as themselves)."""
    if not isinstance(step, list):
        return ("text", step)
    return frozenset(
        Counter(
            json.dumps({"name": c.get("name"), "arguments": c.get("arguments")}, sort_keys=True)
            for c in step
        ).items()
    )


def parse_verdict(text: str | None) -> tuple[str, str]:
    """Step 3: the verdict by substring (the first of the four written), and the error
    analysis text."""
    text = text or ""
    found = re.search("|".join(VERDICTS), text.upper())
    verdict = found.group(0) if found else "llm_judge_failed"
    match = re.search(r"Error Analysis:\s*(.*)", text, re.S | re.I)
    return verdict, (match.group(1).strip() if match else "")


def _conversation(context: list[dict[str, Any]]) -> str:
    lines = []
    for m in context:
        role = m.get("role", "")
        if role == "system":
            continue
        if m.get("tool_calls"):
            body = step_text(context_calls(m))
        else:
            body = str(m.get("content") or "")
        lines.append(f"{role.upper()}: {body}")
    return "\n".join(lines)


def replace_label(
    row: Trajectory, step: int | None, prediction: Any, ctx: Context
) -> Trajectory | None:
    """Step 5: the row with gold step ``step`` replaced by the prediction's calls, its
    trajectory rebuilt by executing the new gold; None when it cannot be (no step named, a
    text step, an execution error)."""
    gt = row.ground_truth
    where = locate_step(gt, step) if gt is not None and step is not None else None
    if gt is None or where is None or not isinstance(prediction, list) or not prediction:
        return None
    t, s = where
    calls = [GoldCall(name=c["name"], arguments=c["arguments"]) for c in prediction]
    turns = [turn.model_copy(deep=True) for turn in gt.turns]
    steps = list(turns[t].steps)
    steps[s] = calls
    turns[t] = turns[t].model_copy(update={"steps": steps})
    new_gt = gt.model_copy(update={"turns": turns, "final_state_hash": None})
    return run_gold(row, new_gt, ctx)


@register
class JGLV(GlobalStage[JGLVConfig]):
    """LoopTool JGLV: ≥2 judge votes with consensus; label-wrong → relabelled; else dropped."""

    name = "jglv"
    outputs = ("main", "corrected", "dropped")
    io_bound = True

    async def _votes(self, row: Trajectory, info: GcpRecord, ctx: Context) -> list[str]:
        cfg = self.config
        tools = "\n".join(json.dumps(t, ensure_ascii=False) for t in row.tools or [])
        label, pred = info.label, info.prediction
        messages = [
            Message(role="system", content=SYSTEM.format(tools=tools)),
            Message(
                role="user",
                content=USER.format(
                    conversation=_conversation(info.context),
                    label=step_text(label if isinstance(label, list) else None),
                    prediction=step_text(
                        pred if isinstance(pred, list) else None, info.prediction_text
                    ),
                ),
            ),
        ]
        client = ctx.llm(cfg.role)
        meta = {
            "role": "judge",
            "mode": "looptool",
            "label": label if isinstance(label, list) else "(text reply)",
            "prediction": pred if isinstance(pred, list) else (info.prediction_text or ""),
        }
        reference = _asked(row, info)
        if reference is not None:
            meta["reference"] = reference
        texts = []
        for v in range(cfg.votes):
            result = await client.chat(
                messages,
                None,
                temperature=cfg.temperature,
                seed=ctx.row_seed(row.id, "vote", v),
                metadata={**meta, "sample": v},
            )
            ctx.metrics.inc("judge_calls")
            result.raise_for_infra()  # no vote at all: the sample is lost (see step 3)
            if not result.ok:
                ctx.metrics.inc("votes.request_failed")
                texts.append("")
                continue
            text = result.choices[0].message.content or ""
            if parse_verdict(text)[0] not in VERDICTS:
                ctx.metrics.inc("votes.unreadable")
            texts.append(text)
        return texts

    async def _judged(
        self, row: Trajectory, info: GcpRecord, ctx: Context
    ) -> list[str] | InfraError:
        try:
            return await self._votes(row, info, ctx)
        except InfraError as exc:
            return exc

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        rows = [r for b in batches for r in to_records(b)]
        samples = [(r, get(r.extra, GcpRecord)) for r in rows]
        # 1) no judge for equal or multiset-equal responses
        to_judge = []
        out: dict[str, list[Trajectory]] = {"main": [], "corrected": [], "dropped": []}
        for row, info in samples:
            if info is None or info.label is None:
                ctx.metrics.inc("not_probed")
                out["dropped"].append(row)
                continue
            label, pred = info.label, info.prediction
            if label == pred or multiset_key(label) == multiset_key(pred):
                ctx.metrics.inc("both_correct_exact")
                out["dropped"].append(_tag(row, JglvRecord(status="both_correct", votes=[])))
                continue
            to_judge.append((row, info))
        # 2) the votes
        all_votes = ctx.gather([self._judged(r, i, ctx) for r, i in to_judge], limit=32)
        for (row, info), texts in zip(to_judge, all_votes, strict=True):
            if isinstance(texts, InfraError):  # the endpoint's failure: in no output
                ctx.lost_to_infra(texts, unit="samples")
                continue
            # 3) majority with consensus
            parsed = [parse_verdict(t) for t in texts]
            counts = Counter(v for v, _ in parsed)
            top, n_top = counts.most_common(1)[0]
            consensus = n_top >= cfg.min_consensus and top in VERDICT_STATUS
            # 4) status
            status = VERDICT_STATUS.get(top, "llm_judge_failed")
            analysis = next((a for v, a in parsed if v == top and a), "")
            record: dict[str, Any] = {
                "status": status,
                "consensus": consensus,
                "votes": [v for v, _ in parsed],
                "error_analysis": analysis,
            }
            label, pred = info.label, info.prediction
            if status == "model_incorrect":
                record.update(correct=label, incorrect=pred)
            elif status == "original_incorrect":
                record.update(correct=pred, incorrect=label)
            tagged = _tag(row, JglvRecord(**record))
            # injected noise (label_noise) against the verdict: JGLV's precision and recall
            noise = noise_of(row.extra)
            noisy_here = noise is not None and noise.get("step") == info.step
            flagged = consensus and status == "original_incorrect"
            ctx.metrics.inc("noise.judged", int(noisy_here))
            ctx.metrics.inc("noise.found", int(noisy_here and flagged))
            ctx.metrics.inc("noise.false_alarms", int(flagged and not noisy_here))
            # 5) routing
            if not consensus:
                ctx.metrics.inc("no_consensus")
                out["dropped"].append(tagged)
                continue
            fixed = None
            if status == "original_incorrect" and cfg.replace_labels:
                try:
                    fixed = replace_label(tagged, info.step, pred, ctx)
                except InfraError as exc:  # a simulated tool's endpoint failed: lost
                    ctx.lost_to_infra(exc, unit="samples")
                    continue
            ctx.metrics.inc(status)
            if status in ("model_incorrect", "original_incorrect"):
                out["main"].append(tagged)
            else:
                out["dropped"].append(tagged)
            if status == "original_incorrect" and cfg.replace_labels:
                if fixed is None:
                    ctx.metrics.inc("corrected_invalid")
                    continue
                ctx.metrics.inc("corrected")
                out["corrected"].append(
                    fixed.derive(
                        id=stable_id("jglv", row.id, json.dumps(pred, sort_keys=True)),
                        extra=_relabelled_noise(fixed.extra, info),
                        **ctx.provenance(method="jglv", parent_ids=[row.id]),
                    )
                )
        # 6) counts are in the metrics; outputs
        if out["main"]:
            yield out["main"]
        for name in ("corrected", "dropped"):
            if out[name]:
                yield Emit(name, out[name])


def _asked(row: Trajectory, info: GcpRecord) -> list[dict[str, Any]] | None:
    """Step 2's ``reference`` for the simulated judge: the calls the conversation's request
    asks for at the judged step — what a judge reading the request works out. That is the
    label, unless the label was made wrong on purpose (``label_noise``), whose record keeps
    the clean calls. A real endpoint reads only the prompt (metadata is never sent to it)."""
    label = info.label
    if not isinstance(label, list):
        return None
    noise = noise_of(row.extra)
    if noise is not None and noise.get("step") == info.step:
        return noise["clean"]
    return label


def _relabelled_noise(extra: dict[str, Any] | None, info: GcpRecord) -> dict[str, Any]:
    """A relabelled row's injected-noise record (bookkeeping of ``label_noise``'s truth, for
    the report): gone when the new label is the clean one, a ``relabelled`` record when a
    false alarm put a wrong label where a right one was, kept when the noise sits at another
    step."""
    out = dict(extra or {})
    noise = noise_of(out)
    if noise is not None and noise.get("step") != info.step:
        return out
    out.pop(NOISE_KEY, None)
    asked = noise["clean"] if noise is not None else info.label
    if isinstance(asked, list) and multiset_key(info.prediction) != multiset_key(asked):
        out[NOISE_KEY] = {
            "step": info.step,
            "kind": "relabelled",
            "clean": asked,
            "noisy": info.prediction,
        }
    return out


def _tag(row: Trajectory, record: JglvRecord) -> Trajectory:
    return row.derive(extra=with_(row.extra, record))
