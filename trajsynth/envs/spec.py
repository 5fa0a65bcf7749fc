"""Tool specifications: :class:`ToolSpec` (one function) and :class:`Toolset` (a named list).

A tool is described in the OpenAI function format (name, description, ``parameters`` as a JSON
Schema object; https://platform.openai.com/docs/guides/function-calling) plus an optional
``response`` JSON Schema of what the tool returns. Response schemas are what the
function-signature graph links on ("a return field can feed a parameter"), so the built-in
domains give every tool one with typed, described fields.

Steps a toolset goes through:

1) an importer (``trajsynth.envs.importers``) or a built-in domain makes the specs;
2) every spec is checked: an OpenAI-legal name, ``parameters`` an object schema, both schemas
   valid JSON Schema (checked with ``jsonschema``);
3) ``Toolset.to_openai()`` gives the ``tools`` column value offered to a model, and
   ``Toolset.save/load`` keep it as ``toolset.json`` (with the import failures, so
   ``trajsynth tools show`` can list them).

Names: OpenAI requires ``^[a-zA-Z0-9_-]{1,64}$``. An importer that has to rename (BFCL's
``math.factorial`` → ``math_factorial``) keeps the original in ``source_name``, and
``Toolset.by_source_name`` maps back, so renaming is reversible.

Example::

    ts = Toolset.from_openai([{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])
    ts["f"].required()     # []
    ts.to_openai()         # the `tools` list, as given
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from ..core.errors import SpecError

__all__ = [
    "OPENAI_NAME",
    "ImportIssue",
    "ToolSpec",
    "Toolset",
    "schema_problems",
]

#: what OpenAI accepts as a function name
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

#: marks a file written by :meth:`Toolset.save`
TOOLSET_FORMAT = "trajsynth.toolset/1"


def schema_problems(schema: Any, *, what: str = "schema") -> list[str]:
    """Why ``schema`` is not a valid JSON Schema; empty when it is.

    >>> schema_problems({"type": "object", "properties": {"x": {"type": "integer"}}})
    []
    >>> schema_problems({"type": "dict"})[0].startswith("schema: 'dict' is not valid")
    True
    """
    if not isinstance(schema, dict):
        return [f"{what} must be a JSON object, got {type(schema).__name__}"]
    error = jsonschema.exceptions.best_match(_meta_validator().iter_errors(schema))
    if error is None:
        return []
    where = "/".join(str(p) for p in error.absolute_path)
    return [f"{what}: {error.message}" + (f" (at {where})" if where else "")]


@functools.cache
def _meta_validator() -> jsonschema.Draft7Validator:
    """One validator of the draft-07 meta-schema, built once.

    Draft-07's meta-schema checks the keywords tool schemas use (type, properties, items,
    required, enum, default, ...) exactly as 2020-12's does, at a fifth of the cost (2020-12's
    ``$dynamicRef`` vocabulary makes a check take ~3 ms); the tests check every imported tool
    against 2020-12 as well.
    """
    return jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA)


class ImportIssue(BaseModel):
    """A spec an importer could not convert (or dropped as a duplicate), and why."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The spec's name in its source (or a locator if it had none).")
    reason: str = Field(description="Why it was not imported.")
    source: str = Field(default="", description="File and record it came from.")


class ToolSpec(BaseModel):
    """One tool: the OpenAI function (name, description, parameters) plus a response schema."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Function name, OpenAI-legal (^[a-zA-Z0-9_-]{1,64}$).")
    description: str = Field(default="", description="What the tool does, for the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema (type object) of the arguments.",
    )
    response: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the result, when known."
    )
    source_name: str | None = Field(
        default=None, description="The name in the source, when the importer had to rename."
    )
    source: str = Field(default="", description="Where the spec came from (file#record).")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Format-specific facts (HTTP method/path, language)."
    )

    # -- views --------------------------------------------------------------------------
    def properties(self) -> dict[str, dict[str, Any]]:
        """Parameter name → its JSON Schema."""
        props = self.parameters.get("properties") or {}
        return props if isinstance(props, dict) else {}

    def required(self) -> list[str]:
        """Names of the required parameters."""
        req = self.parameters.get("required") or []
        return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []

    def optional(self) -> list[str]:
        """Names of the parameters that may be left out."""
        req = set(self.required())
        return [p for p in self.properties() if p not in req]

    def response_fields(self) -> dict[str, dict[str, Any]]:
        """Top-level fields of the response object (empty when the response is not an object)."""
        if not self.response or self.response.get("type") != "object":
            return {}
        props = self.response.get("properties") or {}
        return props if isinstance(props, dict) else {}

    def original_name(self) -> str:
        """The name as the source wrote it."""
        return self.source_name or self.name

    # -- checks -------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Everything that makes this spec unusable; empty when it is fine."""
        out = []
        if not OPENAI_NAME.match(self.name):
            out.append(f"name {self.name!r} is not OpenAI-legal (^[a-zA-Z0-9_-]{{1,64}}$)")
        if self.parameters.get("type") != "object":
            out.append(f"parameters must have type 'object', got {self.parameters.get('type')!r}")
        out += schema_problems(self.parameters, what="parameters")
        if self.response is not None:
            out += schema_problems(self.response, what="response")
        return out

    # -- OpenAI format ------------------------------------------------------------------
    def to_openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {name, description, parameters}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    @classmethod
    def from_openai(cls, obj: dict[str, Any], *, source: str = "") -> ToolSpec:
        """From an OpenAI tool (``{"type": "function", "function": {...}}``) or a bare function.

        A ``response`` key next to ``parameters`` (BFCL func docs, our own files) is kept.
        Raises :class:`SpecError` when ``obj`` is not a function description.
        """
        if not isinstance(obj, dict):
            raise SpecError(f"a tool must be a JSON object, got {type(obj).__name__}")
        fn = obj.get("function") if obj.get("type") == "function" else obj
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise SpecError("a tool needs a function with a string 'name'")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise SpecError(f"tool {fn['name']!r}: parameters must be an object")
        response = fn.get("response", obj.get("response"))
        return cls(
            name=fn["name"],
            description=str(fn.get("description") or ""),
            parameters=params,
            response=response if isinstance(response, dict) else None,
            source=source,
        )


class Toolset(BaseModel):
    """A named list of tools with unique names, plus what could not be imported."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", description="Toolset (domain) name.")
    tools: list[ToolSpec] = Field(default_factory=list)
    format: str = Field(default="", description="Source format (openai, bfcl, tau, ...).")
    source: str = Field(default="", description="File or folder it was imported from.")
    records: int = Field(default=0, description="Source records read by the importer.")
    failures: list[ImportIssue] = Field(
        default_factory=list, description="Specs that could not be converted, with the reason."
    )
    duplicates: list[ImportIssue] = Field(
        default_factory=list,
        description="Specs dropped because another spec of that name (with a different "
        "definition) was imported first.",
    )
    altered: list[ImportIssue] = Field(
        default_factory=list,
        description="Specs imported with a change, and what was changed (e.g. a required "
        "parameter its properties did not declare, declared untyped).",
    )

    _index: dict[str, ToolSpec] | None = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        seen: set[str] = set()
        for t in self.tools:
            if t.name in seen:
                raise ValueError(f"duplicate tool name {t.name!r} in toolset {self.name!r}")
            seen.add(t.name)

    # -- lookup ---------------------------------------------------------------------------
    def _by_name(self) -> dict[str, ToolSpec]:
        if self._index is None or len(self._index) != len(self.tools):
            self._index = {t.name: t for t in self.tools}
        return self._index

    def __len__(self) -> int:
        return len(self.tools)

    # a toolset iterates over its tools, not over pydantic's (field, value) pairs
    def __iter__(self) -> Iterator[ToolSpec]:  # type: ignore[override]
        return iter(self.tools)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name()

    def __getitem__(self, name: str) -> ToolSpec:
        try:
            return self._by_name()[name]
        except KeyError:
            raise KeyError(f"no tool {name!r} in toolset {self.name!r}") from None

    def get(self, name: str) -> ToolSpec | None:
        return self._by_name().get(name)

    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def by_source_name(self, original: str) -> ToolSpec | None:
        """The tool whose source name (before renaming) is ``original``."""
        for t in self.tools:
            if t.original_name() == original:
                return t
        return None

    def subset(self, names: Iterable[str]) -> Toolset:
        """A toolset with only ``names`` (in this toolset's order)."""
        keep = set(names)
        unknown = keep - set(self._by_name())
        if unknown:
            raise SpecError(f"toolset {self.name!r} has no tools {sorted(unknown)}")
        return Toolset(name=self.name, tools=[t for t in self.tools if t.name in keep])

    def merged(self, other: Toolset, *, name: str | None = None) -> Toolset:
        """This toolset plus ``other``'s tools (a name in both is an error)."""
        clash = set(self._by_name()) & set(other._by_name())
        if clash:
            raise SpecError(f"cannot merge toolsets: both define {sorted(clash)}")
        return Toolset(name=name or self.name, tools=[*self.tools, *other.tools])

    # -- OpenAI format --------------------------------------------------------------------
    def to_openai(self) -> list[dict[str, Any]]:
        """The ``tools`` list (the value of a trajectory's ``tools`` column)."""
        return [t.to_openai() for t in self.tools]

    @classmethod
    def from_openai(cls, tools: Any, *, name: str = "") -> Toolset:
        """From a ``tools`` list (JSON value or text), e.g. a trajectory's ``tools`` column."""
        if isinstance(tools, str):
            try:
                tools = json.loads(tools)
            except json.JSONDecodeError as exc:
                raise SpecError(f"tools JSON is not valid: {exc}") from exc
        if isinstance(tools, dict) and "tools" in tools:
            tools = tools["tools"]
        if not isinstance(tools, list):
            raise SpecError(f"tools must be a list, got {type(tools).__name__}")
        specs = [ToolSpec.from_openai(t) for t in tools]
        try:
            return cls(name=name, tools=specs)
        except ValidationError as exc:
            raise SpecError(f"invalid tools list: {exc.errors()[0]['msg']}") from exc

    @classmethod
    def shared(cls, tools: Any) -> Toolset:
        """:meth:`from_openai` for the ``tools`` of rows, which many rows and every
        verification of them repeat: built once per JSON text (a bounded cache keyed by that
        text) and shared, so treat the result as read-only."""
        if isinstance(tools, Toolset):
            return tools
        if isinstance(tools, str):
            return _shared_toolset(tools)
        try:
            text = json.dumps(tools, ensure_ascii=False)
        except (TypeError, ValueError):
            return cls.from_openai(tools)
        return _shared_toolset(text)

    # -- files ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format_version": TOOLSET_FORMAT, **self.model_dump(mode="json")}

    def save(self, path: str | Path) -> Path:
        """Write ``toolset.json`` (tools, failures, duplicates)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Toolset:
        """Read a file written by :meth:`save`, or a plain OpenAI ``tools`` JSON list."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise SpecError(f"{path}: no such file") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SpecError(f"{path}: not a JSON file ({exc})") from exc
        if isinstance(data, dict) and data.get("format_version") == TOOLSET_FORMAT:
            data = {k: v for k, v in data.items() if k != "format_version"}
            try:
                return cls.model_validate(data)
            except (ValidationError, ValueError) as exc:
                raise SpecError(f"{path}: not a valid toolset file ({exc})") from exc
        return cls.from_openai(data, name=path.stem)

    def summary(self) -> dict[str, Any]:
        """Counts for display: tools, parameters, required, with response schema, failures."""
        return {
            "tools": len(self.tools),
            "parameters": sum(len(t.properties()) for t in self.tools),
            "required": sum(len(t.required()) for t in self.tools),
            "with_response": sum(t.response is not None for t in self.tools),
            "failures": len(self.failures),
            "duplicates": len(self.duplicates),
            "altered": len(self.altered),
            "records": self.records,
        }


@functools.lru_cache(maxsize=256)
def _shared_toolset(text: str) -> Toolset:
    return Toolset.from_openai(text)
