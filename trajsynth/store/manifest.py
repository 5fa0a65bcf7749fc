"""The run manifest: the one file that says what a run has committed.

``manifest.json`` sits at the top of a run folder. It records the pipeline, its config hash,
and for every stage its cache key, status, committed shards (per named output), the units or
offset already done (for resume), metrics and timings. It is rewritten atomically (tmp →
fsync → rename) after every shard commit, so after a crash it names exactly the shards that
exist in full; everything else in a stage folder is debris that the resume removes.

On object storage, where nothing is renamed, shards are write-once keys and the manifest is
committed by a conditional write (``If-Match`` on the version this process last read or
wrote, :func:`trajsynth.core.location.write_versioned`): a commit is one whole-object PUT
that readers see entirely or not at all, and a second process writing the same run folder
is stopped (:class:`~trajsynth.core.errors.ConcurrentCommitError`) instead of overwriting
commits it never saw. Local files get the same check.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from ..core.errors import DataError
from ..core.ids import stable_hash
from ..core.location import as_path, is_url, read_versioned, write_versioned
from .layout import MANIFEST_NAME, RunFolder
from .shards import ShardInfo

__all__ = [
    "MANIFEST_NAME",
    "OutputState",
    "RunManifest",
    "ShardRecord",
    "StageState",
    "locate_manifest",
]

StageStatus = Literal["pending", "running", "done", "failed"]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class ShardRecord(BaseModel):
    file: str
    rows: int
    bytes: int
    fingerprint: str

    @classmethod
    def of(cls, info: ShardInfo) -> ShardRecord:
        return cls(file=info.file, rows=info.rows, bytes=info.bytes, fingerprint=info.fingerprint)


class OutputState(BaseModel):
    """The committed shards of one named output of a stage."""

    shards: list[ShardRecord] = Field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def fingerprint(self) -> str:
        return stable_hash(sorted((s.file, s.fingerprint) for s in self.shards))


class StageState(BaseModel):
    """Everything the runner knows about one stage of a run."""

    uses: str
    kind: str = "map"
    inputs: list[str] = Field(default_factory=list)
    cache_key: str | None = None
    status: StageStatus = "pending"
    outputs: dict[str, OutputState] = Field(default_factory=dict)
    #: map stages: unit key → output name → committed file (None when the unit wrote no rows)
    units: dict[str, dict[str, str | None]] = Field(default_factory=dict)
    #: source stages: rows committed so far (the offset a resume restarts from)
    offset: int = 0
    next_shard: int = 0
    rows_in: int = 0
    #: for stages that make artifacts: relative file → size, and a content fingerprint
    artifact_files: dict[str, int] = Field(default_factory=dict)
    artifact_fingerprint: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    #: what the finished stage's metrics show that its user must see (``Stage.findings``)
    findings: list[str] = Field(default_factory=list)
    #: how many times this stage's code was started in this run folder (cache tests read it)
    executions: int = 0
    resumes: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    seconds: float = 0.0
    error: str | None = None

    def rows_out(self, output: str = "main") -> int:
        state = self.outputs.get(output)
        return state.rows if state else 0

    def fingerprint(self, output: str = "main") -> str:
        state = self.outputs.get(output) or OutputState()
        return state.fingerprint()


class RunManifest(BaseModel):
    """The whole run: pipeline identity and every stage's state."""

    pipeline: str
    pipeline_path: str | None = None
    config_hash: str = ""
    run_id: str = ""
    trajsynth_version: str = ""
    created_at: str = Field(default_factory=_now)
    updated_at: str = Field(default_factory=_now)
    stages: dict[str, StageState] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    #: the check of the run's final output (trajsynth.pipeline.final_output), {} until a
    #: pipeline run finishes
    final_output: dict[str, Any] = Field(default_factory=dict)
    #: the version of the file this object was read from or last written as (what the next
    #: save must find there; see the module docstring); None: a new manifest
    _version: str | None = PrivateAttr(default=None)

    @classmethod
    def load(cls, path: Path) -> RunManifest:
        try:
            found = read_versioned(path)
            if found is None:
                raise FileNotFoundError(f"no such file: {path}")
            manifest = cls.model_validate_json(found[0])
        except (OSError, ValueError) as exc:
            raise DataError(
                f"{path}: unreadable run manifest ({exc})",
                hint="delete the run folder or pass --force to start over",
            ) from exc
        manifest._version = found[1]
        return manifest

    def replaces(self, old: RunManifest | None) -> RunManifest:
        """Take over the file version of ``old`` (a manifest this one is to replace)."""
        self._version = old._version if old is not None else self._version
        return self

    def upstream(self, stage_id: str) -> list[str]:
        """``stage_id`` and every stage it reads from, directly or not, in manifest order."""
        seen: set[str] = set()
        todo = [stage_id]
        while todo:
            sid = todo.pop()
            if sid in seen or sid not in self.stages:
                continue
            seen.add(sid)
            todo.extend(ref.split(":", 1)[0] for ref in self.stages[sid].inputs)
        return [sid for sid in self.stages if sid in seen]

    def save(self, path: Path) -> None:
        """Atomic, conditional write: a crash leaves either the old or the new manifest, never
        half of one; a file someone else wrote since this object read it is not replaced
        (:class:`~trajsynth.core.errors.ConcurrentCommitError`)."""
        self.updated_at = _now()
        data = json.dumps(self.model_dump(mode="json"), indent=1).encode()
        self._version = write_versioned(path, data, self._version)


def locate_manifest(path: str | Path) -> tuple[Path, str | None] | None:
    """The run manifest that describes the shards under ``path``, and their stage id.

    ``path`` may be a shard file, a folder or a glob (a local path or a URL). The manifest
    sits next to the shards (a one-stage output folder, ``trajsynth stage``/``filter``: its
    last stage), one level up (a stage folder of a pipeline run), or two levels up (a side
    output, ``<stage>/<output>``): :meth:`RunFolder.holding`. Returns ``(manifest.json,
    stage id or None)``, or None for bare shards.
    """
    if is_url(path):
        text = str(as_path(path))
        if any(ch in text for ch in "*?["):  # the folder above the first wildcard
            text = text[: min(text.index(ch) for ch in "*?[" if ch in text)].rsplit("/", 1)[0]
        p = as_path(text)
        folder = p.parent if p.name.endswith(".parquet") else p
    else:
        text = str(path)
        p = Path(text)
        if any(ch in text for ch in "*?[") and not p.exists():
            parts = p.parts
            cut = next(i for i, part in enumerate(parts) if any(ch in part for ch in "*?["))
            p = Path(*parts[:cut]) if cut else Path(".")
        folder = p if p.is_dir() else p.parent
        if not folder.is_dir():
            return None
    for run, stage in RunFolder.holding(folder):
        manifest = _manifest_at(run.manifest)
        if manifest is None:
            continue
        if stage is None:
            return run.manifest, list(manifest.stages)[-1] if manifest.stages else None
        if stage in manifest.stages:
            return run.manifest, stage
    return None  # bare shards (or a folder the run next to it did not write)


def _manifest_at(path: Any) -> RunManifest | None:
    """The manifest at ``path`` (a local file or an object), None when there is none."""
    if is_url(path):
        found = read_versioned(path)
        return None if found is None else RunManifest.model_validate_json(found[0])
    return RunManifest.load(path) if path.is_file() else None
