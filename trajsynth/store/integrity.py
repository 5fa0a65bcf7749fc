"""Shard integrity: a shard is read only if its bytes are the ones its run committed.

The run manifest records, for every committed shard, its size and a content fingerprint
(BLAKE2b of the file's bytes, :func:`trajsynth.core.ids.file_fingerprint`). A Parquet file
overwritten in the middle keeps its size and often a readable footer, so size checks and the
footer check of the reader do not see it. :func:`verify_shards` does:

1. for each shard, find the manifest that describes it: ``manifest.json`` in the shard's
   folder (one-stage layout), one level up (``<run>/<stage>/part-*``) or two
   (``<run>/<stage>/<output>/part-*``);
2. find the shard's record there (stage, output and file name from the relative path);
3. compare the size, then the fingerprint; a mismatch is one :class:`DataError` naming the
   file and what to do. Shards that no manifest describes (imported or hand-made files) are
   read as they are.

``stats``, ``show``, ``export`` and ``report`` call it before reading; the runner checks the
same fingerprints before it reuses a cached stage (and reruns the stage on a mismatch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.errors import DataError
from ..core.ids import file_fingerprint

__all__ = ["shard_record", "verify_shards"]

_MANIFEST = "manifest.json"


def _records(manifest: dict[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Relative path parts → shard record, for every layout the runner writes."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    stages = manifest.get("stages") or {}
    single = len(stages) == 1
    for sid, st in stages.items():
        for name, output in ((st or {}).get("outputs") or {}).items():
            for rec in (output or {}).get("shards") or []:
                file = rec.get("file")
                if not isinstance(file, str):
                    continue
                sub = () if name == "main" else (name,)
                out[(sid, *sub, file)] = rec
                if single:
                    out[(*sub, file)] = rec
    return out


def shard_record(shard: Path, cache: dict[Path, Any] | None = None) -> dict[str, Any] | None:
    """The manifest record of ``shard`` ({file, rows, bytes, fingerprint}), or None."""
    cache = {} if cache is None else cache
    shard = shard.resolve()
    for up in (shard.parent, shard.parent.parent, shard.parent.parent.parent):
        path = up / _MANIFEST
        if path not in cache:
            try:
                cache[path] = _records(json.loads(path.read_text())) if path.is_file() else None
            except (OSError, ValueError, AttributeError, TypeError):
                cache[path] = None  # an unreadable manifest is reported by whoever loads it
        records = cache[path]
        if records:
            rec = records.get(shard.relative_to(up).parts)
            if rec is not None:
                return rec
    return None


def verify_shards(shards: Iterable[str | Path]) -> int:
    """Check every shard against its manifest record (see the module docstring). Returns how
    many were checked; raises :class:`DataError` on the first mismatch."""
    cache: dict[Path, Any] = {}
    checked = 0
    for s in shards:
        shard = Path(s)
        rec = shard_record(shard, cache)
        if rec is None:
            continue
        problem = None
        size = shard.stat().st_size
        if isinstance(rec.get("bytes"), int) and size != rec["bytes"]:
            problem = f"{size:,} bytes, the run wrote {rec['bytes']:,}"
        elif rec.get("fingerprint") and file_fingerprint(shard) != rec["fingerprint"]:
            problem = "its content differs from what the run wrote (fingerprint mismatch)"
        if problem:
            raise DataError(
                f"{shard}: corrupt shard: {problem}",
                hint="the file was changed after it was written; rerun the stage that wrote "
                "it (`trajsynth run` reruns a stage whose shards do not match)",
            )
        checked += 1
    return checked
