"""``verify``: APIGen's hierarchical verification (Liu et al. 2024, arXiv:2406.18518, §3.2) of
multi-turn trajectories, plus tau-bench's final-state check and BFCL's call matching where
the task has ground truth. The checks themselves are the shared verifiers of
:mod:`trajsynth.envs.verifiers`; this stage orders them, replays, and records the outcome.

For each row, layer after layer, stopping at the first that fails (as APIGen does, so later
and costlier checks only see rows that passed the earlier ones):

1) **format**: every call's name and arguments against the row's ``tools``
   (:func:`~trajsynth.envs.verifiers.check_trajectory`: unknown tool, malformed arguments,
   missing required, wrong type, extra parameter, enum, constraints) → ``format_errors``;
2) **execution**: the calls are replayed, in order, in a fresh environment of the row's
   domain (``ctx.envs.make(domain, seed, initial_state)``). The replay fails when a recorded
   tool result differs from what the tool returns now (a fabricated or stale observation;
   volatile parts such as timestamps and minted ids are left out of the comparison,
   :mod:`trajsynth.core.volatile`),
   and, with ``tool_errors_fail`` (APIGen's strict rule for single-turn data), when any call
   returns an error. A domain with no environment (imported foreign data) skips this layer
   and the final-state check, with the reason recorded in ``extra["verify"]["skipped"]``;
3) **final state** (tau-bench): the trajectory's calls and the gold calls, each replayed on a
   fresh environment, must end in the same state
   (:func:`~trajsynth.envs.verifiers.final_state_match`), and the required outputs must
   appear in the final answer (:func:`~trajsynth.envs.verifiers.required_outputs_present`);
4) **call match** (BFCL AST semantics, :func:`~trajsynth.envs.verifiers.match_parallel`):
   the calls that did not return an error against the gold calls — ``exact``: the same
   multiset; ``contains``: every gold call matched by a distinct call (extra reads allowed);
5) **semantic judge** (optional, ``judge: true``): the ``judge`` LLM role answers APIGen's
   semantic-checker prompt with ``{"thought", "passes": "yes"|"no"}`` → the ``judge``
   column. A reply with no readable verdict (``judge_unreadable``) or a request the endpoint
   refused (``judge_failed``) skips the layer, with the reason in ``extra["verify"]``.

Endpoint failures are not verdicts: when the judge's request, or a simulated tool's answer
during a replay (the ``tool`` role), failed for good because of the endpoint (retries
exhausted, 429s, circuit open), the row is dropped and counted as lost to the endpoint
(``infra.lost``), never passed without its judge nor failed as a replay that raised.

Which layers decide ``success``: format and execution always; with an environment, the final
state and required outputs (any path that reaches the gold state passes, as in tau-bench),
and call match is recorded but does not decide; without one, required outputs and call
match decide only for rows that carry no earlier verdict (an imported row keeps the verdict
its source computed, unless its format fails); the judge decides when enabled. When no
layer decides, ``success`` keeps its earlier value.

Writes ``success``, ``reward_components`` (``format``, ``execution``, ``final_state``,
``outputs``, ``call_match``, ``judge``: 1.0 pass / 0.0 fail, absent when not run; ``task``:
the verdict), ``format_errors``, ``failure_layer`` and ``failure_reason`` (the first failing
layer), ``judge``, and ``extra["verify"]`` (layers run, layers skipped with their reasons).

Where the rows go: a row that did not verify (``success`` false, by a layer here or by the
verdict it came with when no layer here decided) goes to the ``failed`` output with its
``failure_layer`` and ``failure_reason``, never to the main one, so data that failed
verification does not flow on to the next stage; ``trajsynth run`` shows it as
``verified (verify): 42 → 40 rows (+ failed 2)``, and ``from: verified:failed`` reads them
(e.g. for a repair stage). With ``keep_failed: true`` they stay on the main output, marked
``success: false`` (the run's summary line counts them as marked failed). Rows no layer could
judge (``success`` stays null) stay on the main output: ``filter`` drops them by default.
Counts: ``rows``, ``success``, ``failed`` (rows that did not verify), ``failed.<layer>``,
``skipped.<layer>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from ...core.errors import ConfigError
from ...core.prompts import conversation_text
from ...core.schema import Judge, Trajectory
from ...core.task import GroundTruth
from ...quality.trace import parse_trace
from ..common.replay import final_state_holds, replay_calls
from ..context import Context
from ..kinds import Emit, RowStage, StageConfig
from ..registry import register

__all__ = ["JUDGE_PROMPT", "Verify", "VerifyConfig"]


#: APIGen's semantic checker, as distilabel's re-implementation gives the original prompt
#: (APIGen, arXiv:2406.18518, §3.2), adapted from one query to a whole conversation
JUDGE_PROMPT = """As a data quality evaluator, you must assess the alignment between a user's \
request, the function calls an assistant made, the results they returned, and the \
assistant's final answer. Do not pass if:
1. The function calls do not align with the request's objective, or the arguments are wrong.
2. The functions were not chosen from the available ones.
3. The number of calls does not match what the user intended.
4. The results are irrelevant to the purpose of the functions.
5. The results contain errors or show that an execution failed and the assistant did not \
recover.
6. The final answer does not follow from the results.
Answer only with JSON: {"thought": "<concise reasoning>", "passes": "yes" or "no"}."""

LAYERS = ("format", "execution", "final_state", "outputs", "call_match", "judge")
#: layers that say whether the task was done (format and execution only say it was not)
OUTCOME_LAYERS = frozenset({"final_state", "outputs", "call_match", "judge"})


class VerifyConfig(StageConfig):
    format: bool = Field(True, description="Layer 1: calls against the tools' schemas.")
    execution: bool = Field(True, description="Layer 2: replay the calls in a fresh environment.")
    match_observations: bool = Field(
        True, description="Execution: a recorded tool result must equal the replayed one."
    )
    tool_errors_fail: bool = Field(
        False,
        description="Execution: any call that returns an error fails the row (APIGen's rule "
        "for single-turn data; off for multi-turn data, where recovering from an error is "
        "part of the task).",
    )
    final_state: bool = Field(True, description="Layer 3: tau-bench final state + outputs.")
    use_cached_state: bool = Field(
        False, description="Trust ground_truth.final_state_hash instead of replaying the gold."
    )
    call_match: Literal["exact", "contains", "off"] = Field(
        "exact", description="Layer 4: BFCL matching of the calls against the gold calls."
    )
    judge: bool = Field(False, description="Layer 5: the LLM judge (role `judge`).")
    judge_max_chars: int = Field(
        12_000, ge=500, description="Longest conversation text shown to the judge."
    )
    keep_failed: bool = Field(
        False,
        description="Keep rows that fail verification on the main output (marked success: "
        "false) instead of routing them to the `failed` output.",
    )


@dataclass
class _Outcome:
    """What the layers found for one row."""

    components: dict[str, float] = field(default_factory=dict)
    deciding: list[tuple[str, bool, str]] = field(default_factory=list)  # (layer, ok, reason)
    skipped: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    format_errors: list[str] = field(default_factory=list)
    judge: Judge | None = None

    def record(self, layer: str, ok: bool, reason: str = "", *, decides: bool = True) -> bool:
        self.components[layer] = 1.0 if ok else 0.0
        self.ran.append(layer)
        if decides:
            self.deciding.append((layer, ok, reason))
        return ok


def _parse_verdict(text: str | None) -> tuple[bool | None, str]:
    """(passes, thought) from the judge's reply; None when there is no readable verdict."""
    if not text:
        return None, ""
    try:
        import json_repair

        value = json_repair.loads(text)
    except Exception:  # json-repair gives up only on hopeless text
        value = None
    if isinstance(value, dict):
        verdict = str(value.get("passes", "")).strip().lower()
        thought = str(value.get("thought", ""))
        if verdict in ("yes", "no"):
            return verdict == "yes", thought
    lowered = text.lower()
    if '"passes": "no"' in lowered or "passes: no" in lowered:
        return False, text
    return None, text


@register
class Verify(RowStage[VerifyConfig]):
    """APIGen's layers (format, execution replay, LLM judge) + final state and call match;
    rows that fail go to the `failed` output."""

    name = "verify"
    writes = ("success", "reward_components", "format_errors", "failure_layer", "failure_reason")
    outputs = ("main", "failed")
    concurrency = 32

    def setup(self, ctx: Context) -> None:
        cfg = self.config
        if cfg.judge:
            try:
                ctx.llm("judge")
            except ImportError as exc:
                raise ConfigError(
                    "verify: judge: true needs the LLM layer (trajsynth.llm)",
                    hint="set judge: false, or install trajsynth with its LLM backends",
                ) from exc

    async def aprocess_row(self, row: Trajectory, ctx: Context) -> list[Any]:
        verified = await self._verify(row, ctx)
        if verified.success is False:
            ctx.metrics.inc("failed")
            if not self.config.keep_failed:
                return [Emit("failed", [verified])]
        return [verified]

    async def _verify(self, row: Trajectory, ctx: Context) -> Trajectory:
        """The row with every layer's outcome recorded (see the module docstring)."""
        cfg = self.config
        out = _Outcome()
        steps = row.assistant_steps()
        gt = row.ground_truth
        ctx.metrics.inc("rows")
        if not steps:
            out.skipped = {layer: "no conversation" for layer in LAYERS}
            return self._finish(row, out, ctx)
        has_env = row.domain in self._domains(ctx)
        no_env = f"no environment for domain {row.domain!r}"
        # 1) format
        if cfg.format:
            from ...envs.verifiers import check_trajectory

            out.format_errors = check_trajectory(row)
            if not out.record("format", not out.format_errors, "; ".join(out.format_errors[:3])):
                return self._finish(row, out, ctx)
        # 2) execution
        if cfg.execution:
            if not has_env:
                out.skipped["execution"] = no_env
            else:
                ok, reason = self._replay(row, gt, ctx)
                if not out.record("execution", ok, reason):
                    return self._finish(row, out, ctx)
        # 3) final state and required outputs
        if cfg.final_state and gt is not None:
            from ...envs.verifiers import final_state_match, required_outputs_present

            decides = has_env or row.success is None
            if not has_env:
                out.skipped["final_state"] = no_env
            else:
                ok, reason = self._final_state(row, gt, ctx, final_state_match, cfg)
                if not out.record("final_state", ok, reason):
                    return self._finish(row, out, ctx)
            if gt.required_outputs:
                ok, missing = required_outputs_present(row.final_answer(), gt.required_outputs)
                reason = f"missing outputs: {missing}" if missing else ""
                if not out.record("outputs", ok, reason, decides=decides) and decides:
                    return self._finish(row, out, ctx)
        # 4) call match
        if cfg.call_match != "off" and gt is not None and gt.flat_calls():
            ok, reason = self._call_match(row, gt, cfg.call_match)
            decides = not has_env and row.success is None
            if not out.record("call_match", ok, reason, decides=decides) and decides:
                return self._finish(row, out, ctx)
        # 5) semantic judge
        if cfg.judge:
            await self._judge(row, ctx, out, cfg)
        return self._finish(row, out, ctx)

    # -- layers ---------------------------------------------------------------------------
    @staticmethod
    def _domains(ctx: Context) -> set[str]:
        try:
            return set(ctx.envs.domains())
        except ImportError:  # the envs layer is not installed: nothing can be replayed
            return set()

    def _replay(self, row: Trajectory, gt: GroundTruth | None, ctx: Context) -> tuple[bool, str]:
        cfg = self.config
        return replay_calls(
            row,
            gt,
            ctx.envs,
            tool_errors_fail=cfg.tool_errors_fail,
            match_observations=cfg.match_observations,
        )

    @staticmethod
    def _final_state(
        row: Trajectory, gt: GroundTruth, ctx: Context, final_state_match: Any, cfg: VerifyConfig
    ) -> tuple[bool, str]:
        return final_state_holds(row, gt, ctx.envs, use_cached=cfg.use_cached_state)

    @staticmethod
    def _call_match(row: Trajectory, gt: GroundTruth, mode: str) -> tuple[bool, str]:
        from ...envs.verifiers import match_call, match_parallel

        trace = parse_trace([m.model_dump() for m in row.messages], row.tools)
        calls = [c for c, seen in zip(row.calls(), trace.calls, strict=True) if not seen.error]
        golds = gt.flat_calls()
        if mode == "exact":
            res = match_parallel(calls, golds, row.tools)
            return bool(res), "" if res else f"{res.category}: {res.detail}"
        specs = {
            t.get("function", t).get("name"): t.get("function", t).get("parameters")
            for t in row.tools or []
            if isinstance(t, dict)
        }
        used: set[int] = set()
        for gold in golds:
            for i, call in enumerate(calls):
                if i not in used and match_call(call, gold, specs.get(gold.name)):
                    used.add(i)
                    break
            else:
                return False, f"no call matches gold {gold.name}"
        return True, ""

    @staticmethod
    async def _judge(row: Trajectory, ctx: Context, out: _Outcome, cfg: VerifyConfig) -> None:
        client = ctx.llm("judge")
        tools = ", ".join(
            t.get("function", t).get("name", "?") for t in row.tools or [] if isinstance(t, dict)
        )
        prompt = (
            f"Available functions: {tools or '(none)'}\n\nUser request: {row.goal}\n\n"
            f"Conversation:\n{conversation_text(row, cfg.judge_max_chars)}"
        )
        calls = [{"name": c.name, "arguments": c.parsed_arguments() or {}} for c in row.calls()]
        results = [m.content or "" for m in row.messages if m.role == "tool"]
        gold = row.ground_truth
        reference = (
            [c.model_dump(include={"name", "arguments"}) for c in gold.flat_calls()]
            if gold and gold.flat_calls()
            else None
        )
        result = await client.chat(
            [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": prompt}],
            tools=row.tools or None,
            temperature=0.0,
            seed=ctx.row_seed(row.id, "judge"),
            # what the prompt says, for the simulated judge (llm/sim/contracts.py JudgeMeta)
            metadata={
                "role": "judge",
                "mode": "apigen",
                "query": row.goal,
                "calls": calls,
                "results": results,
                "reference": reference,
            },
        )
        ctx.metrics.inc("judge_calls")
        result.raise_for_infra()  # the endpoint's failure: the row is lost, not unjudged
        if not result.ok:
            out.skipped["judge"] = f"judge gave no verdict: {result.error}"
            ctx.metrics.inc("judge_failed")
            return
        passes, thought = _parse_verdict(result.choices[0].message.content)
        if passes is None:
            out.skipped["judge"] = "judge gave no verdict: no readable verdict"
            ctx.metrics.inc("judge_unreadable")
            return
        out.judge = Judge(
            verdict="pass" if passes else "fail", score=float(passes), rationale=thought
        )
        out.record("judge", passes, f"judge: {thought[:300]}")

    # -- outcome ---------------------------------------------------------------------------
    def _finish(self, row: Trajectory, out: _Outcome, ctx: Context) -> Trajectory:
        failed = next(((layer, reason) for layer, ok, reason in out.deciding if not ok), None)
        if failed is not None:
            success: bool | None = False
        elif any(layer in OUTCOME_LAYERS for layer, _, _ in out.deciding):
            success = True
        else:  # format and replay passing say nothing about whether the task was done
            success = row.success
        components = {**row.reward_components, **out.components}
        if success is not None:
            components["task"] = 1.0 if success else 0.0
        extra = dict(row.extra) if isinstance(row.extra, dict) else {"extra": row.extra}
        extra["verify"] = {"layers": out.ran, "skipped": out.skipped}
        changes: dict[str, Any] = {
            "success": success,
            "reward_components": components,
            "format_errors": out.format_errors,
            "extra": extra,
        }
        if failed is not None:
            changes["failure_layer"], changes["failure_reason"] = failed[0], failed[1] or None
            ctx.metrics.inc(f"failed.{failed[0]}")
        elif success:
            changes["failure_layer"], changes["failure_reason"] = None, None
        elif success is False and not row.failure_reason:  # the verdict it came with stands
            changes["failure_reason"] = "failed before verify; no layer here decided otherwise"
        if out.judge is not None:
            changes["judge"] = out.judge
        for layer in out.skipped:
            ctx.metrics.inc(f"skipped.{layer}")
        if success:
            ctx.metrics.inc("success")
        return row.derive(**changes)
