"""Parquet shards: an exactly-once writer and a streaming reader.

Writing. :class:`ShardWriter` buffers rows and writes ``part-NNNNN.parquet`` files of
``shard_rows`` rows. Each file is written under a hidden temporary name, flushed, fsynced and
only then renamed into place (and the folder fsynced), so a reader never sees half a shard and
a crash leaves at most a temporary file, which the next writer in that folder removes.

Reading. :func:`list_shards` resolves a file, a folder (its ``part-*.parquet``, else
``*.parquet``) or a glob; :func:`iter_batches` streams record batches with column projection.
Every file's footer is checked first: a corrupt, truncated or foreign file, or a shard of an
unknown schema version, ends in one :class:`DataError` naming the file.

This module is the only code that opens Parquet files for reading
(``tests/store/test_one_reader.py``), and every read goes through :func:`_read_shard`, which
checks the shard against the size and fingerprint its run recorded (``integrity``): the
record the caller hands over (the runner knows its stages' records), or the one found in the
manifest beside the shard. The fingerprint is computed in a thread while pyarrow decodes the
file (both release the GIL), so on a machine with a core to spare a verified read costs
little more than a plain one; a mismatch is one :class:`DataError` and no rows.
"""

from __future__ import annotations

import glob as globlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.batch import conform, to_records
from ..core.errors import DataError, InputNotFoundError, SchemaVersionError
from ..core.ids import bytes_fingerprint, file_fingerprint
from ..core.location import (
    AnyPath,
    as_path,
    fsync_dir,
    is_url,
    list_names,
    put_bytes,
    read_bytes,
    storage_errors,
)
from ..core.schema import ARROW_SCHEMA, SCHEMA_VERSION, Trajectory
from .integrity import ShardCheck, check_shard, fingerprint_of, shard_checks
from .layout import MANIFEST_NAME, RunFolder
from .migrations import MIGRATIONS

__all__ = [
    "DEFAULT_COMPRESSION",
    "LOOKUP",
    "Check",
    "ShardCheck",
    "ShardInfo",
    "ShardReader",
    "ShardWriter",
    "clean_tmp",
    "count_rows",
    "footer_rows",
    "fsync_dir",
    "iter_batches",
    "iter_shard",
    "list_shards",
    "read_records",
    "read_table",
    "shard_version",
    "write_shard",
]

DEFAULT_COMPRESSION = "zstd"
VERSION_KEY = b"trajsynth.schema_version"
TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class ShardInfo:
    """A committed shard: its file name (relative to its folder), rows, bytes and content hash."""

    file: str
    rows: int
    bytes: int
    fingerprint: str


def write_shard(
    table: pa.Table,
    path: Path,
    *,
    compression: str = DEFAULT_COMPRESSION,
    row_group_rows: int | None = None,
) -> ShardInfo:
    """Atomically write ``table`` (already conformed) to ``path``: tmp → fsync → rename; on
    object storage one write-once PUT (a reader sees the whole object or none, and a key
    already taken is never replaced)."""
    path = as_path(path)
    if is_url(path):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression=compression, row_group_size=row_group_rows)
        data = sink.getvalue().to_pybytes()
        put_bytes(path, data, create_only=True)
        fingerprint = bytes_fingerprint(data)
        return ShardInfo(path.name, table.num_rows, len(data), fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{os.getpid()}-{path.name}")
    with open(tmp, "wb") as sink:
        pq.write_table(
            table,
            sink,
            compression=compression,
            row_group_size=row_group_rows,
        )
        sink.flush()
        os.fsync(sink.fileno())
    size = tmp.stat().st_size
    fingerprint = file_fingerprint(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return ShardInfo(file=path.name, rows=table.num_rows, bytes=size, fingerprint=fingerprint)


def clean_tmp(directory: Path) -> int:
    """Remove temporary files a crashed writer left in ``directory``; returns how many."""
    removed = 0
    if is_url(directory):
        return 0  # object storage has no temporary files: a PUT is whole or absent
    directory = Path(directory)
    if directory.is_dir():
        for p in directory.glob(f"{TMP_PREFIX}*"):
            p.unlink(missing_ok=True)
            removed += 1
    return removed


class ShardWriter:
    """Rows in, ``part-NNNNN.parquet`` files of ``shard_rows`` rows out, each committed atomically.

    Example::

        with ShardWriter(Path("out"), shard_rows=10_000) as w:
            for batch in batches:
                w.write(batch)
        w.shards   # [ShardInfo(file='part-00000.parquet', rows=10000, ...), ...]

    ``on_commit`` is called with each ShardInfo right after its rename, which is where the
    runner records it in the manifest.
    """

    def __init__(
        self,
        directory: Path,
        *,
        shard_rows: int | None = 50_000,
        start_index: int = 0,
        name_format: str = "part-{:05d}.parquet",
        compression: str = DEFAULT_COMPRESSION,
        row_group_rows: int | None = None,
        on_commit: Callable[[ShardInfo], None] | None = None,
        where: str = "",
        clean: bool = True,
    ) -> None:
        """``shard_rows=None``: one shard of everything written, committed by :meth:`close`.
        ``where`` names the writer's data in schema errors. ``clean=False`` leaves temporary
        files in the folder alone (writers that share a folder and run at once)."""
        if shard_rows is not None and shard_rows <= 0:
            raise ValueError("shard_rows must be positive")
        self.directory = as_path(directory)
        self.shard_rows = shard_rows
        self.next_index = start_index
        self.name_format = name_format
        self.compression = compression
        self.row_group_rows = row_group_rows
        self.on_commit = on_commit
        self.where = where
        self.shards: list[ShardInfo] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        if not is_url(self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
        if clean:
            clean_tmp(self.directory)

    def write(self, data: pa.RecordBatch | pa.Table | Sequence[Trajectory]) -> list[ShardInfo]:
        """Buffer ``data``; commit every full shard. Returns the shards committed now."""
        table = conform(data, where=self.where)
        if table.num_rows == 0:
            return []
        self._pending.append(table)
        self._pending_rows += table.num_rows
        committed = []
        while self.shard_rows is not None and self._pending_rows >= self.shard_rows:
            committed.append(self._flush(self.shard_rows))
        return committed

    def close(self) -> list[ShardInfo]:
        """Commit what is buffered (a final, smaller shard). Returns the shards committed now."""
        committed = []
        if self._pending_rows:
            committed.append(self._flush(self._pending_rows))
        return committed

    def _flush(self, rows: int) -> ShardInfo:
        table = pa.concat_tables(self._pending)
        head, rest = table.slice(0, rows), table.slice(rows)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows
        path = self.directory / self.name_format.format(self.next_index)
        self.next_index += 1
        info = write_shard(
            head,
            path,
            compression=self.compression,
            row_group_rows=self.row_group_rows,
        )
        self.shards.append(info)
        if self.on_commit is not None:
            self.on_commit(info)
        return info

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()


# ------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------


def list_shards(path: str | Path | Iterable[str | Path]) -> list[Path]:
    """Resolve a file, a folder, a glob, or several of them into an ordered list of shards
    (on object storage too: ``s3://bucket/run/stage``)."""
    if not isinstance(path, (str, Path)) and not is_url(path):
        out: list[Path] = []
        for p in path:
            out.extend(list_shards(p))
        return out
    if is_url(path):
        return _list_remote(as_path(path))
    path = as_path(path)
    text = str(path)
    p = Path(text)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(p.glob("part-*.parquet"))
        if not files:
            files = sorted(f for f in p.glob("*.parquet") if not f.name.startswith("."))
        if not files:
            if RunFolder(p).manifest.exists() and any(c.is_dir() for c in p.iterdir()):
                stages = sorted(c.name for c in p.iterdir() if c.is_dir())
                raise InputNotFoundError(
                    f"{p} is a run folder, not a shard folder",
                    hint=f"name one of its stage folders, e.g. {p / stages[-1]}",
                )
            raise InputNotFoundError(f"{p} holds no Parquet shards")
        return files
    if any(ch in text for ch in "*?["):
        files = sorted(
            Path(f) for f in globlib.glob(text, recursive=True) if f.endswith(".parquet")
        )
        if not files:
            raise InputNotFoundError(f"no Parquet shards match {text}")
        return files
    raise InputNotFoundError(f"{p} does not exist")


def _list_remote(p: Any) -> list[Any]:
    """:func:`list_shards` on object storage: a key, a folder (prefix) or a glob."""
    text = str(p)
    fs, key = p.fs, p.path
    with storage_errors(p, "list"):
        if any(ch in text for ch in "*?["):
            found = sorted(f for f in fs.glob(key) if f.endswith(".parquet"))
            if not found:
                raise InputNotFoundError(f"no Parquet shards match {text}")
            return [as_path(f"{text.split('://', 1)[0]}://{f}") for f in found]
        try:
            info = fs.info(key)
        except FileNotFoundError:
            raise InputNotFoundError(f"{text} does not exist") from None
    if info.get("type") == "file":
        return [p]
    names = list_names(p, "part-*.parquet")
    if not names:
        names = [n for n in list_names(p, "*.parquet") if not n.startswith(".")]
    if not names:
        if list_names(p, MANIFEST_NAME):
            raise InputNotFoundError(
                f"{text} is a run folder, not a shard folder", hint="name one of its stage folders"
            )
        raise InputNotFoundError(f"{text} holds no Parquet shards")
    return [p / n for n in names]


def _open(path: AnyPath, data: bytes | None = None) -> pq.ParquetFile:
    try:
        if data is not None:
            return pq.ParquetFile(pa.BufferReader(data))
        if is_url(path):
            with storage_errors(path, "read"):
                return pq.ParquetFile(path.fs.open(path.path, "rb"))
        return pq.ParquetFile(path, memory_map=True)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from exc


def shard_version(pf: pq.ParquetFile, path: Path) -> int:
    """The schema version recorded in a shard's footer; DataError if it is not a trajsynth shard."""
    metadata = pf.schema_arrow.metadata or {}
    raw = metadata.get(VERSION_KEY)
    if raw is None:
        raise DataError(
            f"{path}: not a trajsynth shard (no {VERSION_KEY.decode()} in its metadata)",
            hint="import foreign data with an importer, e.g. `trajsynth tools import`, or "
            "write it with trajsynth.store.ShardWriter",
        )
    try:
        return int(raw)
    except ValueError as exc:
        raise DataError(f"{path}: bad schema version {raw!r}") from exc


def _check_version(pf: pq.ParquetFile, path: Path) -> int:
    version = shard_version(pf, path)
    if version != SCHEMA_VERSION and version not in MIGRATIONS:
        raise SchemaVersionError(
            f"{path}: written with schema version {version}, this trajsynth reads "
            f"version {SCHEMA_VERSION} and has no migration from {version}",
            hint="re-run the stage that wrote it with this trajsynth version",
        )
    return version


def _migrate(table: pa.Table, version: int) -> pa.Table:
    while version != SCHEMA_VERSION:
        table, version = MIGRATIONS[version](table)
    return table


def iter_batches(
    path: str | Path | Iterable[str | Path],
    *,
    columns: Sequence[str] | None = None,
    batch_size: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """Stream record batches from every shard under ``path``, reading only ``columns``.

    The next shard is read in a background thread while the current one is consumed
    (pyarrow decodes without the GIL), so many small shards stream about as fast as one file.
    At most two shards are in memory at once.
    """
    shards = list_shards(path)
    checks = shard_checks(shards)  # each manifest read once
    if len(shards) <= 1:
        for shard in shards:
            yield from iter_shard(
                shard, columns=columns, batch_size=batch_size, check=checks[shard]
            )
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajsynth-read") as pool:
        pending = pool.submit(_read_shard, shards[0], columns, checks[shards[0]])
        for nxt in [*shards[1:], None]:
            table = pending.result()
            if nxt is not None:
                pending = pool.submit(_read_shard, nxt, columns, checks[nxt])
            yield from table.to_batches(max_chunksize=batch_size)


#: ``check=LOOKUP``: find the shard's record in the manifest beside it
LOOKUP: Final = "lookup"
Check = ShardCheck | None | Literal["lookup"]


def iter_shard(
    shard: Path,
    *,
    columns: Sequence[str] | None = None,
    batch_size: int = 65_536,
    check: Check = LOOKUP,
) -> Iterator[pa.RecordBatch]:
    """Stream one shard's batches (verified, version-checked, migrated where needed).
    ``check``: what its bytes must be (the caller's record), ``LOOKUP`` (the default) to find
    it in the manifest, None for a shard that no run recorded."""
    yield from _read_shard(shard, columns, check).to_batches(max_chunksize=batch_size)


@dataclass(frozen=True)
class ShardReader:
    """A picklable reader of one shard, what the runner hands a streaming global stage (its
    workers read their own shards; only this layer opens files): ``reader(columns)`` → the
    rows, verified against ``check`` (see :func:`iter_shard`), version-checked and
    migrated; ``reader.columns`` → the column names."""

    path: str
    check: Check = LOOKUP

    @property
    def columns(self) -> list[str]:
        return list(_open(as_path(self.path)).schema_arrow.names)

    def __call__(self, columns: Sequence[str] | None = None) -> pa.Table:
        return _read_shard(as_path(self.path), columns, self.check)


def _fingerprint_in_thread(shard: Path) -> Future[str]:
    """The shard's fingerprint, computed in a thread of its own (hashing releases the GIL,
    so it runs beside pyarrow's decoding)."""
    future: Future[str] = Future()

    def run() -> None:
        try:
            future.set_result(fingerprint_of(shard))
        except BaseException as exc:  # handed to the reader, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name="trajsynth-verify", daemon=True).start()
    return future


def _read_shard(shard: Path, columns: Sequence[str] | None, check: Check = LOOKUP) -> pa.Table:
    """One whole shard (shards are bounded by shard_rows, and a whole read is multi-threaded
    and faster than iter_batches), verified against ``check`` (see :func:`iter_shard`),
    version-checked and migrated where needed. The one function that reads shard data."""
    shard = as_path(shard)
    if check == LOOKUP:
        check = shard_checks([shard])[shard]
    fingerprint: Future[str] | None = None
    data: bytes | None = None
    if is_url(shard):  # one GET; the bytes are checked, then decoded from memory
        try:
            data = read_bytes(shard)
        except FileNotFoundError:
            raise InputNotFoundError(f"{shard} does not exist") from None
        if check is not None:
            check_shard(shard, check, fingerprint=bytes_fingerprint(data), size=len(data))
    elif check is not None:
        check_shard(shard, ShardCheck(check.bytes, None))  # the size first: no hash needed
        if check.fingerprint is not None:
            fingerprint = _fingerprint_in_thread(shard)
    try:
        table = _decode(shard, columns, data)
    except BaseException:
        if fingerprint is not None:  # a corrupt shard is said as such, not as bad Parquet
            check_shard(shard, check, fingerprint=fingerprint.result())
        raise
    if fingerprint is not None:
        check_shard(shard, check, fingerprint=fingerprint.result())
    return table


def _decode(shard: Path, columns: Sequence[str] | None, data: bytes | None = None) -> pa.Table:
    pf = _open(shard, data)
    version = _check_version(pf, shard)
    if columns is not None and version == SCHEMA_VERSION:
        missing = [c for c in columns if c not in pf.schema_arrow.names]
        if missing:
            raise DataError(f"{shard}: no column(s) {missing}")
    try:
        if version == SCHEMA_VERSION:
            return pf.read(columns=columns)
        table = _migrate(pf.read(), version)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise DataError(f"{shard}: corrupt Parquet data ({exc})") from exc
    return table.select(list(columns)) if columns is not None else table


def read_table(
    path: str | Path | Iterable[str | Path], *, columns: Sequence[str] | None = None
) -> pa.Table:
    """Read every shard under ``path`` into one Table (use :func:`iter_batches` for big data)."""
    batches = list(iter_batches(path, columns=columns))
    if not batches:
        schema = (
            ARROW_SCHEMA if columns is None else pa.schema([ARROW_SCHEMA.field(c) for c in columns])
        )
        return schema.empty_table()
    return pa.Table.from_batches(batches)


def count_rows(path: str | Path | Iterable[str | Path]) -> int:
    """Total rows under ``path``, from the footers only (not verified: no rows are read)."""
    return sum(footer_rows(s) for s in list_shards(path))


def footer_rows(shard: str | Path) -> int:
    """The rows one shard's footer says it holds (``DataError`` for an unreadable file)."""
    rows: int = _open(as_path(shard)).metadata.num_rows
    return rows


def read_records(path: str | Path | Iterable[str | Path]) -> list[Trajectory]:
    """Every row under ``path`` as typed records (for small data; stream otherwise)."""
    return to_records(read_table(path))
