"""Where data lives: a local path, or a URL on object storage (``s3://``, ``gs://``) or a
``file://`` URL, behind one small set of functions.

A local path (or ``file://…``) is a :class:`pathlib.Path`; a bucket URL is a
:class:`upath.UPath` over fsspec (``s3fs``, ``gcsfs``), which has the same ``/``, ``name``,
``parent``, ``exists`` … as a path. :func:`as_path` makes one from either. What a path API
cannot say the same way on both is here:

- :func:`read_bytes`, :func:`put_bytes` (local: temporary file, fsync, rename; a bucket: one
  PUT, which readers see whole or not at all, never half; ``create_only`` makes the key
  write-once: a second writer of the same key fails instead of replacing it);
- :func:`read_versioned` / :func:`write_versioned`: a file replaced only by whoever read its
  current version (a bucket: ``If-Match`` on the ETag, ``If-None-Match: *`` to create; local: a
  lock around compare-and-rename). The run manifest is committed this way, so two processes
  that write the same run folder cannot overwrite each other's commits unseen;
- listing, removing, copying whole folders between a bucket and a local folder (artifacts that
  libraries write to local files: checkpoints, caches), and :func:`scratch_dir`, the local
  working folder of a bucket URL on this machine.

Credentials and endpoints come from the usual places of each client (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL_S3``, ``~/.aws``, instance roles; ``GOOGLE_APPLICATION_CREDENTIALS``). Every
failure of the storage itself (no credentials, refused, no such bucket, unreachable endpoint)
is one :class:`~trajsynth.core.errors.StorageError` naming the URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from .errors import ConcurrentCommitError, StorageError

if TYPE_CHECKING:
    from upath import UPath

__all__ = [
    "REMOTE_SCHEMES",
    "AnyPath",
    "as_path",
    "download_dir",
    "is_remote",
    "is_url",
    "list_names",
    "list_tree",
    "load_array",
    "local_copy",
    "put_bytes",
    "put_file",
    "read_bytes",
    "read_versioned",
    "remove",
    "remove_tree",
    "save_array",
    "scratch_dir",
    "size_of",
    "storage_errors",
    "upload_dir",
    "write_versioned",
]

#: URL schemes that name object storage (``file://`` is a local path)
REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*):/+")
AnyPath = Any  # a pathlib.Path or an upath.UPath (see as_path)


def _scheme(text: str) -> str | None:
    m = _URL.match(text)
    return m.group(1) if m else None


def is_url(path: Any) -> bool:
    """Whether ``path`` is (or is written as) an object-storage URL."""
    if _is_upath(path):
        return True
    return _scheme(str(path)) in REMOTE_SCHEMES


is_remote = is_url


def _is_upath(path: Any) -> bool:
    return type(path).__module__.startswith("upath")


def _options(scheme: str) -> dict[str, Any]:
    """fsspec options: never trust a cached listing (other processes and machines write the
    same folders), and give up on an unreachable endpoint in seconds, not minutes."""
    if scheme in ("s3", "s3a"):
        return {
            "use_listings_cache": False,
            "config_kwargs": {
                "connect_timeout": 5,
                "read_timeout": 60,
                "retries": {"max_attempts": 3, "mode": "standard"},
            },
        }
    if scheme in ("gs", "gcs"):
        return {"cache_timeout": 0}
    return {}


def as_path(path: Any) -> AnyPath:
    """A :class:`pathlib.Path` for a local path or ``file://`` URL, a :class:`upath.UPath`
    for an object-storage URL. A URL that went through ``pathlib.Path`` on its way here
    (``s3:/bucket/key``, one slash lost) is read as the URL it was."""
    if isinstance(path, Path) or _is_upath(path):
        text = str(path)
        if isinstance(path, Path) and _scheme(text) not in (*REMOTE_SCHEMES, "file"):
            return path
        if _is_upath(path):
            return path
    else:
        text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    scheme = _scheme(text)
    if scheme == "file":
        return Path(unquote(urlparse(re.sub(r"^file:/+", "file:///", text)).path))
    if scheme in REMOTE_SCHEMES:
        text = re.sub(r"^([a-z0-9]+):/+", r"\1://", text)
        try:
            from upath import UPath
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise StorageError(
                f"{text}: object storage needs the `storage` extra",
                hint="pip install 'trajsynth[storage]'",
            ) from exc
        try:
            return UPath(text, **_options(scheme))
        except (ImportError, ValueError) as exc:
            raise StorageError(
                f"{text}: no filesystem for {scheme}:// ({exc})",
                hint="pip install 'trajsynth[storage]' (s3fs; gcsfs for gs://)",
            ) from exc
    return Path(text)


def _fs(path: UPath) -> tuple[Any, str]:
    return path.fs, path.path


def _cause_code(exc: BaseException) -> str | None:
    cause = exc.__cause__ or exc.__context__
    response = getattr(cause, "response", None) or getattr(exc, "response", None)
    if isinstance(response, dict):
        return (response.get("Error") or {}).get("Code")
    return None


@contextlib.contextmanager
def storage_errors(where: Any, action: str = "access") -> Iterator[None]:
    """Turn an object-storage client's failure into one :class:`StorageError` naming
    ``where`` (a missing key stays ``FileNotFoundError`` for callers that expect it)."""
    try:
        yield
    except (StorageError, ConcurrentCommitError):
        raise
    except FileNotFoundError as exc:
        text = str(exc)
        if _cause_code(exc) == "NoSuchBucket" or "bucket does not exist" in text.lower():
            raise StorageError(
                f"{where}: no such bucket ({text})",
                hint="check the bucket name, and the endpoint (AWS_ENDPOINT_URL_S3) if not AWS",
            ) from None
        raise
    except PermissionError as exc:
        raise StorageError(
            f"{where}: storage refused to {action} ({exc})",
            hint="check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, "
            "a role) and that they may read and write this bucket",
        ) from None
    except FileExistsError:
        raise
    except Exception as exc:
        name = type(exc).__name__
        text = str(exc)
        if name in ("NoCredentialsError", "PartialCredentialsError") or (
            "credentials" in text.lower() and "unable to locate" in text.lower()
        ):
            raise StorageError(
                f"{where}: no credentials for object storage ({text})",
                hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or role)",
            ) from None
        if isinstance(exc, OSError | ConnectionError) or name in (
            "EndpointConnectionError",
            "ConnectTimeoutError",
            "ClientConnectorError",
        ):
            raise StorageError(
                f"{where}: object storage unreachable or failing ({name}: {text})",
                hint="check the endpoint (AWS_ENDPOINT_URL_S3) and the network",
            ) from None
        raise


# -- files ---------------------------------------------------------------------------------


def read_bytes(path: Any) -> bytes:
    """The whole file (one GET on a bucket); ``FileNotFoundError`` when it does not exist."""
    p = as_path(path)
    if not is_url(p):
        return Path(p).read_bytes()
    fs, key = _fs(p)
    with storage_errors(p, "read"):
        data: bytes = fs.cat_file(key)
        return data


def size_of(path: Any) -> int:
    """The file's size in bytes (``FileNotFoundError`` when it does not exist)."""
    p = as_path(path)
    if not is_url(p):
        return os.stat(p).st_size
    fs, key = _fs(p)
    with storage_errors(p, "read"):
        return int(fs.info(key)["size"])


def etag_of(path: Any) -> str | None:
    """An object's version tag (ETag, generation), None for a local file."""
    p = as_path(path)
    if not is_url(p):
        return None
    fs, key = _fs(p)
    with storage_errors(p, "read"):
        info = fs.info(key)
    tag = info.get("ETag") or info.get("etag") or info.get("generation")
    return str(tag) if tag is not None else None


def fsync_dir(path: Path) -> None:
    """fsync a local directory so that a rename inside it survives a power cut."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _local_atomic_write(path: Path, data: bytes, *, tmp_prefix: str = ".tmp-") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{tmp_prefix}{os.getpid()}-{threading.get_ident()}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def put_bytes(path: Any, data: bytes, *, create_only: bool = False) -> None:
    """Write ``data`` as the whole file, atomically (see the module docstring).
    ``create_only``: on a bucket the key is write-once (``If-None-Match: *``): an existing
    key is a :class:`ConcurrentCommitError`, never replaced."""
    p = as_path(path)
    if not is_url(p):
        _local_atomic_write(Path(p), data)
        return
    fs, key = _fs(p)
    with storage_errors(p, "write"):
        if create_only and _is_s3(fs):
            bucket, _, name = key.partition("/")
            try:
                fs.call_s3("put_object", Bucket=bucket, Key=name, Body=data, IfNoneMatch="*")
            except (FileExistsError, OSError) as exc:
                if isinstance(exc, FileExistsError) or _cause_code(exc) == "PreconditionFailed":
                    raise ConcurrentCommitError(
                        f"{p}: already exists; another writer made it (the key is write-once)",
                        hint="two runs write the same folder, or a worker of a killed run "
                        "outlived it; rerun: the run resumes from what its manifest committed",
                    ) from None
                raise
            return
        fs.pipe_file(key, data)


def put_file(local: Path, dest: Any) -> None:
    """Copy a local file to ``dest`` (a path or URL), atomically."""
    put_bytes(dest, Path(local).read_bytes())


def remove(path: Any, *, missing_ok: bool = True) -> None:
    """Delete one file."""
    p = as_path(path)
    if not is_url(p):
        Path(p).unlink(missing_ok=missing_ok)
        return
    fs, key = _fs(p)
    with storage_errors(p, "delete"):
        try:
            fs.rm_file(key)
        except FileNotFoundError:
            if not missing_ok:
                raise


def list_names(folder: Any, pattern: str = "*") -> list[str]:
    """Names of the files directly in ``folder`` matching the glob ``pattern``, sorted
    ([] for a folder that does not exist)."""
    import fnmatch

    p = as_path(folder)
    if not is_url(p):
        d = Path(p)
        if not d.is_dir():
            return []
        return sorted(
            e.name for e in os.scandir(d) if e.is_file() and fnmatch.fnmatch(e.name, pattern)
        )
    fs, key = _fs(p)
    with storage_errors(p, "list"):
        try:
            entries = fs.ls(key, detail=True)
        except FileNotFoundError:
            return []
    names = [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"]
    return sorted(n for n in names if fnmatch.fnmatch(n, pattern))


def list_tree(folder: Any) -> list[str]:
    """Every file under ``folder``, as paths relative to it, sorted."""
    p = as_path(folder)
    if not is_url(p):
        d = Path(p)
        if not d.is_dir():
            return []
        return sorted(str(q.relative_to(d)) for q in d.rglob("*") if q.is_file())
    fs, key = _fs(p)
    with storage_errors(p, "list"):
        try:
            found = fs.find(key)
        except FileNotFoundError:
            return []
    base = key.rstrip("/") + "/"
    return sorted(f[len(base) :] for f in found if f.startswith(base))


def remove_tree(folder: Any) -> None:
    """Delete ``folder`` and everything under it (nothing when it does not exist)."""
    import shutil

    p = as_path(folder)
    if not is_url(p):
        shutil.rmtree(Path(p), ignore_errors=True)
        return
    fs, key = _fs(p)
    with storage_errors(p, "delete"):
        files = list_tree(p)
        if files:
            fs.rm([f"{key.rstrip('/')}/{f}" for f in files])


def upload_dir(local: Path, dest: Any) -> None:
    """Copy every file under the local folder ``local`` to ``dest`` (a path or URL)."""
    d = as_path(dest)
    for rel in list_tree(local):
        put_bytes(d / rel, (Path(local) / rel).read_bytes())


def download_dir(src: Any, local: Path) -> int:
    """Copy every file under ``src`` into the local folder ``local`` (files already there
    with the same size are kept); returns how many were copied."""
    s = as_path(src)
    copied = 0
    for rel in list_tree(s):
        target = Path(local) / rel
        remote = s / rel
        if target.is_file() and target.stat().st_size == size_of(remote):
            continue
        _local_atomic_write(target, read_bytes(remote))
        copied += 1
    return copied


def local_copy(src: Any) -> Path:
    """A local folder holding what is under ``src`` now (a local ``src`` is itself): copied
    once per content, into a folder named after the objects' names and version tags, so a
    rewritten artifact is copied again and an unchanged one is not."""
    s = as_path(src)
    if not is_url(s):
        return Path(s)
    files = list_tree(s)
    version = hashlib.blake2b(
        repr([(rel, etag_of(s / rel)) for rel in files]).encode(), digest_size=8
    ).hexdigest()
    local = scratch_dir(s) / f"copy-{version}"
    done = local / ".complete"
    if not done.exists():
        download_dir(s, local)
        done.touch()
    return local


def scratch_dir(url: Any) -> Path:
    """This machine's local working folder for the bucket URL ``url`` (artifacts that
    libraries write as local files, logs, spills): ``$TRAJSYNTH_SCRATCH``, else the temporary
    folder, then a hash of the URL, so a rerun on this machine finds it again."""
    base = os.environ.get("TRAJSYNTH_SCRATCH") or os.path.join(
        tempfile.gettempdir(), f"trajsynth-scratch-{os.getuid() if hasattr(os, 'getuid') else 0}"
    )
    digest = hashlib.blake2b(str(as_path(url)).encode(), digest_size=8).hexdigest()
    path = Path(base) / digest
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- versioned commits ---------------------------------------------------------------------

_LOCAL_LOCK = threading.Lock()


def read_versioned(path: Any) -> tuple[bytes, str] | None:
    """``(content, version)`` of the file, None when it does not exist. The version is what
    :func:`write_versioned` must be handed to replace it."""
    p = as_path(path)
    if not is_url(p):
        try:
            with open(p, "rb") as f:
                return f.read(), _stat_version(os.fstat(f.fileno()))
        except FileNotFoundError:
            return None
    fs, key = _fs(p)
    bucket, _, name = key.partition("/")
    with storage_errors(p, "read"):
        if _is_s3(fs):
            try:
                out = fs.call_s3("get_object", Bucket=bucket, Key=name)
            except FileNotFoundError:
                return None
            body = out["Body"]
            data = fsspec_sync(fs, body.read())
            with contextlib.suppress(Exception):
                body.close()
            return data, str(out["ETag"])
        try:
            info = fs.info(key)
        except FileNotFoundError:
            return None
        data = fs.cat_file(key)
        return data, str(info.get("generation") or info.get("ETag") or info.get("etag") or "")


def _stat_version(st: os.stat_result) -> str:
    """A local file's version: a rename gives it a new inode, a write a new size or time."""
    return f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"


def fsspec_sync(fs: Any, coro: Any) -> Any:
    """Run a coroutine of an async fsspec filesystem on its loop."""
    from fsspec.asyn import sync

    return sync(fs.loop, lambda: coro)


def _is_s3(fs: Any) -> bool:
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return proto in ("s3", "s3a")


def write_versioned(path: Any, data: bytes, version: str | None) -> str:
    """Replace the file with ``data`` if it is still at ``version`` (None: if it does not
    exist yet); returns the new version. Someone else's commit in between is a
    :class:`ConcurrentCommitError` and nothing is written."""
    p = as_path(path)
    conflict = ConcurrentCommitError(
        f"{p}: changed since this process read it; another process committed to the same run "
        "folder",
        hint="run one `trajsynth run` per run folder at a time; rerun to resume from what is "
        "committed",
    )
    if not is_url(p):
        target = Path(p)
        with _LOCAL_LOCK:
            try:
                current: str | None = _stat_version(os.stat(target))
            except FileNotFoundError:
                current = None
            if current != version:
                raise conflict
            _local_atomic_write(target, data, tmp_prefix=f".{target.name}.tmp-")
            return _stat_version(os.stat(target))
    fs, key = _fs(p)
    bucket, _, name = key.partition("/")
    with storage_errors(p, "write"):
        if _is_s3(fs):
            cond = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
            try:
                out = fs.call_s3("put_object", Bucket=bucket, Key=name, Body=data, **cond)
            except (FileExistsError, FileNotFoundError) as exc:
                raise conflict from exc
            except OSError as exc:
                if _cause_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise conflict from None
                raise
            return str(out["ETag"])
        # another object store: one whole-object write (atomic for readers), no fence
        fs.pipe_file(key, data)
        info = fs.info(key)
        return str(info.get("generation") or info.get("ETag") or info.get("etag") or "")


# -- arrays (spill files of streaming stages, which every worker must see) -----------------


def save_array(folder: Any, name: str, array: Any) -> None:
    """``numpy.save`` into ``folder`` (a local folder or a bucket URL)."""
    import numpy as np

    p = as_path(folder)
    if not is_url(p):
        np.save(Path(p) / name, array)
        return
    buf = io.BytesIO()
    np.save(buf, array)
    put_bytes(p / name, buf.getvalue())


def load_array(folder: Any, name: str, *, mmap: bool = False) -> Any:
    """``numpy.load`` from ``folder`` (memory-mapped when local and ``mmap``)."""
    import numpy as np

    p = as_path(folder)
    if not is_url(p):
        return np.load(Path(p) / name, mmap_mode="r" if mmap else None)
    return np.load(io.BytesIO(read_bytes(p / name)))
