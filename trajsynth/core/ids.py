"""Deterministic ids and hashes.

Every id in trajsynth is a hash of the inputs that produced the thing it names, so a rerun
writes the same ids and the runner can check exactly-once output by id. Hashes are BLAKE2b
over canonical JSON (sorted keys, no whitespace), which is stable across processes and
Python versions (unlike ``hash()``).

>>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
True
>>> len(stable_id("task", 3))
32
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = [
    "bytes_fingerprint",
    "canonical_json",
    "file_fingerprint",
    "seed_from",
    "stable_hash",
    "stable_id",
]


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
    )


def stable_hash(obj: Any, *, digest_size: int = 16) -> str:
    """Hex BLAKE2b digest of the canonical JSON of ``obj``.

    Lone surrogates in strings are hashed as their code points (``surrogatepass``), so any
    Python string hashes, and every valid string hashes exactly as plain UTF-8 would."""
    data = canonical_json(obj).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=digest_size).hexdigest()


def stable_id(*parts: Any) -> str:
    """A 32-hex-digit id derived from ``parts`` (any JSON-able values)."""
    return stable_hash(list(parts))


def seed_from(*parts: Any) -> int:
    """A 63-bit integer seed derived from ``parts``; use it to seed per-row RNGs."""
    return int(stable_hash(list(parts), digest_size=8), 16) & ((1 << 63) - 1)


def bytes_fingerprint(data: bytes) -> str:
    """:func:`file_fingerprint` of a file holding ``data`` (an object read whole from storage)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_fingerprint(path: str | Path, *, chunk: int = 1 << 22) -> str:
    """Hex BLAKE2b digest of a file's bytes (its content, not its name or time)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
