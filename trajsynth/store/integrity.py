"""Shard integrity: a shard is read only if its bytes are the ones its run committed.

The run manifest records, for every committed shard, its size and a content fingerprint
(BLAKE2b of the file's bytes, :func:`trajsynth.core.ids.file_fingerprint`). A Parquet file
overwritten in the middle keeps its size and often a readable footer (one bit flipped in a
data page is read as other values, without an error), so size checks and the footer check of
the reader do not see it. The fingerprint does:

1. for each shard, find the manifest that describes it: ``manifest.json`` in the shard's
   folder (one-stage layout), one level up (``<run>/<stage>/part-*``) or two
   (``<run>/<stage>/<output>/part-*``) (:func:`shard_record`, :func:`shard_checks`);
2. find the shard's record there (stage, output and file name from the relative path);
3. compare the size, then the fingerprint (:func:`check_shard`); a mismatch is one
   :class:`DataError` naming the file and what to do. Shards that no manifest describes
   (imported or hand-made files) are read as they are.

Every read of a shard goes through ``store.shards`` (``iter_batches``, ``iter_shard``,
``read_table``, ``read_records``, ``ShardReader``: the only code that opens Parquet files,
``tests/store/test_one_reader.py``), which checks the shard this way while it decodes it;
the runner hands the records it already has to its readers (its own stages' outputs, in
every executor), everything else looks them up. :func:`verify_shards` checks shards without
reading them (``stats``, ``show``, ``export`` and ``report`` call it first, so a corrupt shard
anywhere fails before any output); the runner checks the same fingerprints before it reuses
a cached stage (and reruns the stage on a mismatch).

A fingerprint computed in this process is remembered for a file whose size, inode and
modification time are unchanged, as long as that time was over :data:`RACY_S` seconds old
when it was computed (a write within the file system's timestamp granularity of the
computation could otherwise keep all three: git's "racily clean" rule). So a shard that was
verified, then read, is hashed once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import DataError
from ..core.ids import bytes_fingerprint, file_fingerprint
from ..core.location import as_path, etag_of, is_url, read_bytes, size_of
from .layout import RunFolder

__all__ = [
    "RACY_S",
    "ShardCheck",
    "check_shard",
    "fingerprint_of",
    "shard_checks",
    "shard_record",
    "verify_shards",
]

RACY_S = 2.0  # a file modified less than this before its hash is hashed again next time


@dataclass(frozen=True)
class ShardCheck:
    """What a shard's bytes must be: its size and fingerprint as its run committed them
    (either may be None: not recorded)."""

    bytes: int | None
    fingerprint: str | None

    @classmethod
    def of(cls, record: Any) -> ShardCheck:
        """From a manifest record (a dict or a ``ShardRecord``)."""

        def get(key: str) -> Any:
            return record.get(key) if isinstance(record, dict) else getattr(record, key, None)

        size, fingerprint = get("bytes"), get("fingerprint")
        return cls(
            size if isinstance(size, int) else None,
            fingerprint if isinstance(fingerprint, str) and fingerprint else None,
        )


_KNOWN: dict[tuple[str, int, int, int, int], str] = {}
_KNOWN_LOCK = threading.Lock()
_KNOWN_MAX = 65_536


_KNOWN_REMOTE: dict[tuple[str, str], str] = {}


def fingerprint_of(path: Path) -> str:
    """``file_fingerprint(path)``, remembered for an unchanged file (see the module
    docstring); an object on storage is remembered by its URL and version tag (ETag)."""
    path = as_path(path)
    if is_url(path):
        tag = etag_of(path)
        rkey = (str(path), tag or "")
        with _KNOWN_LOCK:
            known = _KNOWN_REMOTE.get(rkey)
        if known is not None and tag:
            return known
        fingerprint = bytes_fingerprint(read_bytes(path))
        with _KNOWN_LOCK:
            if len(_KNOWN_REMOTE) >= _KNOWN_MAX:
                _KNOWN_REMOTE.clear()
            _KNOWN_REMOTE[rkey] = fingerprint
        return fingerprint
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns)
    with _KNOWN_LOCK:
        known = _KNOWN.get(key)
    if known is not None:
        return known
    started = time.time_ns()
    fingerprint = file_fingerprint(path)
    if started - st.st_mtime_ns > RACY_S * 1e9:
        with _KNOWN_LOCK:
            if len(_KNOWN) >= _KNOWN_MAX:
                _KNOWN.clear()
            _KNOWN[key] = fingerprint
    return fingerprint


def check_shard(
    shard: Path,
    check: ShardCheck | None,
    *,
    fingerprint: str | None = None,
    size: int | None = None,
) -> None:
    """Raise :class:`DataError` when ``shard`` is not the file ``check`` describes: another
    size, or (``fingerprint``: its fingerprint when the caller computed it already) another
    content. ``None``: nothing recorded, nothing to check. ``size``: the size when the
    caller knows it (the bytes it read)."""
    if check is None:
        return
    problem = None
    if size is None:
        size = size_of(shard)
    if check.bytes is not None and size != check.bytes:
        problem = f"{size:,} bytes, the run wrote {check.bytes:,}"
    elif check.fingerprint is not None:
        got = fingerprint if fingerprint is not None else fingerprint_of(shard)
        if got != check.fingerprint:
            problem = "its content differs from what the run wrote (fingerprint mismatch)"
    if problem:
        raise DataError(
            f"{shard}: corrupt shard: {problem}",
            hint="the file was changed after it was written; rerun the stage that wrote "
            "it (`trajsynth run` reruns a stage whose shards do not match)",
        )


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


def shard_record(shard: Path, cache: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The manifest record of ``shard`` ({file, rows, bytes, fingerprint}), or None."""
    cache = {} if cache is None else cache
    remote = is_url(shard)
    shard = as_path(shard) if remote else Path(shard).resolve()
    text = str(shard)
    for depth in (1, 2, 3):
        up = shard
        for _ in range(depth):
            up = up.parent
        path = RunFolder(up).manifest
        key = str(path)
        if key not in cache:
            try:
                cache[key] = _records(json.loads(read_bytes(path)))
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                cache[key] = None
            except (OSError, ValueError, AttributeError, TypeError):
                cache[key] = None  # an unreadable manifest is reported by whoever loads it
        records = cache[key]
        if records:
            rel = (
                tuple(text[len(str(up)) :].strip("/").split("/"))
                if remote
                else shard.relative_to(up).parts
            )
            rec: dict[str, Any] | None = records.get(rel)
            if rec is not None:
                return rec
    return None


def shard_checks(shards: Iterable[str | Path]) -> dict[Path, ShardCheck | None]:
    """Each shard's :class:`ShardCheck` from the manifest that describes it (None for a
    shard no manifest describes); every manifest is read once."""
    cache: dict[str, Any] = {}
    out: dict[Path, ShardCheck | None] = {}
    for s in shards:
        p = as_path(s)
        rec = shard_record(p, cache)
        out[p] = None if rec is None else ShardCheck.of(rec)
    return out


def verify_shards(shards: Iterable[str | Path]) -> int:
    """Check every shard against its manifest record (see the module docstring). Returns how
    many were checked; raises :class:`DataError` on the first mismatch."""
    checked = 0
    for shard, check in shard_checks(shards).items():
        if check is None:
            continue
        check_shard(shard, check)
        checked += 1
    return checked
