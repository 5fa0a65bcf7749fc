"""The run folder's layout: the one place that says where each of a run's files lives.

A run folder (a pipeline's ``--out``) holds::

    manifest.json           # what is committed (store/manifest.py)
    <stage>/part-*.parquet  # a stage's main output
    <stage>/<output>/...    # a stage's named side output
    artifacts/<stage>/      # files a stage makes that are not rows (checkpoints)
    logs/run.log            # tracebacks of failures, the final output's warning
    cache/                  # the LLM response cache (unless defaults.cache_dir)
    .spill/<stage>/         # a streaming global stage's spill files, while it runs

A one-stage folder (``trajsynth stage``, ``filter``, ``dedup``, ...; ``single``) is the stage
folder itself: its shards and ``manifest.json`` side by side, ``artifacts/`` without the
stage's name. The folder may be a bucket URL (``s3://…``, ``gs://…``; see
:mod:`trajsynth.core.location`); then what libraries must write as local files (artifacts,
the log, spills no other machine reads) goes to this machine's scratch folder for the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.location import as_path, is_url, scratch_dir

__all__ = ["MANIFEST_NAME", "RunFolder", "output_dir"]

MANIFEST_NAME = "manifest.json"


def output_dir(stage_dir: Path, output: str) -> Path:
    """Folder of a stage's named output: the stage folder for main, a subfolder otherwise."""
    return stage_dir if output == "main" else stage_dir / output


@dataclass(frozen=True)
class RunFolder:
    """A run folder at ``root`` (a local path or a bucket URL) and where its files are."""

    root: Path
    #: the one-stage layout: the stage's folder is the run folder
    single: bool = False

    @classmethod
    def at(cls, where: str | Path | Any, *, single: bool = False) -> RunFolder:
        return cls(as_path(where), single)

    @property
    def remote(self) -> bool:
        """On object storage (its local files are in :attr:`scratch`)."""
        return is_url(self.root)

    @cached_property
    def scratch(self) -> Path:
        """Where the run's local files go: the folder itself, or this machine's scratch
        folder for a run on object storage."""
        return scratch_dir(self.root) if self.remote else self.root

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_NAME

    def stage(self, stage_id: str) -> Path:
        """The folder of a stage's main output."""
        return self.root if self.single else self.root / stage_id

    def output(self, stage_id: str, output: str = "main") -> Path:
        """The folder of a stage's (named) output."""
        return output_dir(self.stage(stage_id), output)

    def artifacts(self, stage_id: str, *, stored: bool = False) -> Path:
        """Where a stage writes its artifacts (always a local folder); ``stored``: where they
        are kept (the bucket, for a run on object storage)."""
        base = (self.root if stored else self.scratch) / "artifacts"
        return base if self.single else base / stage_id

    @property
    def log(self) -> Path:
        """The run's log file (local; a run on object storage uploads it to :attr:`logs`)."""
        return self.scratch / "logs" / "run.log"

    @property
    def logs(self) -> Path:
        """Where the run's logs are kept."""
        return self.root / "logs"

    @property
    def cache(self) -> Path:
        """The LLM response cache's default folder."""
        return self.root / "cache"

    def spill(self, stage_id: str, *, shared: bool) -> Path:
        """A streaming global stage's spill folder: in the run folder when other workers (Ray
        nodes) read it (``shared``), else in :attr:`scratch`."""
        return (self.root if shared else self.scratch) / ".spill" / stage_id

    @classmethod
    def holding(cls, folder: Path) -> list[tuple[RunFolder, str | None]]:
        """The run folders that may hold the shard folder ``folder``, nearest first, each
        with the stage whose folder it would be: ``folder`` itself (a one-stage folder; its
        stage is its manifest's last), its parent (a stage's main output), its grandparent (a
        stage's side output)."""
        return [
            (cls(folder, single=True), None),
            (cls(folder.parent), folder.name),
            (cls(folder.parent.parent), folder.parent.name),
        ]

    def relative(self, path: Path) -> str:
        """``path`` relative to the run folder (as the user finds it there), else whole."""
        try:
            return str(path.relative_to(self.root))
        except (ValueError, TypeError):  # elsewhere, or an object-storage path
            return str(path)
