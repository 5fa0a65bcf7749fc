"""Where Unix sockets can live when the temporary folder is deep.

A Unix socket's path is capped at 107 bytes on Linux (103 on macOS). Ray puts its sockets at
``$TMPDIR/ray/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store`` (about 70 bytes after
``$TMPDIR``) and the multiprocessing forkserver at ``$TMPDIR/pymp-<8>/listener-<8>`` (32 bytes
after it). A temporary folder deeper than that (pytest's under a long home, a CI runner's
work folder, a container's mount) made both fail with ``OSError: AF_UNIX path too long``: the
process pool and the Ray executor stopped before the first unit.

1. :func:`fits` says whether ``room`` more bytes after the temporary folder still make a
   socket path the system accepts;
2. :func:`socket_root` gives that folder when they fit, else the first short system folder
   (``/tmp``, ``/var/tmp``, ``/dev/shm``) this user can write into; ``None`` when none is;
3. :func:`ray_temp_dir` is the folder to give a local Ray runtime (``ray.init(_temp_dir=...)``)
   when its default would not fit; ``None`` when the default fits or the user chose one
   (``RAY_TMPDIR``).

Python 3.14's multiprocessing makes the same fallback for its own folder (CPython gh-132124).
"""

from __future__ import annotations

import os
import sys
import tempfile

#: the longest socket path the system accepts (``sizeof(sun_path)`` less the final NUL)
SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107
#: bytes Ray adds after its temporary folder for its longest socket, with room for a long pid
RAY_SOCKET_ROOM = 72
#: bytes the multiprocessing forkserver adds after the temporary folder (``/pymp-xxxxxxxx``
#: then ``/listener-xxxxxxxx``)
FORKSERVER_SOCKET_ROOM = 32
_SHORT_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def fits(folder: str, room: int) -> bool:
    """Whether a socket ``room`` bytes below ``folder`` has a path the system accepts."""
    return len(os.fsencode(folder)) + room <= SOCKET_PATH_MAX


def socket_root(room: int, folder: str | None = None) -> str | None:
    """``folder`` (default: the temporary folder) when ``room`` more bytes fit after it, else
    the first short system folder this user can write into, else ``None``."""
    folder = folder or tempfile.gettempdir()
    if fits(folder, room):
        return folder
    for short in _SHORT_FOLDERS:
        if fits(short, room) and os.path.isdir(short) and os.access(short, os.W_OK | os.X_OK):
            return short
    return None


def ray_temp_dir() -> str | None:
    """The ``_temp_dir`` to start a local Ray runtime with, or ``None`` to leave Ray's default:
    the default fits, or the user named a folder with ``RAY_TMPDIR``. Ray's default is
    ``$TMPDIR/ray`` on Linux (``/tmp/ray`` without ``TMPDIR``)."""
    if os.environ.get("RAY_TMPDIR"):
        return None
    base = os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None
    base = base or ("/tmp" if sys.platform in ("darwin", "linux") else tempfile.gettempdir())
    short = socket_root(len("/ray") + RAY_SOCKET_ROOM, base)
    return None if short in (None, base) else os.path.join(short, "ray")
