"""Content-addressed response cache on disk.

The key of a request is the hash of everything that determines its answer and nothing else:
the endpoint identity (base URL and model, or the simulator's settings, or the local model
folder), the canonical messages, the tools, the sampling parameters, the seed and ``n`` — never
the API key, never a hash of code. A rerun of a finished stage therefore finds every answer
here and sends zero requests; change one message and only that request is sent again.

Layout: ``<cache_dir>/llm/seg-<pid>-<random>.jsonl``, append-only segments, one line per
answered request: ``{"k": "<key>", "v": <entry>}``. Each process appends to its own segment
(no locks between processes) and indexes every segment it finds in memory (key → segment,
offset, length), so a hit is one positioned read and a miss costs nothing on disk. Why not one
file per entry: creating and renaming a file costs ~0.3 ms of CPU per request here, about a
tenth of a whole request's client cost (``bench/llm_throughput.py``); an append costs ~6 µs.

A line is only trusted when complete (a crash mid-write leaves a torn last line, which is
skipped); failed requests are never cached. Segments written by other processes after this one
indexed the folder are picked up on a miss, at most once a second.

A cache folder on object storage (a run with ``--out s3://…``) is mirrored: the segments
there are copied into this machine's scratch folder when the cache opens, this process
appends to its own local segment as above, and :func:`sync_remote_caches` (called when each
unit of a map stage and each stage ends) uploads that segment whole under its own key, so a
resumed run on any machine finds every answer an earlier one committed.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..core.ids import stable_hash
from ..core.location import as_path, is_url, list_names, put_bytes, read_bytes, scratch_dir
from .base import ChatRequest

__all__ = ["CACHE_FORMAT", "ResponseCache", "request_key", "sync_remote_caches"]

_REMOTE: list[ResponseCache] = []
_REMOTE_LOCK = threading.Lock()


def sync_remote_caches() -> None:
    """Upload what this process added to every cache mirrored from object storage."""
    with _REMOTE_LOCK:
        caches = list(_REMOTE)
    for cache in caches:
        cache.sync()


#: bump when the stored entry's shape changes (old entries are then ignored, not misread)
CACHE_FORMAT = 1
_KEY_LEN = 40  # hex digits of a key (stable_hash digest_size=20)
_PREFIX = b'{"k": "'


def request_key(identity: dict[str, Any], request: ChatRequest, *, with_metadata: bool) -> str:
    """The cache key of ``request`` sent to the model that ``identity`` names."""
    body = {
        "v": CACHE_FORMAT,
        "model": identity,
        "messages": request.messages,
        "tools": request.tools,
        "n": request.n,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "logprobs": request.logprobs,
        "top_logprobs": request.top_logprobs,
        "stop": request.stop,
        "extra_body": request.extra_body,
    }
    if with_metadata:
        body["metadata"] = request.metadata
    if request.prompt_token_ids is not None:
        body["prompt_token_ids"] = request.prompt_token_ids
    return stable_hash(body, digest_size=_KEY_LEN // 2)


class ResponseCache:
    """Append-only segments under ``root/llm`` with an in-memory index (see the module
    docstring). Safe across threads; processes each write their own segment."""

    def __init__(self, root: str | Path, *, refresh_s: float = 1.0) -> None:
        #: the cache folder on object storage this one mirrors (None: a local cache)
        self.remote = as_path(root) / "llm" if is_url(root) else None
        self.root = scratch_dir(root) / "llm" if self.remote is not None else Path(root) / "llm"
        self._synced = 0
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._index: dict[str, tuple[str, int, int]] = {}  # key → (segment, offset, length)
        self._scanned: dict[str, int] = {}  # segment → bytes indexed
        self._last_scan = float("-inf")
        self._own: str | None = None
        self._own_fd: int | None = None
        self._own_pid = 0
        self._own_size = 0
        self._read_fds: dict[str, int] = {}
        if self.remote is not None:
            self._pull()
            with _REMOTE_LOCK:
                _REMOTE.append(self)

    # -- object storage ----------------------------------------------------------------------
    def _pull(self) -> None:
        """Copy the bucket's segments that this machine lacks (or has shorter)."""
        assert self.remote is not None
        self.root.mkdir(parents=True, exist_ok=True)
        for name in list_names(self.remote, "seg-*.jsonl"):
            local = self.root / name
            data = read_bytes(self.remote / name)
            if local.exists() and local.stat().st_size >= len(data):
                continue
            tmp = local.with_name(f".{name}.tmp-{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, local)

    def sync(self) -> None:
        """Upload this process's segment to the bucket if it grew (a mirrored cache only)."""
        if self.remote is None:
            return
        with self._lock:
            own, size = self._own, self._own_size
            if own is None or size <= self._synced or self._own_pid != os.getpid():
                return
            with open(self.root / own, "rb") as f:
                data = f.read(size)
        put_bytes(self.remote / own, data)
        with self._lock:
            self._synced = max(self._synced, size)

    # -- index -------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Index complete lines of every segment beyond what is already indexed."""
        self._last_scan = time.monotonic()
        if not self.root.is_dir():
            return
        for entry in os.scandir(self.root):
            name = entry.name
            if not (name.startswith("seg-") and name.endswith(".jsonl")) or name == self._own:
                continue
            done = self._scanned.get(name, 0)
            try:
                size = entry.stat().st_size
            except OSError:
                continue
            if size <= done:
                continue
            with open(entry.path, "rb") as f:
                f.seek(done)
                data = f.read(size - done)
            offset = done
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    break  # torn or still being written: index it on a later scan
                if line.startswith(_PREFIX):
                    key = line[len(_PREFIX) : len(_PREFIX) + _KEY_LEN].decode("ascii", "replace")
                    self._index[key] = (name, offset, len(line))
                offset += len(line)
            self._scanned[name] = offset

    def _lookup(self, key: str) -> tuple[str, int, int] | None:
        with self._lock:
            if not self._scanned and self._last_scan == float("-inf"):
                self._scan()
            loc = self._index.get(key)
            if loc is None and time.monotonic() - self._last_scan >= self.refresh_s:
                self._scan()
                loc = self._index.get(key)
            return loc

    # -- public ------------------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None (missing or unreadable: treated as a miss)."""
        loc = self._lookup(key)
        if loc is None:
            return None
        name, offset, length = loc
        try:
            with self._lock:
                fd = self._read_fds.get(name)
                if fd is None:
                    fd = self._read_fds[name] = os.open(self.root / name, os.O_RDONLY)
            line = os.pread(fd, length, offset)
            record = json.loads(line)
        except (OSError, ValueError):
            return None
        entry = record.get("v") if isinstance(record, dict) else None
        if record.get("k") != key or not isinstance(entry, dict):
            return None
        if entry.get("format") != CACHE_FORMAT:
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Append ``entry`` to this process's segment (best effort: a full disk or an entry
        that cannot be written loses the entry, not the run)."""
        record = {"k": key, "v": {**entry, "format": CACHE_FORMAT}}
        try:
            try:
                line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
            except UnicodeEncodeError:
                # a lone surrogate has no UTF-8 form: the ASCII escapes keep it exactly
                line = (json.dumps(record, ensure_ascii=True) + "\n").encode()
            with self._lock:
                if self._own_fd is None or self._own_pid != os.getpid():
                    self.root.mkdir(parents=True, exist_ok=True)
                    self._own = f"seg-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
                    self._own_pid = os.getpid()
                    self._own_fd = os.open(
                        self.root / self._own, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
                    )
                    self._own_size = 0
                    self._synced = 0
                segment = self._own
                assert segment is not None, "set with the segment's file descriptor"
                os.write(self._own_fd, line)
                self._index[key] = (segment, self._own_size, len(line))
                self._own_size += len(line)
        except (OSError, ValueError, TypeError):
            return

    def __len__(self) -> int:
        with self._lock:
            self._scan()
            return len(self._index)

    def close(self) -> None:
        with self._lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            if self._own_fd is not None:
                os.close(self._own_fd)
                self._own_fd = None
