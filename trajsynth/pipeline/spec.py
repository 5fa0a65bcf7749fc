"""Pipeline files: YAML → a validated stage graph.

A pipeline file::

    name: tiny
    defaults:              # shared by every stage
      seed: 0
      output: runs/tiny    # run folder (overridden by --out)
      shard_rows: 50000
      llm: {teacher: {backend: sim}}
    plugins: [my_package.stages]   # modules that register extra stages
    stages:
      - id: raw
        uses: synthetic
        with: {rows: 1000}
      - id: sampled
        uses: sample
        from: raw          # a stage id, `id:output` for a side output, or a path
        with: {n: 100}

Everything is checked before any stage runs: YAML syntax, unknown or mistyped fields, unknown
stages, each stage's ``with:`` against its config model, inputs that name no stage and no
path, the number of inputs, cycles, and the column wiring (a stage that reads ``quality_score``
needs a stage upstream that writes it). Each problem is one :class:`ConfigError` whose message
starts with the stage id and names the field.

Overrides (``--set``) are applied to the YAML before validation:
``stages.rollouts.with.samples=16`` (a stage addressed by its id), ``defaults.seed=3``.
"""

from __future__ import annotations

import graphlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AliasChoices, Discriminator, Field, Tag, ValidationError, field_validator

from ..core.config import StrictModel
from ..core.errors import ConfigError, TrajsynthError
from ..core.ids import stable_hash
from ..stages import (
    BASE_COLUMNS,
    Stage,
    StageConfig,
    build_stage,
    get_stage,
    load_builtin_stages,
)

__all__ = [
    "Defaults",
    "InputRef",
    "PipelineSpec",
    "ResolvedPipeline",
    "ResolvedStage",
    "StepSpec",
    "apply_overrides",
    "builtin_pipelines",
    "expand_env",
    "load_pipeline",
    "parse_overrides",
    "pipeline_json_schema",
    "resolve_pipeline",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class Defaults(StrictModel):
    """Settings shared by every stage of a pipeline."""

    seed: int = Field(default=0, description="Base seed; every stage derives its RNGs from it.")
    output: str | None = Field(
        default=None, description="Run folder (default runs/<name>); --out overrides it."
    )
    shard_rows: int = Field(default=50_000, ge=1, description="Rows per output shard.")
    executor: Literal["local", "ray"] = Field(
        default="local",
        description="Where map-stage units run: local processes/threads, or Ray tasks.",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster address ('auto' to join a running cluster); none = local Ray.",
    )
    workers: int = Field(
        default=0, ge=0, description="Processes for CPU-bound map stages (0 = one per core)."
    )
    pool_min_rows: int = Field(
        default=20_000,
        ge=0,
        description="CPU-bound map stages use the process pool only from this many input rows.",
    )
    io_concurrency: int = Field(
        default=4, ge=1, description="Units run at once by I/O-bound (LLM) map stages."
    )
    llm: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="LLM roles: {role: {backend, model, base_url, ...}}."
    )
    env: dict[str, Any] = Field(default_factory=dict, description="Environment settings.")
    cache_dir: str | None = Field(
        default=None, description="LLM response cache (default <run>/cache)."
    )
    max_infra_error_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Largest share of a stage's rollouts (or rows) lost to LLM endpoint "
        "failures (retries exhausted, circuit open) before the stage fails so that a rerun "
        "plays them again; 0: every one must be played.",
    )
    allow_unverified: bool = Field(
        default=False,
        description="Accept a mostly unverified final output (more than half its rows with "
        "success false or null, or none left once failures were set aside); otherwise "
        "`trajsynth run` warns and exits 1.",
    )


class StepSpec(StrictModel):
    """One ``stages:`` entry."""

    id: str = Field(description="Unique stage id; also the name of its output folder.")
    uses: str = Field(description="Registered stage name (see `trajsynth stages`).")
    from_: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("from", "from_"),
        serialization_alias="from",
        description="Inputs: stage ids, `id:output` for side outputs, or paths.",
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("with", "with_"),
        serialization_alias="with",
        description="The stage's config (see `trajsynth stages`).",
    )
    needs: list[str] = Field(
        default_factory=list,
        description="Stages whose artifacts (e.g. a trained checkpoint) this stage uses.",
    )
    shard_rows: int | None = Field(default=None, ge=1, description="Overrides defaults.")
    min_rows: int | None = Field(
        default=None,
        ge=0,
        description="Fewest rows the stage must yield, else the run fails with the reasons the "
        "stage counted (default 1 for source stages, 0 for the others).",
    )
    description: str = ""

    @field_validator("from_", "needs", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        if v is None:
            return []
        return [v] if isinstance(v, str) else v

    @field_validator("with_", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("id")
    @classmethod
    def _id_chars(cls, v: str) -> str:
        if not _ID.match(v) or ":" in v:
            raise ValueError("ids use letters, digits, '_', '-' and '.' only")
        return v


class CarrySpec(StrictModel):
    """A value a loop carries from one iteration to the next (``$name`` inside the loop)."""

    init: str | None = Field(
        default=None,
        description="What $name means in the first iteration: a stage id outside the loop "
        "(or null: then $name is dropped from `from`/`needs` in the first iteration).",
    )
    next: str = Field(description="Stage of the loop body whose output $name is next time.")


class LoopSpec(StrictModel):
    """A block of stages repeated ``iterations`` times (e.g. LoopTool's train → probe → fix).

    Iteration k's stages get ids ``<loop><k>.<id>`` (``round2.train``); inside the body, a
    body id means the same iteration's stage and ``$name`` a carried value; outside the loop,
    ``<loop>.<id>`` means the last iteration's stage. Each stage sees its iteration number in
    ``ctx.iteration`` (and in the ``iteration`` column of the rows it makes).
    """

    loop: str = Field(description="Loop name; prefixes the ids of its stages.")
    iterations: int = Field(ge=1, description="How many times the body runs.")
    carry: dict[str, CarrySpec] = Field(
        default_factory=dict, description="Values passed from one iteration to the next."
    )
    stages: list[StepSpec] = Field(description="The loop body.")
    description: str = ""

    @field_validator("loop")
    @classmethod
    def _name_chars(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z][A-Za-z_\-]*$", v):
            raise ValueError("loop names use letters, '_' and '-' (no digits or dots)")
        return v


def _entry_kind(value: Any) -> str:
    return "loop" if isinstance(value, dict) and "loop" in value else "step"


Entry = Annotated[
    Annotated[StepSpec, Tag("step")] | Annotated[LoopSpec, Tag("loop")],
    Discriminator(_entry_kind),
]


class PipelineSpec(StrictModel):
    """A whole pipeline file."""

    name: str = Field(description="Pipeline name (the default run folder is runs/<name>).")
    description: str = ""
    defaults: Defaults = Field(default_factory=Defaults)
    plugins: list[str] = Field(
        default_factory=list, description="Modules imported first; they may register stages."
    )
    stages: list[Entry] = Field(
        description="The stages (or loops of stages), in any order; `from:` wires them."
    )


@dataclass(frozen=True)
class InputRef:
    """One resolved input of a stage: another stage's output, or a path on disk."""

    stage: str | None = None
    output: str = "main"
    path: Path | None = None

    @property
    def stage_id(self) -> str:
        """The stage whose output this is (for an input that is not a path)."""
        assert self.stage is not None, "an input is another stage's output or a path"
        return self.stage

    def __str__(self) -> str:
        if self.path is not None:
            return str(self.path)
        return self.stage_id if self.output == "main" else f"{self.stage}:{self.output}"


@dataclass
class ResolvedStage:
    step: StepSpec
    stage: Stage[Any]
    inputs: list[InputRef]
    shard_rows: int
    iteration: int = 0
    needs: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.step.id

    @property
    def config(self) -> StageConfig:
        config: StageConfig = self.stage.config
        return config


@dataclass
class ResolvedPipeline:
    spec: PipelineSpec
    path: Path | None
    stages: dict[str, ResolvedStage]
    order: list[str]
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def config_hash(self) -> str:
        return stable_hash(self.raw)

    def sinks(self) -> list[str]:
        """Stages whose main output no other stage reads (the pipeline's results)."""
        used = {ref.stage for s in self.stages.values() for ref in s.inputs if ref.stage}
        return [sid for sid in self.order if sid not in used]


# --------------------------------------------------------------------------------------
# overrides
# --------------------------------------------------------------------------------------


def parse_overrides(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["a.b=1", "c=x"]`` → ``[("a.b", 1), ("c", "x")]`` with YAML scalar typing."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        key, _, text = item.partition("=")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        out.append((key.strip(), value))
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Set each dotted key in ``raw``; ``stages.<id>`` addresses a stage by its id (also a
    stage inside a loop block; ``stages.<loop>`` addresses the loop block itself)."""
    for key, value in overrides:
        parts = key.split(".")
        node: Any = raw
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                match = [
                    s for s in node if isinstance(s, dict) and part in (s.get("id"), s.get("loop"))
                ]
                if not match:  # a stage inside a loop block, by its own id
                    match = [
                        s
                        for block in node
                        if isinstance(block, dict) and isinstance(block.get("stages"), list)
                        for s in block["stages"]
                        if isinstance(s, dict) and s.get("id") == part
                    ]
                if not match:
                    ids = [s.get("id") or s.get("loop") for s in node if isinstance(s, dict)]
                    raise ConfigError(f"--set {key}: no stage with id {part!r} (ids: {ids})")
                if last:
                    raise ConfigError(f"--set {key}: cannot replace a whole stage")
                node = match[0]
                continue
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is not a mapping")
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
    return raw


# --------------------------------------------------------------------------------------
# loading and validation
# --------------------------------------------------------------------------------------


_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, *, where: str = "pipeline") -> Any:
    """``${NAME}`` and ``${NAME:-default}`` in every string of a pipeline, from the
    environment, as in docker compose files: a pipeline can name data that lives elsewhere on
    each machine (``file: ${TOOLS}/fs.json``). A variable that is unset and has no default is
    a ConfigError naming it. Strings without ``${`` are unchanged (loop references such as
    ``$data`` included); in a string with one, ``$$`` is a literal ``$``.

    >>> import os; os.environ["TS_DOC_DIR"] = "/data"
    >>> expand_env({"file": "${TS_DOC_DIR}/a.json", "b": "${TS_DOC_UNSET:-x}", "c": "$data"})
    {'file': '/data/a.json', 'b': 'x', 'c': '$data'}
    """
    if isinstance(value, dict):
        return {k: expand_env(v, where=where) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, where=where) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(
            f"{where}: ${{{name}}} is not set",
            hint=f"export {name}=... (or write ${{{name}:-default}} in the pipeline)",
        )

    return _ENV_REF.sub(sub, value)


def builtin_pipelines() -> dict[str, Path]:
    """The pipelines shipped in the package (``pipelines/`` in the repository), by name."""
    folder = Path(__file__).resolve().parent.parent / "assets" / "pipelines"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def load_pipeline(
    path: str | Path, overrides: list[str] | None = None, *, output: str | None = None
) -> ResolvedPipeline:
    """Read, override and validate a pipeline file. Raises ConfigError on any problem.

    ``path`` may also name a built-in pipeline (``tiny``, ``looptool``, ...), so an installed
    trajsynth runs them from any folder.
    """
    path = Path(path)
    if not path.exists():
        builtin = builtin_pipelines()
        if str(path) not in builtin:
            raise ConfigError(
                f"{path}: no such pipeline file",
                hint=f"built-in pipelines: {', '.join(builtin) or 'none'}",
            )
        path = builtin[str(path)]
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline file is a mapping with `name` and `stages`")
    return resolve_pipeline(raw, path=path, overrides=overrides, output=output)


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
    from ..envs.factory import EnvFactory
    from ..llm.client import role_config
    from ..llm.sim import SimConfig

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


# --------------------------------------------------------------------------------------
# JSON Schema for editors
# --------------------------------------------------------------------------------------


def pipeline_json_schema() -> dict[str, Any]:
    """JSON Schema of a pipeline file, with each registered stage's ``with:`` (for editors).

    Committed as ``schemas/pipeline.schema.json``; regenerate with ``trajsynth schema --write``.
    """
    stages = {
        name: cls
        for name, cls in load_builtin_stages().items()
        if cls.__module__.startswith("trajsynth.")  # built-in stages only, not plugins/tests
    }
    schema = PipelineSpec.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    step = defs["StepSpec"]
    step["properties"]["uses"]["enum"] = sorted(stages)
    branches = []
    for name in sorted(stages):
        cls = stages[name]
        cfg = cls.Config.model_json_schema()
        cfg_defs = cfg.pop("$defs", {})
        for k, v in cfg_defs.items():
            defs[f"{name}__{k}"] = v
        text = _retarget_refs(cfg, name)
        text["description"] = cls.doc()
        branches.append(
            {
                "if": {"properties": {"uses": {"const": name}}},
                "then": {"properties": {"with": text}},
            }
        )
    step["allOf"] = branches
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://trajsynth.dev/schemas/pipeline.schema.json",
        **schema,
        "title": "trajsynth pipeline",
    }


def _retarget_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                f"#/$defs/{prefix}__{v.rsplit('/', 1)[-1]}"
                if k == "$ref" and isinstance(v, str)
                else _retarget_refs(v, prefix)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_retarget_refs(x, prefix) for x in node]
    return node
