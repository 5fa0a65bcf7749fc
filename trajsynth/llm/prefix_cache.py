"""Reuse of attention keys and values across generations of the local backend.

An agent episode asks the model again and again with one growing prompt: step k's prompt is
step k−1's prompt, the model's reply and the tool's result. Episodes of one task family share
their system prompt and tool list. Recomputing that prefix at every step is most of a small
model's CPU time (a 200-token prompt of 12 episodes costs about as much as 30 decoding steps).
vLLM calls the remedy automatic prefix caching; this is the same idea for ``transformers``'
``generate``, kept per backend in memory:

1. **Store.** After a generation, each sequence's keys and values (prompt and generated
   tokens, without the last token, whose keys were never computed) are kept with the token
   ids they belong to, least recently used first out once ``budget_bytes`` is exceeded; an
   entry that another entry extends is dropped (the longer one serves both).
2. **Look up.** For a new prompt, the entry with the longest common prefix of token ids is
   found; keys and values depend only on the tokens before them, so that prefix's keys and
   values are exactly what a fresh computation would give (up to float rounding). At least
   the prompt's last token is always computed, since generation needs its logits.
3. **Batch.** Prompts of one batch reuse different lengths. The batch's cache is left-padded
   to the longest reused prefix and the tokens still to compute are left-padded after it, so
   padding may sit in the middle of a row; the attention mask marks it, and positions come
   from the mask (``generate`` numbers tokens by the mask's running sum), so every token keeps
   its true position.

Only a model whose weights do not change may use this (a checkpoint loaded from a folder):
keys and values from old weights would be wrong for new ones, so the backend over a policy in
training (:meth:`LocalBackend.from_model`) keeps it off.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any

__all__ = ["PrefixCache", "Reuse"]


class Reuse:
    """What one prompt reuses: the length of its cached prefix and, per layer, that prefix's
    keys and values, each ``(heads, length, head_dim)``."""

    __slots__ = ("layers", "length")

    def __init__(self, length: int, layers: list[tuple[Any, Any]]) -> None:
        self.length = length
        self.layers = layers


class PrefixCache:
    """Token ids → keys and values, least recently used out past ``budget_bytes``."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._bytes = 0
        #: lookups, hits and tokens reused, for tests and logs
        self.stats = {"lookups": 0, "hits": 0, "reused_tokens": 0, "prompt_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    # -- 2) look up ------------------------------------------------------------------------
    def lookup(self, prompt: list[int]) -> Reuse | None:
        """The longest cached prefix of ``prompt`` (at most all but its last token)."""
        self.stats["lookups"] += 1
        self.stats["prompt_tokens"] += len(prompt)
        best, best_len = None, 0
        limit = len(prompt) - 1
        for ids in self._entries:
            n = _common_prefix(ids, prompt, limit)
            if n > best_len:
                best, best_len = ids, n
        if best is None:
            return None
        self._entries.move_to_end(best)
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += best_len
        layers = self._entries[best]
        return Reuse(best_len, [(k[:, :best_len], v[:, :best_len]) for k, v in layers])

    # -- 1) store --------------------------------------------------------------------------
    def store(self, ids: list[int], layers: list[tuple[Any, Any]]) -> None:
        """Keep ``layers`` (per layer ``(heads, len(ids), head_dim)`` keys and values)."""
        key = tuple(ids)
        if not key:
            return
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if size > self.budget_bytes:
            return
        for old in [o for o in self._entries if len(o) <= len(key) and key[: len(o)] == o]:
            self._drop(old)  # the new entry serves every prompt the old one served
        self._entries[key] = [(k.contiguous(), v.contiguous()) for k, v in layers]
        self._bytes += size
        while self._bytes > self.budget_bytes and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        layers = self._entries.pop(key)
        self._bytes -= sum(
            k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers
        )

    # -- 3) batch ----------------------------------------------------------------------------
    @staticmethod
    def batch_cache(reuses: list[Reuse | None], width: int) -> Any:
        """One ``DynamicCache`` for a batch: row i holds its reused prefix right-aligned in
        ``width`` positions (zeros before it, masked by the caller)."""
        from transformers import DynamicCache

        ref = next(r for r in reuses if r is not None)
        data = []
        for layer, (k0, v0) in enumerate(ref.layers):
            heads, _, dim = k0.shape
            keys = k0.new_zeros((len(reuses), heads, width, dim))
            values = v0.new_zeros((len(reuses), heads, width, dim))
            for i, r in enumerate(reuses):
                if r is not None and r.length:
                    keys[i, :, width - r.length :] = r.layers[layer][0]
                    values[i, :, width - r.length :] = r.layers[layer][1]
            data.append((keys, values))
        if "ddp_cache_data" in inspect.signature(DynamicCache.__init__).parameters:
            return DynamicCache(ddp_cache_data=data)
        # transformers < 5 (the installed 5's stubs no longer have it)
        return DynamicCache.from_legacy_cache(tuple(data))  # type: ignore[attr-defined]

    @staticmethod
    def row_layers(cache: Any, row: int, keep: Any) -> list[tuple[Any, Any]]:
        """Row ``row``'s keys and values at positions ``keep`` (a 1-D index tensor)."""
        if hasattr(cache, "layers"):
            pairs = [(layer.keys, layer.values) for layer in cache.layers]
        else:  # transformers < 5
            pairs = list(zip(cache.key_cache, cache.value_cache, strict=True))
        return [(k[row][:, keep], v[row][:, keep]) for k, v in pairs]


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if a[:n] == tuple(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == tuple(b[:mid]):
            lo = mid
        else:
            hi = mid
    return lo
