"""``arena``: ASTRA-style verifiable arenas — each verified trajectory packaged as a
self-contained RL environment whose reward needs only the package (Tian et al. 2026, "ASTRA:
Automated Synthesis of agentic Trajectories and Reinforcement Arenas", arXiv:2601.21558;
code ``LianjiaTech/astra``). The package, its loader and its reward
live in :mod:`trajsynth.envs.arena` so that trainers use them without this stage.

For each verified row (``success`` true, with ground truth):

1) decomposition: one sub-goal per gold call — a sub-question, the call statement, the gold
   output as the sub-answer — and the dependency DAG from the task's data-flow bindings
   (ASTRA's decomposition trace);
2) tools: the task's tools plus ``distractors`` look-alike tools it does not need (ASTRA mixes
   irrelevant tools into the toolset);
3) implementation (``code``): ``reference`` — the built-in domain's tools; ``table`` — one
   generated Python function per tool with the gold outputs as embedded mock data (ASTRA's
   "Python implementation with embedded mock data"); ``llm`` — ASTRA step 4: the
   ``tool_maker`` role writes each tool's function from its document, its call statements and
   their outputs, retried up to ``tries`` times with the failure shown (a request the
   endpoint refused is a try without code: ``tool_requests_failed``). A request lost to the
   endpoint (retries exhausted, 429s, circuit open) is no try: the row is dropped and
   counted as lost to the endpoint (``infra.lost``), never rejected as wrong code;
4) verification: every gold call run through the package's own tools (generated code in the
   sandbox) must return its gold output, and the gold calls must score reward 1; otherwise
   the row is not packed (``rejected.<reason>``);
5) the row: the input row with ``extra["arena"]`` = the package (checksummed), ``method``
   ``arena`` and ``parent_ids`` the row. ``trajsynth arena pack`` writes the packages as
   files, which :func:`~trajsynth.envs.arena.arena_training_set` loads for a trainer.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from ...core.ids import stable_id
from ...core.schema import Message, Trajectory
from ...envs.arena import ArenaError, pack_arena
from ...envs.sandbox import Sandbox
from ..context import Context
from ..kinds import Emit, RowStage, StageConfig
from ..registry import register

__all__ = ["TOOL_PROMPT", "Arena", "ArenaConfig"]


#: ASTRA step 4 (tool document → call statement → Python implementation), for one tool
TOOL_PROMPT = """Write the Python implementation of a tool for a simulated environment. It must \
be one function named `{name}` taking the tool's parameters as keyword arguments and \
returning a JSON-serialisable value. Embed whatever mock data it needs in the code. It must \
return exactly the outputs listed for the calls below (other arguments may raise an \
exception). Standard library only; no network, no files. Answer with the code only, in a \
```python block."""


def code_block(text: str) -> str | None:
    """The body of the first ```-fenced block of ``text`` whose opening line is the fence and
    at most a language tag (```` ```python ````), or None. ``str.find`` only, each line looked
    at once: a pattern with a lazy body and optional parts backtracked quadratically on a
    reply of one unclosed fence and blank lines."""
    pos = 0
    while (i := text.find("```", pos)) >= 0:
        nl = text.find("\n", i + 3)
        if nl < 0:
            return None
        tag = text[i + 3 : nl].strip()
        if not tag or tag.replace("-", "").replace("+", "").replace(".", "").isalnum():
            close = text.find("```", nl + 1)
            return None if close < 0 else text[nl + 1 : close]
        pos = nl + 1
    return None


class ArenaConfig(StageConfig):
    code: Literal["reference", "table", "llm"] = Field(
        "table",
        description="Tool implementation: the built-in domain (reference), generated mock-data "
        "functions (table), or functions written by the tool_maker role (llm).",
    )
    distractors: int = Field(3, ge=0, le=32, description="Look-alike tools added.")
    tool_maker_role: str = Field("tool_maker", description="LLM role for code: llm.")
    tries: int = Field(3, ge=1, le=20, description="code: llm: attempts per tool.")


@register
class Arena(RowStage[ArenaConfig]):
    """ASTRA-style arenas: verified tasks packaged with a DAG, tools, code and a reward."""

    name = "arena"
    reads = ("success",)
    io_bound = True
    concurrency = 16

    @staticmethod
    def _box(ctx: Context) -> Sandbox:
        """The environment factory's shared sandbox (``defaults.env.sandbox``)."""
        return ctx.envs.sandbox

    async def aprocess_row(self, row: Trajectory, ctx: Context) -> list[Trajectory | Emit]:
        cfg = self.config
        ctx.metrics.inc("rows")
        if not row.success:
            ctx.metrics.inc("skipped.unverified")
            return []

        def make_env(domain: str, seed: int, initial_state: Any) -> Any:
            if domain not in ctx.envs.domains():
                return None
            return ctx.envs.make(domain, seed=seed, initial_state=initial_state)

        code: Any = cfg.code
        if cfg.code == "llm":
            code = await self._write_code(ctx, row)
            if code is None:
                return []
        sandbox = None if cfg.code == "reference" else self._box(ctx)
        try:
            package = await _in_thread(
                pack_arena,
                row,
                code=code,
                distractors=cfg.distractors,
                sandbox=sandbox,
                make_env=make_env,
            )
        except ArenaError as exc:
            ctx.metrics.inc(f"rejected.{_reason(exc.message)}")
            ctx.log.debug("arena %s: %s", row.id, exc.message)
            return []
        ctx.metrics.inc("packed")
        ctx.metrics.inc("sub_goals", len(package.sub_goals))
        extra = dict(row.extra) if isinstance(row.extra, dict) else {}
        extra["arena"] = package.model_dump(mode="json")
        return [
            row.derive(
                id=stable_id("arena", ctx.config_hash, row.id),
                extra=extra,
                **ctx.provenance(method="arena", parent_ids=[row.id], generator=row.generator),
            )
        ]

    # -- 3) ASTRA step 4: code from the tool_maker role --------------------------------------
    async def _write_code(self, ctx: Context, row: Trajectory) -> dict[str, str] | None:
        cfg = self.config
        from ...envs.arena import run_code

        gt = row.ground_truth
        if gt is None:
            ctx.metrics.inc("rejected.no_gold")
            return None
        tools = {t.get("function", t)["name"]: t.get("function", t) for t in row.tools or []}
        calls: dict[str, list[Any]] = {}
        for c in gt.flat_calls():
            calls.setdefault(c.name, []).append(c)
        sources: dict[str, str] = {}
        for name, golds in sorted(calls.items()):
            statements = "\n".join(
                f"{name}(**{json.dumps(c.arguments, ensure_ascii=False)}) -> "
                f"{json.dumps(c.output, ensure_ascii=False)}"
                for c in golds
            )
            feedback = ""
            for attempt in range(cfg.tries):
                prompt = (
                    f"Tool document: {json.dumps(tools.get(name, {}), ensure_ascii=False)}\n\n"
                    f"Calls and their outputs:\n{statements}{feedback}"
                )
                result = await ctx.llm(cfg.tool_maker_role).chat(
                    [
                        Message(role="system", content=TOOL_PROMPT.format(name=name)),
                        Message(role="user", content=prompt),
                    ],
                    None,
                    temperature=0.0 if attempt == 0 else 0.7,
                    seed=ctx.row_seed(row.id, name, attempt),
                    metadata={"role": cfg.tool_maker_role, "attempt": attempt},
                )
                ctx.metrics.inc("tool_requests")
                result.raise_for_infra()  # the endpoint's failure: the row is lost (step 3)
                if not result.ok:
                    ctx.metrics.inc("tool_requests_failed")
                text = result.choices[0].message.content or "" if result.ok else ""
                block = code_block(text)
                source = (text if block is None else block).strip()
                wrong = None
                for c in golds:
                    out, err = await _in_thread(run_code, self._box(ctx), name, source, c.arguments)
                    if err is not None or json.dumps(out, sort_keys=True) != json.dumps(
                        c.output, sort_keys=True
                    ):
                        wrong = f"{name}(**{json.dumps(c.arguments)}) gave {err or out}"
                        break
                if wrong is None:
                    sources[name] = source
                    break
                feedback = f"\n\nYour previous code was wrong: {wrong}. Fix it."
            else:
                ctx.metrics.inc("rejected.tool_code")
                return None
        return sources


async def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(fn, *args, **kwargs)


def _reason(message: str) -> str:
    for key, words in (
        ("tool_code", ("does not reproduce", "fails on gold call", "no code for")),
        ("expected_errors", ("meant to fail",)),
        ("no_gold", ("no gold calls",)),
        ("reference", ("reference", "final state")),
    ):
        if any(w in message for w in words):
            return key
    return "other"
