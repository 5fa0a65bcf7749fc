"""Validation: a pipeline mapping (overridden, ``${VAR}``-expanded) into a
:class:`~.graph.ResolvedPipeline`: each stage's ``with:``, its inputs and their count,
``needs``, loops unrolled, cycles, the column wiring; every problem one ConfigError.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...core.errors import ConfigError, TrajsynthError
from ...stages import BASE_COLUMNS, build_stage, get_stage, load_builtin_stages
from .envvars import expand_env
from .graph import InputRef, ResolvedPipeline, ResolvedStage
from .models import Defaults, LoopSpec, PipelineSpec, StepSpec
from .overrides import apply_overrides, parse_overrides


def resolve_pipeline(
    raw: dict[str, Any],
    *,
    path: Path | None = None,
    overrides: list[str] | None = None,
    output: str | None = None,
) -> ResolvedPipeline:
    """Validate a pipeline given as a dict (see :func:`load_pipeline`)."""
    import copy

    raw = apply_overrides(copy.deepcopy(raw), parse_overrides(overrides))
    raw = expand_env(raw, where=str(path) if path else "pipeline")
    if output is not None:
        raw.setdefault("defaults", {})
        if raw["defaults"] is None:
            raw["defaults"] = {}
        raw["defaults"]["output"] = output
    where = str(path) if path else "pipeline"
    try:
        spec = PipelineSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_pipeline_error(exc, raw, where)) from None
    _check_defaults(spec.defaults)
    load_builtin_stages(spec.plugins)
    if not spec.stages:
        raise ConfigError(f"{where}: `stages` is empty")
    flat = _unroll(spec)

    ids = [step.id for step, _ in flat]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"stage {dupes[0]!r}: id used more than once")
    steps = {step.id: step for step, _ in flat}

    resolved: dict[str, ResolvedStage] = {}
    base_dir = path.parent if path else Path.cwd()
    for step, iteration in flat:
        try:
            cls = get_stage(step.uses)
        except TrajsynthError as exc:
            raise ConfigError(f"stage {step.id!r}: uses: {exc.message}", hint=exc.hint) from None
        stage = build_stage(step.uses, step.with_, where=f"stage {step.id!r}: with")
        inputs = [_resolve_ref(step.id, ref, steps, base_dir) for ref in step.from_]
        lo, hi = cls.inputs_range
        if len(inputs) < lo or (hi is not None and len(inputs) > hi):
            want = (
                f"exactly {lo}"
                if lo == hi
                else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            )
            raise ConfigError(
                f"stage {step.id!r}: from: {cls.name} takes {want} input(s), got {len(inputs)}"
            )
        for need in step.needs:
            if need not in steps:
                raise ConfigError(f"stage {step.id!r}: needs: {need!r} is not a stage id")
            if not get_stage(steps[need].uses).makes_artifact:
                raise ConfigError(
                    f"stage {step.id!r}: needs: {need!r} ({steps[need].uses}) makes no artifact"
                )
        resolved[step.id] = ResolvedStage(
            step=step,
            stage=stage,
            inputs=inputs,
            shard_rows=step.shard_rows or spec.defaults.shard_rows,
            iteration=iteration,
            needs=list(step.needs),
        )

    order = _toposort(resolved)
    _check_columns(resolved, order)
    return ResolvedPipeline(spec=spec, path=path, stages=resolved, order=order, raw=raw)


def _check_defaults(defaults: Defaults) -> None:
    """Validate the blocks of ``defaults`` that their users would otherwise only read once a
    stage runs: every ``llm.<role>`` (with its simulator settings) and ``env``."""
    from ...envs.factory import EnvFactory
    from ...llm.client import role_config
    from ...llm.sim import SimConfig

    for role, settings in defaults.llm.items():
        if settings is not None and not isinstance(settings, dict):
            raise ConfigError(f"defaults.llm.{role}: expected a mapping of role settings")
        config = role_config(role, defaults.llm)
        if config.backend == "sim":
            try:
                SimConfig.model_validate(config.sim)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
                raise ConfigError(f"defaults.llm.{role}.sim.{loc}: {msg}") from None
    try:
        EnvFactory(defaults.env)
    except ConfigError as exc:
        raise ConfigError(f"defaults.env: {exc.message}", hint=exc.hint) from None


def _unroll(spec: PipelineSpec) -> list[tuple[StepSpec, int]]:
    """Flatten loops into ``(step, iteration)`` pairs with rewritten ids and references."""
    aliases: dict[str, str] = {}
    for entry in spec.stages:
        if isinstance(entry, LoopSpec):
            body = {s.id for s in entry.stages}
            for name, carry in entry.carry.items():
                if carry.next not in body:
                    raise ConfigError(
                        f"loop {entry.loop!r}: carry.{name}.next: {carry.next!r} is not a "
                        f"stage of the loop (its stages are {sorted(body)})"
                    )
            for sid in body:
                aliases[f"{entry.loop}.{sid}"] = f"{entry.loop}{entry.iterations}.{sid}"

    def outside(ref: str) -> str:
        name, sep, out = ref.partition(":")
        return aliases.get(name, name) + sep + out

    flat: list[tuple[StepSpec, int]] = []
    for entry in spec.stages:
        if isinstance(entry, StepSpec):
            flat.append(
                (
                    entry.model_copy(
                        update={
                            "from_": [outside(r) for r in entry.from_],
                            "needs": [outside(r) for r in entry.needs],
                        }
                    ),
                    0,
                )
            )
            continue
        for k in range(1, entry.iterations + 1):
            for step in entry.stages:
                sid = f"{entry.loop}{k}.{step.id}"
                refs = {
                    key: [
                        r
                        for r in (_loop_ref(x, sid, k, entry, outside) for x in getattr(step, key))
                        if r is not None
                    ]
                    for key in ("from_", "needs")
                }
                flat.append((step.model_copy(update={"id": sid, **refs}), k))
    return flat


def _loop_ref(
    ref: str, step_id: str, k: int, loop: LoopSpec, outside: Callable[[str], str]
) -> str | None:
    """A reference inside iteration ``k`` of ``loop``: body ids → this iteration's stage,
    ``$name`` → the carried value (None when it has no value yet), others unchanged."""
    name, sep, out = ref.partition(":")
    if name.startswith("$"):
        carry = loop.carry.get(name[1:])
        if carry is None:
            raise ConfigError(
                f"stage {step_id!r}: {name} is not carried by loop {loop.loop!r} "
                f"(it carries {sorted(loop.carry)})"
            )
        if k == 1:
            return None if carry.init is None else outside(carry.init) + sep + out
        return f"{loop.loop}{k - 1}.{carry.next}{sep}{out}"
    if name in {s.id for s in loop.stages}:
        return f"{loop.loop}{k}.{name}{sep}{out}"
    return outside(ref)


def _resolve_ref(stage_id: str, ref: str, steps: dict[str, StepSpec], base_dir: Path) -> InputRef:
    name, _, output = ref.partition(":")
    if name in steps:
        try:
            outputs = get_stage(steps[name].uses).outputs
        except TrajsynthError:
            outputs = ("main",)
        out = output or "main"
        valid = {"main", *outputs}
        if out not in valid:
            raise ConfigError(
                f"stage {stage_id!r}: from: {name!r} has no output {out!r} (it has {sorted(valid)})"
            )
        if out == outputs[0]:
            out = "main"
        return InputRef(stage=name, output=out)
    for candidate in (Path(ref), base_dir / ref):
        if candidate.exists():
            return InputRef(path=candidate)
    if "/" in ref or "\\" in ref:  # meant as a path: it must be made before the run
        raise ConfigError(
            f"stage {stage_id!r}: from: {ref!r} does not exist",
            hint="an input folder is made before the run (the pipeline's header says how); "
            f"stage ids are {sorted(steps)}",
        )
    raise ConfigError(
        f"stage {stage_id!r}: from: {ref!r} is neither a stage id nor an existing path",
        hint=f"stage ids are {sorted(steps)}",
    )


def _toposort(stages: dict[str, ResolvedStage]) -> list[str]:
    graph = {
        sid: {r.stage for r in s.inputs if r.stage} | set(s.needs) for sid, s in stages.items()
    }
    sorter = graphlib.TopologicalSorter(graph)
    try:
        order = list(sorter.static_order())
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        raise ConfigError(
            f"stage {cycle[0]!r}: from: stages form a cycle: {' → '.join(cycle)}"
        ) from None
    # keep the file's order where the graph allows (stable, readable run logs)
    position = {sid: i for i, sid in enumerate(stages)}
    done: list[str] = []
    remaining = set(order)
    while remaining:
        ready = [s for s in remaining if graph[s] <= set(done)]
        nxt = min(ready, key=position.__getitem__)
        done.append(nxt)
        remaining.remove(nxt)
    return done


def _check_columns(stages: dict[str, ResolvedStage], order: list[str]) -> None:
    """Every column a stage reads must be a base column or written upstream."""
    available: dict[str, set[str] | None] = {}  # None: unknown (external input) → anything
    for sid in order:
        rs = stages[sid]
        cls = type(rs.stage)
        known = set(BASE_COLUMNS)
        upstream: set[str] | None = known
        for ref in rs.inputs:
            if ref.path is not None:
                upstream = None
                break
            cols = available[ref.stage_id]
            if cols is None:
                upstream = None
                break
            known |= cols
        if upstream is not None:
            missing = [c for c in cls.reads if c not in upstream]
            if missing:
                raise ConfigError(
                    f"stage {sid!r}: {cls.name} reads {missing}, which no stage upstream writes",
                    hint="add the stage that computes it (e.g. `score` before `filter`)",
                )
            available[sid] = upstream | set(cls.writes)
        else:
            available[sid] = None


def _pipeline_error(exc: ValidationError, raw: dict[str, Any], where: str) -> str:
    msgs = []
    stages = raw["stages"] if isinstance(raw.get("stages"), list) else []

    def clean(parts: list[Any]) -> str:
        return ".".join(str(x) for x in parts).replace("from_", "from").replace("with_", "with")

    for err in exc.errors():
        loc = list(err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        if loc[:1] == ["stages"] and len(loc) >= 2 and isinstance(loc[1], int):
            entry = stages[loc[1]] if loc[1] < len(stages) else {}
            entry = entry if isinstance(entry, dict) else {}
            rest = loc[2:]
            if rest[:1] in (["step"], ["loop"]):  # the union's tag
                rest = rest[1:]
            label = f"stage {entry['id']!r}" if entry.get("id") else f"stages[{loc[1]}]"
            if "loop" in entry:
                label = f"loop {entry['loop']!r}"
                body = entry["stages"] if isinstance(entry.get("stages"), list) else []
                if rest[:1] == ["stages"] and len(rest) >= 2 and isinstance(rest[1], int):
                    inner = body[rest[1]] if rest[1] < len(body) else {}
                    if isinstance(inner, dict) and inner.get("id"):
                        label = f"stage '{entry['loop']}.{inner['id']}'"
                        rest = rest[2:]
            fld = clean(rest)
            msgs.append(f"{label}: {fld}: {msg}" if fld else f"{label}: {msg}")
        else:
            fld = clean(loc)
            msgs.append(f"{where}: {fld}: {msg}" if fld else f"{where}: {msg}")
    return "; ".join(msgs)
