"""A stdio MCP server's on-disk state: where it is, the private copies each episode runs on,
and the snapshots that bring a warm server to any episode's state.

1) where (:func:`find_state`): the config's ``state`` paths, else the paths the server is
   given: arguments that name an existing file or folder (``--repository /r``,
   ``--db-path=x.db``, a folder to serve), and ``env`` values that are absolute paths whose
   folder exists (``MEMORY_FILE_PATH=/data/memory.jsonl``). Programs and the system's
   folders are never state;
2) what is copied (:func:`units`): a folder is copied whole; a file (or a path that does not
   exist yet) is copied with its folder when that folder is small (a database writes its
   journal beside it, a store creates its file), else alone, shown in a copy-on-write layer
   of its folder;
3) :class:`StateCopies`: the first copy of each unit is the initial state (``cp -a
   --reflink=auto``: copy-on-write where the filesystem allows); the server works on a live
   copy; ``save(key)`` keeps the live copy as a snapshot, ``restore(key)`` makes the live
   copy equal to a snapshot in place (only the files that differ are rewritten, folders are
   never replaced, so the server's mounts and open folders stay valid);
4) ``fingerprint()``: a cheap digest of the live copy (paths, sizes, modification times),
   to tell a call that changed the state from one that did not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import ConfigError

__all__ = ["StateCopies", "Unit", "find_state", "units"]

#: folders that are never a server's state (programs, the system)
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/sys", "/dev")
_PROGRAMS = {".py", ".js", ".mjs", ".cjs", ".ts", ".jar", ".sh", ".exe"}
#: a folder copied with the file it holds when it is at most this big
SMALL_FOLDER_FILES = 2_000
SMALL_FOLDER_BYTES = 256 << 20


def _system(path: Path) -> bool:
    text = str(path)
    prefixes = (*_SYSTEM, sys.prefix, sys.base_prefix)
    return any(text == p or text.startswith(p.rstrip("/") + "/") for p in prefixes) or (
        "node_modules" in path.parts or "site-packages" in path.parts
    )


def _program(path: Path) -> bool:
    return path.is_file() and (
        path.suffix in _PROGRAMS or os.access(path, os.X_OK) or path.name == "package.json"
    )


def find_state(
    argv: list[str], env: dict[str, str], cwd: str, declared: list[str] | None
) -> list[Path]:
    """Step 1: the state paths (absolute, resolved), the declared ones first."""
    base = Path(cwd)
    if declared is not None:
        return _dedup(Path(os.path.expanduser(p)) if os.path.isabs(os.path.expanduser(p))
                      else base / p for p in declared)  # fmt: skip
    found: list[Path] = []
    for word in argv[1:]:
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if not value or value.startswith("-") or "\n" in value:
            continue
        path = Path(os.path.expanduser(value))
        path = path if path.is_absolute() else base / path
        if path.exists() and not _system(path.resolve()) and not _program(path):
            found.append(path)
    for value in env.values():
        path = Path(os.path.expanduser(value))
        if path.is_absolute() and path.parent.is_dir() and not _system(path.resolve()):
            if path.exists() and _program(path):
                continue
            found.append(path)
    return _dedup(found)


def _dedup(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(os.path.abspath(p))
        if path not in out:
            out.append(path)
    return out


@dataclass(frozen=True)
class Unit:
    """One copied file or folder: ``path`` (the user's), ``kind`` (``dir``/``file``), and,
    for a file shown inside a copy-on-write layer of its folder, ``overlay``."""

    path: Path
    kind: str
    overlay: bool = False


def _small(folder: Path) -> bool:
    files, size = 0, 0
    for root, dirs, names in os.walk(folder):
        files += len(names) + len(dirs)
        for n in names:
            try:
                size += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                continue
        if files > SMALL_FOLDER_FILES or size > SMALL_FOLDER_BYTES:
            return False
    return True


def units(paths: list[Path]) -> list[Unit]:
    """Step 2: what to copy for ``paths`` (nested units folded into the outer one)."""
    out: list[Unit] = []
    for p in paths:
        if p.is_dir():
            out.append(Unit(p, "dir"))
        elif _small(p.parent):
            out.append(Unit(p.parent, "dir"))
        elif p.is_file():
            out.append(Unit(p, "file", overlay=True))
        else:
            raise ConfigError(
                f"the MCP server's state {p} does not exist yet and its folder {p.parent} "
                "is too large to copy for every episode",
                hint="point the server at a file in a folder of its own, or create the file",
            )
    kept: list[Unit] = []
    for u in sorted(set(out), key=lambda u: len(u.path.parts)):
        if not any(k.kind == "dir" and (u.path == k.path or k.path in u.path.parents)
                   for k in kept):  # fmt: skip
            kept.append(u)
    return kept


def _copy_tree(src: Path, dst: Path) -> None:
    """``dst`` (absent) becomes a copy of ``src`` with modes and times (copy-on-write where
    the filesystem allows)."""
    if shutil.which("cp") and sys.platform.startswith("linux"):
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", str(src), str(dst)], capture_output=True, check=False
        )
        if done.returncode == 0:
            return
        shutil.rmtree(dst, ignore_errors=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _listing(root: Path) -> dict[str, os.stat_result]:
    """Every path under ``root`` (relative) → its lstat, ``root`` itself as ``""``."""
    out = {"": os.lstat(root)}
    if not stat.S_ISDIR(out[""].st_mode):
        return out
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        for name in dirs + files:
            key = name if rel == "." else f"{rel}/{name}"
            try:
                out[key] = os.lstat(os.path.join(base, name))
            except OSError:
                continue
    return out


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
        return False
    if stat.S_ISDIR(a.st_mode):
        return True
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def _sync(src: Path, dst: Path) -> int:
    """Make ``dst`` equal to ``src`` in place; the number of paths rewritten or removed."""
    want, have = _listing(src), _listing(dst)
    changed = 0
    for rel in sorted(set(have) - set(want), key=len, reverse=True):
        path = dst / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        changed += 1
    for rel in sorted(want, key=len):
        s, target = want[rel], dst / rel if rel else dst
        old = have.get(rel)
        if old is not None and rel in have and _same(s, old):
            if stat.S_IMODE(s.st_mode) != stat.S_IMODE(old.st_mode):
                os.chmod(target, stat.S_IMODE(s.st_mode))
            continue
        source = src / rel if rel else src
        if old is not None and stat.S_IFMT(old.st_mode) != stat.S_IFMT(s.st_mode):
            if stat.S_ISDIR(old.st_mode) and rel:
                shutil.rmtree(target)
            elif rel:
                target.unlink()
        if stat.S_ISDIR(s.st_mode):
            target.mkdir(exist_ok=True)
            os.chmod(target, stat.S_IMODE(s.st_mode))
        elif stat.S_ISLNK(s.st_mode):
            target.unlink(missing_ok=True)
            os.symlink(os.readlink(source), target)
        else:  # in place: the same inode, so a file shown at the user's path stays shown
            with open(source, "rb") as fin, open(target, "r+b" if target.exists() else "wb") as f:
                shutil.copyfileobj(fin, f, 1 << 20)
                f.truncate()
            shutil.copystat(source, target)
        changed += 1
    for rel, s in want.items():  # folders' times last (writing into them changed them)
        if stat.S_ISDIR(s.st_mode):
            os.utime(dst / rel if rel else dst, ns=(s.st_atime_ns, s.st_mtime_ns))
    return changed


class StateCopies:
    """Step 3: the initial copy, the live copy, snapshots by key (see the module docstring)."""

    INITIAL = "initial"

    def __init__(self, state_units: list[Unit], scratch: Path, *, keep: int = 64) -> None:
        self.units = state_units
        self.scratch = scratch
        self.keep = keep
        self.live = [scratch / "live" / str(i) for i in range(len(state_units))]
        self._saved: OrderedDict[str, Path] = OrderedDict()
        self._serial = 0
        (scratch / "live").mkdir(parents=True, exist_ok=True)
        (scratch / "snapshots").mkdir(parents=True, exist_ok=True)
        initial = scratch / "snapshots" / "initial"
        initial.mkdir()
        for i, u in enumerate(state_units):
            if not u.path.exists():
                raise ConfigError(f"the MCP server's state {u.path} does not exist")
            _copy_tree(u.path, initial / str(i))
            _copy_tree(initial / str(i), self.live[i])
        self._initial = initial

    def mapping(self) -> list[tuple[Path, Path]]:
        """(the user's path, its live copy) per unit."""
        return [(u.path, live) for u, live in zip(self.units, self.live, strict=True)]

    def has(self, key: str) -> bool:
        return key == self.INITIAL or key in self._saved

    def save(self, key: str) -> None:
        """Keep the live copy as the snapshot ``key`` (the oldest beyond ``keep`` dropped)."""
        if self.has(key):
            if key in self._saved:
                self._saved.move_to_end(key)
            return
        self._serial += 1
        folder = self.scratch / "snapshots" / f"s{self._serial}"
        folder.mkdir()
        for i, live in enumerate(self.live):
            _copy_tree(live, folder / str(i))
        self._saved[key] = folder
        while len(self._saved) > self.keep:
            _, old = self._saved.popitem(last=False)
            shutil.rmtree(old, ignore_errors=True)

    def restore(self, key: str) -> int:
        """Make the live copy equal to the snapshot ``key``; the paths rewritten."""
        folder = self._initial if key == self.INITIAL else self._saved[key]
        if key in self._saved:
            self._saved.move_to_end(key)
        return sum(_sync(folder / str(i), live) for i, live in enumerate(self.live))

    def fingerprint(self) -> str:
        """Step 4."""
        h = hashlib.blake2b(digest_size=16)
        for live in self.live:
            for rel, s in sorted(_listing(live).items()):
                kind = stat.S_IFMT(s.st_mode)
                size = 0 if stat.S_ISDIR(s.st_mode) else s.st_size
                mtime = 0 if stat.S_ISDIR(s.st_mode) else s.st_mtime_ns
                h.update(f"{rel}\0{kind}\0{size}\0{mtime}\n".encode())
        return h.hexdigest()

    def entries(self, limit: int = 200) -> list[tuple[Path, bool]]:
        """Up to ``limit`` (path at the user's place, is a folder) of the state, hidden ones
        left out (values for path parameters)."""
        out: list[tuple[Path, bool]] = []
        for user, live in self.mapping():
            for rel, s in sorted(_listing(live).items()):
                if len(out) >= limit:
                    return out
                if not any(part.startswith(".") for part in rel.split("/") if rel):
                    out.append((user / rel if rel else user, stat.S_ISDIR(s.st_mode)))
        return out

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
