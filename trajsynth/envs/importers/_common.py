"""What every importer shares: reading JSON/JSONL, and a builder that collects specs.

The builder is where the importers' promise is kept: a spec that cannot be converted is
recorded with its reason and the rest still import; a converted spec is only kept when it
passes :meth:`ToolSpec.problems` (OpenAI-legal name, valid JSON Schema); a spec changed on the
way in (by the importer, or here: a ``required`` name its ``properties`` do not declare is
declared as an untyped property, which is what JSON Schema means by it) is kept and listed as
altered with what changed; two specs with one name and different definitions keep the first
and list the second as a duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...core.errors import InputNotFoundError, SpecError
from ...core.ids import canonical_json
from ..spec import ImportIssue, Toolset, ToolSpec

__all__ = [
    "ConversionError",
    "ToolsetBuilder",
    "declare_required",
    "iter_json_records",
    "read_json",
]


class ConversionError(ValueError):
    """One spec cannot be converted; the message is the reason shown to the user."""


def read_json(path: Path) -> Any:
    """A whole JSON file, or :class:`SpecError` naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputNotFoundError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: not a JSON file ({exc})") from exc


def iter_json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) for a JSON Lines file; a whole JSON list is read as records too.

    A line that is not JSON is yielded as ``(n, ConversionError)`` so the caller can list it
    as a failure and go on.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputNotFoundError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot be read ({exc})") from exc
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            yield from enumerate(data, 1)
            return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, ConversionError(f"line {n} is not JSON ({exc.msg})")


def require_path(src: str | Path) -> Path:
    path = Path(src)
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such file or folder")
    return path


def declare_required(schema: Any, where: str, notes: list[str]) -> Any:
    """``schema`` with every ``required`` name declared in ``properties`` (recursively in
    object properties and array items); a name that was missing is declared untyped (``{}``)
    and noted. Returns ``schema`` itself when nothing changed.
    """
    if not isinstance(schema, dict):
        return schema
    out = schema
    props = schema.get("properties")
    if isinstance(props, dict):
        new_props = {k: declare_required(v, f"{where}.{k}", notes) for k, v in props.items()}
        if any(new_props[k] is not props[k] for k in props):
            out = {**out, "properties": new_props}
    if isinstance(schema.get("items"), dict):
        items = declare_required(schema["items"], f"{where}[]", notes)
        if items is not schema["items"]:
            out = {**out, "items": items}
    required = schema.get("required")
    if isinstance(required, list):
        declared = out["properties"] if isinstance(out.get("properties"), dict) else {}
        missing = [r for r in required if isinstance(r, str) and r not in declared]
        if missing:
            out = {**out, "properties": {**declared, **{m: {} for m in missing}}}
            notes.append(
                f"{where}: required {', '.join(map(repr, missing))} not declared in properties; "
                "declared untyped"
            )
    return out


class ToolsetBuilder:
    """Collects converted specs, failures and duplicates into a :class:`Toolset`."""

    def __init__(self, *, name: str, format: str, source: str | Path) -> None:
        self.name = name
        self.format = format
        self.source = str(source)
        self.tools: dict[str, ToolSpec] = {}
        self._content: dict[str, str] = {}
        self.failures: list[ImportIssue] = []
        self.duplicates: list[ImportIssue] = []
        self.altered: list[ImportIssue] = []
        self.records = 0
        self._failed: set[tuple[str, str]] = set()
        self._dup_count: dict[str, int] = {}
        self._dup_index: dict[str, int] = {}

    def fail(self, name: str, reason: str, source: str = "") -> None:
        """Record that ``name`` could not be converted (once per name and reason)."""
        if (name, reason) in self._failed:
            return
        self._failed.add((name, reason))
        self.failures.append(ImportIssue(name=name, reason=reason, source=source))

    def add(
        self,
        name: str,
        convert: Callable[[], ToolSpec],
        *,
        source: str = "",
        notes: list[str] | None = None,
    ) -> bool:
        """Convert one spec; record a failure instead of raising. True when it was kept.

        ``notes`` is filled by ``convert`` with what it changed (reported as altered).
        """
        try:
            spec = convert()
        except (ConversionError, SpecError, KeyError, TypeError, ValueError, AttributeError) as exc:
            reason = exc.message if isinstance(exc, SpecError) else str(exc)
            if isinstance(exc, KeyError):
                reason = f"missing field {exc}"
            self.fail(name, reason or type(exc).__name__, source)
            return False
        notes = list(notes or [])
        parameters = declare_required(spec.parameters, "parameters", notes)
        if parameters is not spec.parameters:
            spec = spec.model_copy(update={"parameters": parameters})
        key = canonical_json([spec.description, spec.parameters, spec.response, spec.source_name])
        if spec.name in self.tools:
            if self._content[spec.name] != key:
                self._duplicate(spec.name, source)
            return False
        problems = spec.problems()
        if problems:
            self.fail(name, "; ".join(problems), source)
            return False
        self.tools[spec.name] = spec
        self._content[spec.name] = key
        if notes:
            self.altered.append(ImportIssue(name=spec.name, reason="; ".join(notes), source=source))
        return True

    def _duplicate(self, name: str, source: str) -> None:
        count = self._dup_count.get(name, 0) + 1
        self._dup_count[name] = count
        first = self.tools[name].source
        issue = ImportIssue(
            name=name,
            reason=f"{count} other definition{'s' if count > 1 else ''} of {name!r} dropped; "
            f"kept the first" + (f" (from {first})" if first else ""),
            source=source if count == 1 else f"{source} (latest)",
        )
        if count == 1:
            self._dup_index[name] = len(self.duplicates)
            self.duplicates.append(issue)
        else:
            self.duplicates[self._dup_index[name]] = issue

    def build(self) -> Toolset:
        return Toolset(
            name=self.name,
            tools=list(self.tools.values()),
            format=self.format,
            source=self.source,
            records=self.records,
            failures=self.failures,
            duplicates=self.duplicates,
            altered=self.altered,
        )
