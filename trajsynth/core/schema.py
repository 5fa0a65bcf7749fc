"""The trajectory record: one definition, from which the Arrow schema and the JSON Schema
(`schemas/trajectory.schema.json`) are both generated.

A row is one trajectory (or one task: a row whose ``messages`` are still empty). Columns, in
groups (docs/architecture.md, "The trajectory record"):

- identity: ``id`` (a hash of the inputs that produced the row), ``schema_version``
- task: ``task_id``, ``goal``, ``domain``, ``env_version`` (the environment's version the
  row was played in), ``capabilities``, ``ground_truth`` (a
  :class:`~trajsynth.core.task.GroundTruth`, stored as JSON text)
- tools: ``tools`` (JSON, the OpenAI ``tools`` list offered to the model)
- conversation: ``messages`` in the OpenAI chat format
- per-step annotations, one entry per assistant message: ``step_rewards``, ``step_flags``,
  ``step_diffs`` (the environment's state change at that step, as JSON text)
- outcome: ``success``, ``reward``, ``reward_components``, ``num_turns``, ``num_tool_calls``,
  ``format_errors``, ``failure_layer``, ``failure_reason``, ``rollouts_total``,
  ``rollouts_passed``
- quality: ``quality_score``, ``difficulty``, ``difficulty_score``, ``cluster_id``, ``judge``
- provenance: ``method``, ``stage_id``, ``parent_ids``, ``generator``, ``run_id``,
  ``config_hash``, ``iteration``, ``seed``, ``created_at``
- ``extra``: JSON for anything a method carries that no other column holds

Fields typed ``Json`` hold any JSON value in Python and are stored as JSON text in Arrow, so
that heterogeneous structures (tool schemas, ground truth) never need a unified Arrow type.
``ground_truth`` is such a column too, but typed: it is validated into a ``GroundTruth`` once,
where a row is built or read (from a dict or from the column's JSON text), and written back as
``json.dumps(gt.model_dump(mode="json"))`` — the text the stages wrote when they stored the
dump themselves.
"""

from __future__ import annotations

import datetime as dt
import json
import types
import typing
from typing import Annotated, Any, Literal, Union

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from .ids import stable_id
from .task import GroundTruth

__all__ = [
    "ARROW_SCHEMA",
    "CAPABILITIES",
    "CONTEXT_FLAG",
    "SCHEMA_VERSION",
    "Json",
    "Judge",
    "Message",
    "ToolCall",
    "Trajectory",
    "arrow_schema",
    "json_schema",
]

#: Bump when a column is added, removed or changes meaning; add a migration in
#: ``trajsynth.store.migrations`` where old shards can be carried forward.
SCHEMA_VERSION = 2

#: step flag marking an assistant step kept as context only (see Trajectory.context_steps)
CONTEXT_FLAG = "deviated"

#: The capability tags trajsynth's own generators assign (others may be added freely).
CAPABILITIES = (
    "single_call",
    "multi_call",
    "parallel_calls",
    "dependent_calls",
    "optional_params",
    "needs_clarification",
    "no_tool_needed",
    "error_recovery",
    "long_horizon",
)


class _JsonColumn:
    """Marker: the field holds any JSON value and is stored as JSON text in Arrow."""

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "JsonColumn"


JSON_COLUMN = _JsonColumn()
Json = Annotated[Any, JSON_COLUMN]


class ToolCall(BaseModel):
    """One function call made by the assistant (the OpenAI ``tool_calls[i]`` entry, flattened)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Call id, referenced by the tool message that answers it.")
    name: str = Field(description="Function name as the model wrote it (may be unknown).")
    arguments: str = Field(
        default="{}",
        description="Arguments as JSON text, exactly as produced (kept raw so that malformed "
        "output can be recorded as a format error).",
    )

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict, or None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except (json.JSONDecodeError, AttributeError):
            return None
        return value if isinstance(value, dict) else None


class Message(BaseModel):
    """One chat message in the OpenAI format that TRL and HF chat templates consume."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(default=None, description="Text content (None for pure calls).")
    tool_calls: list[ToolCall] = Field(
        default_factory=list, description="Calls made in this assistant message (parallel calls)."
    )
    tool_call_id: str | None = Field(
        default=None, description="For role=tool: the id of the call this message answers."
    )
    name: str | None = Field(default=None, description="For role=tool: the function's name.")
    reasoning: str | None = Field(
        default=None, description="The assistant's reasoning/thought for this step, if any."
    )


class Judge(BaseModel):
    """An LLM judge's verdict on the trajectory."""

    model_config = ConfigDict(extra="forbid")

    verdict: str | None = None
    score: float | None = None
    rationale: str | None = None


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Trajectory(BaseModel):
    """One trajectory (or task) row. See the module docstring for the column groups."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    # identity
    id: str = Field(description="Deterministic id: a hash of the inputs that produced the row.")
    schema_version: int = Field(default=SCHEMA_VERSION, description="Schema version of the row.")
    # task
    task_id: str = Field(description="Id of the task this trajectory attempts.")
    goal: str = Field(default="", description="The user's request (first turn or whole goal).")
    domain: str = Field(default="", description="Tool domain or toolset name.")
    env_version: str = Field(
        default="",
        description="Version of the domain's environment the row was played in: a hash of its "
        "tool specs, the code that runs them and their data (EnvFactory.version); '' when not "
        "recorded. `trajsynth expire` replays rows whose environment changed since.",
    )
    capabilities: list[str] = Field(
        default_factory=list, description="Capability tags, e.g. dependent_calls, parallel_calls."
    )
    ground_truth: Annotated[GroundTruth | None, JSON_COLUMN] = Field(
        default=None,
        description="Expected calls and/or final state (trajsynth.core.task.GroundTruth as JSON).",
    )
    # tools
    tools: Json = Field(
        default_factory=list, description="The OpenAI `tools` list offered to the model."
    )
    # conversation
    messages: list[Message] = Field(default_factory=list, description="OpenAI chat messages.")
    # per-step annotations (one entry per assistant message, or empty)
    step_rewards: list[float | None] = Field(
        default_factory=list, description="Per assistant step: a value or reward (e.g. STeCa MC)."
    )
    step_flags: list[list[str]] = Field(
        default_factory=list,
        description="Per assistant step: flags such as calibrated, deviated, format_error.",
    )
    step_diffs: list[str] = Field(
        default_factory=list,
        description="Per assistant step: the environment's state change it made, as JSON text "
        "(a list of {table, key, kind, before, after, fields}; '[]' when nothing changed). "
        "Empty when not recorded (rows written before schema version 2).",
    )
    # outcome
    success: bool | None = Field(default=None, description="Did the trajectory solve the task?")
    reward: float | None = Field(default=None, description="Scalar reward.")
    reward_components: dict[str, float] = Field(
        default_factory=dict, description="Named reward parts (task, efficiency, format, judge)."
    )
    num_turns: int = Field(default=0, description="Number of assistant messages (derived).")
    num_tool_calls: int = Field(default=0, description="Number of tool calls (derived).")
    format_errors: list[str] = Field(
        default_factory=list, description="Format/schema errors found, one string each."
    )
    failure_layer: str | None = Field(
        default=None, description="First verification layer that failed (format, execution, ...)."
    )
    failure_reason: str | None = Field(default=None, description="Why that layer failed.")
    rollouts_total: int | None = Field(
        default=None, description="Rollouts sampled for this task (n of pass@k)."
    )
    rollouts_passed: int | None = Field(
        default=None, description="Rollouts that succeeded (c of pass@k)."
    )
    # quality
    quality_score: float | None = Field(default=None, description="Quality score in [0, 1].")
    difficulty: Literal["easy", "medium", "hard"] | None = Field(
        default=None, description="Difficulty bucket."
    )
    difficulty_score: float | None = Field(
        default=None, description="Numeric difficulty in [0, 1] (1 = hardest)."
    )
    cluster_id: int | None = Field(default=None, description="Diversity cluster.")
    judge: Judge | None = Field(default=None, description="LLM judge verdict, if judged.")
    # provenance
    method: str = Field(default="", description="Method that made the row (echo, tsr, ...).")
    stage_id: str = Field(default="", description="Pipeline stage id that wrote the row.")
    parent_ids: list[str] = Field(default_factory=list, description="Rows this row derives from.")
    generator: str = Field(default="", description="Model id that generated the content.")
    run_id: str = Field(default="", description="Run that wrote the row.")
    config_hash: str = Field(default="", description="Hash of the stage config that wrote it.")
    iteration: int = Field(default=0, description="Loop iteration (LoopTool), 0 otherwise.")
    seed: int = Field(default=0, description="Seed the row was produced with.")
    created_at: dt.datetime = Field(default_factory=_utcnow, description="UTC creation time.")
    extra: Json = Field(default_factory=dict, description="Method-specific JSON.")

    @field_validator("ground_truth", mode="before")
    @classmethod
    def _ground_truth(cls, value: Any) -> Any:
        # one parse per distinct value (GroundTruth.from_json caches by text): the rows of a
        # task share one read-only GroundTruth
        if isinstance(value, str):
            return GroundTruth.from_text(value)
        if isinstance(value, dict):
            return GroundTruth.from_json(value)
        return value

    @model_validator(mode="after")
    def _derive_counts(self) -> Trajectory:
        steps = [m for m in self.messages if m.role == "assistant"]
        self.num_turns = len(steps)
        self.num_tool_calls = sum(len(m.tool_calls) for m in steps)
        for name in ("step_rewards", "step_flags", "step_diffs"):
            values = getattr(self, name)
            if values and len(values) != len(steps):
                raise ValueError(
                    f"{name} has {len(values)} entries but there are {len(steps)} assistant "
                    "messages; per-step annotations must align with assistant turns"
                )
        if self.created_at.tzinfo is None:
            self.created_at = self.created_at.replace(tzinfo=dt.UTC)
        return self

    # --- convenience -----------------------------------------------------------------
    @staticmethod
    def make_id(*parts: Any) -> str:
        """Deterministic row id from the inputs that produced the row."""
        return stable_id(*parts)

    def assistant_steps(self) -> list[Message]:
        """The assistant messages, in order (the steps that annotations align with)."""
        return [m for m in self.messages if m.role == "assistant"]

    def opening(self) -> list[Message]:
        """The messages an episode of this row starts from: everything before the first
        assistant message (the task's system prompt and first request), trimmed to end on a
        user message; empty when the row has none (a bare task: the episode opens itself).
        """
        out: list[Message] = []
        for m in self.messages:
            if m.role == "assistant":
                break
            out.append(m)
        while out and out[-1].role != "user":
            out.pop()
        return out

    def context_steps(self) -> set[int]:
        """Indices of assistant steps kept only as context, never as a target.

        A step flagged ``deviated`` (STeCa keeps the agent's wrong step, with its observation,
        before the reflection and the expert continuation) is part of the conversation the
        model reads but not something it should learn to produce or be checked against: the
        format check and scores skip its calls and the SFT loss masks it.
        """
        return {i for i, flags in enumerate(self.step_flags) if CONTEXT_FLAG in flags}

    def calls(self) -> list[ToolCall]:
        """Every tool call, in order."""
        return [c for m in self.messages if m.role == "assistant" for c in m.tool_calls]

    def final_answer(self) -> str | None:
        """Content of the last assistant message that makes no call, if any."""
        for m in reversed(self.messages):
            if m.role == "assistant" and not m.tool_calls:
                return m.content
        return None

    def derive(self, **changes: Any) -> Trajectory:
        """A new row built from this one with ``changes`` applied (rows are never edited).

        The new row is validated as a whole (changed values are checked and converted, the
        counts derived again), but the unchanged values are handed over as they are, not
        dumped and rebuilt: nested records (messages, the judge) and JSON values are shared
        with this row, which is safe because rows are never edited in place.
        """
        data = {**self.__dict__, **changes}
        if "messages" in changes and "step_diffs" not in changes:
            data["step_diffs"] = []  # the parent's state changes belong to its own steps
        return Trajectory.model_validate(data)

    # --- Arrow conversion ------------------------------------------------------------
    def to_row(self, texts: dict[int, tuple[Any, str]] | None = None) -> dict[str, Any]:
        """A dict matching ``ARROW_SCHEMA`` (JSON columns encoded as text).

        ``texts`` (object id → (object, text)) lets a caller converting many rows encode a
        JSON value that several rows share (the tools of a domain, the ground truth of a task)
        once; it holds the objects, so their ids stay theirs for as long as it lives.
        """
        row = self.model_dump(exclude=_JSON_EXCLUDE)
        for name in _JSON_FIELDS:
            row[name] = _json_text(getattr(self, name), texts)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any], values: dict[str, Any] | None = None) -> Trajectory:
        """Inverse of :meth:`to_row` (also accepts rows from ``pa.Table.to_pylist``).

        ``values`` (JSON text → value) lets a caller converting many rows decode the tools
        that several rows carry (the rows of one domain) once; those rows then share the value
        (rows are never edited in place). The ground truth's text is parsed by the field's
        validator, once per distinct text (``GroundTruth.from_text``).
        """
        row = dict(row)
        for name in _JSON_FIELDS:
            value = row.get(name)
            if name == "ground_truth":  # the field's validator parses the text (cached)
                continue
            if isinstance(value, str):
                if values is None or name not in _SHARED_JSON:
                    row[name] = json.loads(value)
                elif value in values:
                    row[name] = values[value]
                else:
                    row[name] = values[value] = json.loads(value)
        for name in _MAP_FIELDS:
            value = row.get(name)
            if isinstance(value, list):
                row[name] = dict(value)
            elif value is None:
                row[name] = {}
        return cls.model_validate(row)


def _json_text(value: Any, texts: dict[int, tuple[Any, str]] | None) -> str | None:
    """A JSON column's text: ``json.dumps`` of the value (of its plain-Python dump when it
    holds objects that are not JSON, as records or dataclasses inside ``extra``; of its JSON
    dump for the ground truth)."""
    if value is None:
        return None
    if texts is not None:
        hit = texts.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
    if isinstance(value, BaseModel):  # the ground truth
        text = json.dumps(value.model_dump(mode="json"), ensure_ascii=False)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except TypeError:
            text = json.dumps(_ANY.dump_python(value), ensure_ascii=False)
    if texts is not None and isinstance(value, (dict, list, BaseModel)):
        texts[id(value)] = (value, text)
    return text


# --------------------------------------------------------------------------------------
# Arrow schema, generated from the model above
# --------------------------------------------------------------------------------------


def _is_json(field_info: Any) -> bool:
    return any(m is JSON_COLUMN for m in getattr(field_info, "metadata", ()))


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) for a Python annotation used in the record models."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        if any(a is JSON_COLUMN for a in args[1:]):
            return pa.string(), True
        return _arrow_type(args[0])
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        return _arrow_type(non_null[0])[0], True
    if origin is Literal:
        return pa.string(), False
    if origin is list:
        item_type, _ = _arrow_type(args[0])
        return pa.list_(item_type), False
    if origin is dict:
        key_type, _ = _arrow_type(args[0])
        value_type, _ = _arrow_type(args[1])
        return pa.map_(key_type, value_type), False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pa.struct(_arrow_fields(annotation)), False
    simple = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        dt.datetime: pa.timestamp("us", tz="UTC"),
    }
    if annotation in simple:
        return simple[annotation], False
    raise TypeError(f"no Arrow type for {annotation!r}")


def _arrow_fields(model: type[BaseModel]) -> list[pa.Field]:
    fields = []
    for name, info in model.model_fields.items():
        if _is_json(info):
            arrow_type, nullable = pa.string(), True
        else:
            arrow_type, nullable = _arrow_type(info.annotation)
        metadata = {"description": info.description} if info.description else None
        # Columns are nullable in Arrow unless the model forbids None; readers of foreign
        # data and partial projections are easier that way, and the record class validates.
        fields.append(pa.field(name, arrow_type, nullable=True, metadata=metadata))
        del nullable
    return fields


def arrow_schema() -> pa.Schema:
    """The Arrow schema of a trajectory shard, generated from :class:`Trajectory`."""
    return pa.schema(
        _arrow_fields(Trajectory),
        metadata={"trajsynth.schema_version": str(SCHEMA_VERSION)},
    )


_JSON_FIELDS = tuple(n for n, i in Trajectory.model_fields.items() if _is_json(i))
_JSON_EXCLUDE: set[str] = set(_JSON_FIELDS)  # model_dump takes a set (never changed)
#: JSON columns whose text many rows repeat (decoded once per text by :func:`to_records`)
_SHARED_JSON = frozenset({"tools"})
_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_MAP_FIELDS = tuple(
    n for n, i in Trajectory.model_fields.items() if typing.get_origin(i.annotation) is dict
)
ARROW_SCHEMA = arrow_schema()
JSON_COLUMNS = _JSON_FIELDS


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one row (as exported to JSONL), generated from :class:`Trajectory`.

    This is the file committed as ``schemas/trajectory.schema.json``; a test fails when they
    differ. Regenerate it with ``python -m trajsynth.core.schema > schemas/trajectory.schema.json``.
    """
    schema = Trajectory.model_json_schema(mode="serialization")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://trajsynth.dev/schemas/trajectory.schema.json",
        **schema,
        "title": "trajsynth trajectory record",
        "description": (
            f"One row of a trajsynth trajectory shard (schema_version {SCHEMA_VERSION}). "
            "In Parquet, the columns ground_truth, tools and extra hold JSON text; "
            "everywhere else (JSONL export, the Python record) they hold JSON values."
        ),
        "x-schema-version": SCHEMA_VERSION,
    }
    return schema


def json_schema_text() -> str:
    """The committed file's exact text."""
    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":  # pragma: no cover - generator entry point
    print(json_schema_text(), end="")
