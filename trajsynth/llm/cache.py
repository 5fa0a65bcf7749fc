"""Content-addressed response cache on disk.

The key of a request is the hash of everything that determines its answer and nothing else:
the endpoint identity (base URL and model, or the simulator's settings, or the local model
folder), the canonical messages, the tools, the sampling parameters, the seed and ``n`` — never
the API key, never a hash of code. A rerun of a finished stage therefore finds every answer
here and sends zero requests; change one message and only that request is sent again.

Layout: ``<cache_dir>/llm/<k[:2]>/<k>.json``, one file per answered request, written to a
temporary name and renamed, so a crash never leaves a half-written entry and processes can
share one cache. Failed requests are never cached.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from ..core.ids import stable_hash
from .base import ChatRequest

__all__ = ["CACHE_FORMAT", "ResponseCache", "request_key"]

#: bump when the stored entry's shape changes (old entries are then ignored, not misread)
CACHE_FORMAT = 1


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
    return stable_hash(body, digest_size=20)


class ResponseCache:
    """Files under ``root/llm``; ``get`` and ``put`` are safe across threads and processes."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root) / "llm"
        self._made: set[str] = set()
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None (missing, or unreadable: treated as a miss)."""
        try:
            with open(self._path(key), "rb") as f:
                entry = json.loads(f.read())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("format") != CACHE_FORMAT:
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` atomically (best effort: a full disk loses the entry, not the run)."""
        path = self._path(key)
        folder = key[:2]
        try:
            if folder not in self._made:
                path.parent.mkdir(parents=True, exist_ok=True)
                with self._lock:
                    self._made.add(folder)
            tmp = path.with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps({**entry, "format": CACHE_FORMAT}, ensure_ascii=False))
            os.replace(tmp, path)
        except OSError:
            return

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
