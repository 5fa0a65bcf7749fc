"""Environment state: tables of JSON records with O(1) snapshots, an incremental hash and diffs.

Search methods branch from mid-trajectory states thousands of times (TSR, STeCa), GRPO/GiGPO
groups rollouts by identical states, and final-state verification compares a trajectory's end
state with the gold one (tau-bench's "replay the gold actions on a fresh DB and compare
hashes", Yao et al. 2024, arXiv:2406.12045 §3). So the state is built for three operations:

1) **snapshot/restore in O(number of tables)**: a state is a dict of tables, each a dict
   ``key → record``. Records are never changed in place: a write replaces the record object.
   A snapshot keeps references to the current table dicts and marks them shared; the first
   write to a shared table copies that one dict (copy-on-write), so snapshots cost nothing
   until the branches diverge and then only the tables that changed;
2) **hash in O(1)**: each record contributes ``blake2b(canonical_json([table, key, record]))``
   to a per-table sum modulo 2**128, updated on every write (a set hash: independent of the
   order in which records were written, as final-state checking needs). ``hash()`` combines
   the table sums; it is stable across processes and Python versions;
3) **diff(a, b)**: tables and records shared by identity are skipped, so the diff of two
   nearby snapshots costs only what changed. ECHO uses it as evidence of what a failed
   trajectory achieved.

Rule for code that writes (the domain tools): read with :meth:`State.get`, write a *new*
record with :meth:`State.put` / :meth:`State.update` / :meth:`State.delete`; never mutate a
record or a nested list/dict you got from the state. ``tests/envs/test_state.py`` checks
that every built-in tool keeps to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.ids import canonical_json

__all__ = ["Change", "Snapshot", "State", "StateDiff", "diff", "record_digest"]

_MOD = 1 << 128


def record_digest(table: str, key: str, record: Any) -> int:
    """The record's contribution to its table's hash (a 128-bit integer)."""
    data = canonical_json([table, key, record]).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")


@dataclass(frozen=True)
class Snapshot:
    """A frozen state: table dicts shared with the live state (never written through)."""

    tables: Mapping[str, Mapping[str, Any]]
    sums: Mapping[str, int]

    def hash(self) -> str:
        return _combine(self.sums)

    def get(self, table: str, key: str, default: Any = None) -> Any:
        return self.tables.get(table, {}).get(key, default)

    def to_json(self) -> dict[str, dict[str, Any]]:
        """The state as plain JSON (tables sorted by name)."""
        return {t: dict(self.tables[t]) for t in sorted(self.tables)}


def _combine(sums: Mapping[str, int]) -> str:
    data = canonical_json([[t, format(s, "032x")] for t, s in sorted(sums.items())])
    return hashlib.blake2b(data.encode(), digest_size=16).hexdigest()


class State:
    """Live, copy-on-write tables of JSON records (see the module docstring)."""

    __slots__ = ("_hash", "_shared", "_sums", "_tables")

    def __init__(self, tables: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._tables: dict[str, dict[str, Any]] = {}
        self._sums: dict[str, int] = {}
        self._shared: set[str] = set()
        self._hash: str | None = None  # cached until the next write
        for name, rows in (tables or {}).items():
            self._tables[name] = {}
            self._sums[name] = 0
            for key, record in rows.items():
                self.put(name, key, record)

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> State:
        state = cls()
        state.restore(snap)
        return state

    # -- reading ----------------------------------------------------------------------------
    def get(self, table: str, key: str, default: Any = None) -> Any:
        """The record (do not mutate it), or ``default``."""
        return self._tables.get(table, {}).get(key, default)

    def has(self, table: str, key: str) -> bool:
        return key in self._tables.get(table, {})

    def table(self, table: str) -> Mapping[str, Any]:
        """A read-only view of one table (``key → record``)."""
        return _ReadOnly(self._tables.get(table, {}))

    def rows(self, table: str) -> Iterator[tuple[str, Any]]:
        """(key, record) pairs of a table, sorted by key: two states with equal content
        iterate alike, whatever order their records were written in."""
        return iter(sorted(self._tables.get(table, {}).items()))

    def tables(self) -> list[str]:
        return sorted(self._tables)

    def __len__(self) -> int:
        return sum(len(t) for t in self._tables.values())

    # -- writing ----------------------------------------------------------------------------
    def _writable(self, table: str) -> dict[str, Any]:
        self._hash = None
        rows = self._tables.get(table)
        if rows is None:
            rows = self._tables[table] = {}
            self._sums[table] = 0
        elif table in self._shared:
            rows = self._tables[table] = dict(rows)
            self._shared.discard(table)
        return rows

    def put(self, table: str, key: str, record: Any) -> Any:
        """Insert or replace a record (``record`` is stored as given: do not mutate it later)."""
        rows = self._writable(table)
        old = rows.get(key, _MISSING)
        total = self._sums[table]
        if old is not _MISSING:
            total -= record_digest(table, key, old)
        rows[key] = record
        self._sums[table] = (total + record_digest(table, key, record)) % _MOD
        return record

    def update(self, table: str, key: str, **changes: Any) -> dict[str, Any]:
        """Replace a dict record by a copy with ``changes`` applied; returns the new record."""
        old = self.get(table, key)
        if not isinstance(old, dict):
            raise KeyError(f"{table}/{key} is not a record")
        return self.put(table, key, {**old, **changes})

    def delete(self, table: str, key: str) -> Any:
        """Remove a record; returns it (KeyError when absent)."""
        rows = self._writable(table)
        old = rows.pop(key)
        self._sums[table] = (self._sums[table] - record_digest(table, key, old)) % _MOD
        return old

    # -- snapshots, hash, diff --------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """O(number of tables): later writes copy a table first (copy-on-write)."""
        self._shared = set(self._tables)
        return Snapshot(tables=dict(self._tables), sums=dict(self._sums))

    def restore(self, snap: Snapshot) -> None:
        """Go back to ``snap`` (which stays valid and unchanged)."""
        # the snapshot's tables are this state's dicts (shared until written), typed read-only
        self._tables = dict(snap.tables)  # type: ignore[arg-type]
        self._sums = dict(snap.sums)
        self._shared = set(self._tables)
        self._hash = None

    def hash(self) -> str:
        """Stable hash of the whole state, independent of write order."""
        if self._hash is None:
            self._hash = _combine(self._sums)
        return self._hash

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {t: dict(self._tables[t]) for t in sorted(self._tables)}


class _ReadOnly(Mapping[str, Any]):
    __slots__ = ("_d",)

    def __init__(self, d: dict[str, Any]) -> None:
        self._d = d

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


class _Missing:
    pass


_MISSING = _Missing()


# --------------------------------------------------------------------------------------
# diff
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One record that differs between two states."""

    table: str
    key: str
    kind: str  # "added" | "removed" | "changed"
    before: Any = None
    after: Any = None
    fields: tuple[str, ...] = ()  # for changed dict records: the top-level fields that differ

    def describe(self) -> str:
        if self.kind == "added":
            return f"added {self.table}/{self.key}"
        if self.kind == "removed":
            return f"removed {self.table}/{self.key}"
        parts = []
        for f in self.fields:
            b = self.before.get(f) if isinstance(self.before, dict) else None
            a = self.after.get(f) if isinstance(self.after, dict) else None
            parts.append(f"{f}: {canonical_json(b)} -> {canonical_json(a)}")
        return f"changed {self.table}/{self.key}" + (f" ({'; '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class StateDiff:
    """What changed from state ``a`` to state ``b``."""

    changes: tuple[Change, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes)

    def by_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    def describe(self) -> list[str]:
        """One line per change, e.g. ``changed orders/#W1 (status: "pending" -> "cancelled")``."""
        return [c.describe() for c in self.changes]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "table": c.table,
                "key": c.key,
                "kind": c.kind,
                "before": c.before,
                "after": c.after,
                "fields": list(c.fields),
            }
            for c in self.changes
        ]


def _as_snapshot(s: State | Snapshot) -> Snapshot:
    if isinstance(s, Snapshot):
        return s
    return Snapshot(tables=dict(s._tables), sums=dict(s._sums))


def diff(a: State | Snapshot, b: State | Snapshot) -> StateDiff:
    """Every record added, removed or changed from ``a`` to ``b``, in table then key order.

    >>> s = State({"orders": {"o1": {"status": "pending"}}})
    >>> before = s.snapshot()
    >>> _ = s.update("orders", "o1", status="cancelled")
    >>> diff(before, s).describe()
    ['changed orders/o1 (status: "pending" -> "cancelled")']
    """
    sa, sb = _as_snapshot(a), _as_snapshot(b)
    changes: list[Change] = []
    for table in sorted(set(sa.tables) | set(sb.tables)):
        ta, tb = sa.tables.get(table, {}), sb.tables.get(table, {})
        if ta is tb or (sa.sums.get(table) == sb.sums.get(table, -1) and len(ta) == len(tb)):
            continue
        for key in sorted(set(ta) | set(tb)):
            ra, rb = ta.get(key, _MISSING), tb.get(key, _MISSING)
            if ra is rb:
                continue
            if ra is _MISSING:
                changes.append(Change(table, key, "added", None, rb))
            elif rb is _MISSING:
                changes.append(Change(table, key, "removed", ra, None))
            elif canonical_json(ra) != canonical_json(rb):
                fields: tuple[str, ...] = ()
                if isinstance(ra, dict) and isinstance(rb, dict):
                    fields = tuple(
                        f
                        for f in sorted(set(ra) | set(rb))
                        if canonical_json(ra.get(f, _SENTINEL))
                        != canonical_json(rb.get(f, _SENTINEL))
                    )
                changes.append(Change(table, key, "changed", ra, rb, fields))
    return StateDiff(tuple(changes))


_SENTINEL = "\x00missing"
