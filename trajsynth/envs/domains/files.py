"""Files: a virtual file system with a working directory.

State tables: ``files`` (absolute path → ``{path, kind: file|dir, content}``) and ``session``
(the working directory). Paths may be absolute or relative to the working directory; ``..``
and ``.`` are resolved. A fixed core tree (``/home/user/docs``, ``/home/user/data``, ...) is
the same for every seed; the seed adds project folders with generated files.

Failure modes: a missing file or folder (``not_found``); reading a folder or writing into a
file's path (``invalid_value``); creating something that exists without ``overwrite``,
deleting a non-empty folder without ``recursive``, or moving a folder into itself
(``conflict``); files over 64 KiB (``limit_exceeded``).

Data flow: find_files → path → read_file / file_info / move_path / copy_file / delete_path;
list_directory → entries[].path → any path parameter; change_directory → cwd.
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Annotated, Literal, TypedDict

from ..domain import Domain
from ..state import State
from ..tasks import call, ref, task, turn
from ..tools import ToolError, tool
from ._common import rng_for

MAX_FILE_BYTES = 64 * 1024

CORE_FILES = {
    "/home/user/docs/report_draft.txt": (
        "Quarterly report (draft)\nRevenue grew 12% in Q2.\nTODO: add the churn numbers.\n"
        "TODO: ask Dana for the EMEA figures.\n"
    ),
    "/home/user/docs/notes.md": "# Notes\n- call the bank\n- renew passport\n",
    "/home/user/docs/old/2023_summary.txt": "2023 was a year of steady growth.\n",
    "/home/user/data/sales_2024.csv": (
        "month,region,units,revenue\n2024-01,EMEA,120,14400\n2024-01,AMER,200,24000\n"
        "2024-02,EMEA,130,15600\n2024-02,AMER,180,21600\n"
    ),
    "/home/user/data/customers.json": '[{"id": 1, "name": "Acme"}, {"id": 2, "name": "Globex"}]\n',
    "/home/user/photos/beach.jpg": "<binary 2048 bytes>",
    "/home/user/.bashrc": "export EDITOR=vim\n",
    "/tmp/scratch.txt": "temporary\n",
}
_WORDS = ["alpha", "budget", "client", "draft", "estimate", "forecast", "growth", "invoice"]


def build_state(seed: int) -> dict[str, dict]:
    rng = rng_for("files", seed)
    files: dict[str, str] = dict(CORE_FILES)
    for p in range(3):
        project = f"/home/user/projects/{rng.choice(_WORDS)}_{p}"
        for i in range(rng.randint(2, 6)):
            ext = rng.choice(["txt", "md", "py", "csv"])
            lines = [" ".join(rng.choices(_WORDS, k=rng.randint(3, 9))) for _ in range(5)]
            files[f"{project}/file_{i}.{ext}"] = "\n".join(lines) + "\n"
    table: dict[str, dict] = {}
    for path, content in files.items():
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            d = "/" + "/".join(parts[:depth])
            table[d] = {"path": d, "kind": "dir", "content": None}
        table[path] = {"path": path, "kind": "file", "content": content}
    table["/"] = {"path": "/", "kind": "dir", "content": None}
    return {"files": table, "session": {"cwd": {"path": "/home/user"}}}


# --------------------------------------------------------------------------------------
# response types
# --------------------------------------------------------------------------------------


class Entry(TypedDict):
    name: Annotated[str, "Base name of the entry."]
    path: Annotated[str, "Absolute path; pass it to read_file, file_info, move_path, ..."]
    kind: Annotated[Literal["file", "dir"], "File or folder."]
    size_bytes: Annotated[int, "Size in bytes (0 for folders)."]


class Listing(TypedDict):
    path: Annotated[str, "Absolute path of the listed folder."]
    entries: Annotated[list[Entry], "Entries, sorted by path (or by size)."]


class FileContent(TypedDict):
    path: Annotated[str, "Absolute path of the file."]
    content: Annotated[str, "The text (possibly cut to max_lines)."]
    lines: Annotated[int, "Number of lines in the whole file."]
    size_bytes: Annotated[int, "Size of the whole file in bytes."]


class WriteResult(TypedDict):
    path: Annotated[str, "Absolute path written."]
    size_bytes: Annotated[int, "Size after the write."]
    created: Annotated[bool, "True when the file did not exist before."]


class DeleteResult(TypedDict):
    path: Annotated[str, "Absolute path deleted."]
    deleted: Annotated[int, "Number of files and folders removed."]


class MoveResult(TypedDict):
    source: Annotated[str, "Absolute path moved or copied from."]
    destination: Annotated[str, "Absolute path of the result."]


class DirResult(TypedDict):
    path: Annotated[str, "Absolute path of the folder."]
    created: Annotated[bool, "False when it already existed (with parents=true)."]


class Match(TypedDict):
    path: Annotated[str, "Absolute path of a matching file."]
    size_bytes: Annotated[int, "Size in bytes."]


class FindResult(TypedDict):
    matches: Annotated[list[Match], "Matching files, sorted by path."]
    count: Annotated[int, "Number of matches."]


class FileInfo(TypedDict):
    path: Annotated[str, "Absolute path."]
    kind: Annotated[Literal["file", "dir"], "File or folder."]
    size_bytes: Annotated[int, "Size in bytes."]
    lines: Annotated[int, "Lines (files)."]
    words: Annotated[int, "Words (files)."]
    extension: Annotated[str, "Extension without the dot, '' if none."]


class LineMatch(TypedDict):
    line_number: Annotated[int, "1-based line number."]
    line: Annotated[str, "The matching line."]


class GrepResult(TypedDict):
    path: Annotated[str, "Absolute path searched."]
    matches: Annotated[list[LineMatch], "Matching lines."]
    count: Annotated[int, "Number of matching lines."]


class Cwd(TypedDict):
    cwd: Annotated[str, "The working directory (absolute path)."]


# --------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------


def _abs(db: State, path: str) -> str:
    cwd = db.get("session", "cwd")["path"]
    full = posixpath.normpath(posixpath.join(cwd, path.strip() or "."))
    return "/" + full.lstrip("/") if full != "/" else "/"


def _node(db: State, path: str) -> dict:
    node = db.get("files", path)
    if node is None:
        raise ToolError("not_found", f"no such file or folder: {path}")
    return node


def _file(db: State, path: str) -> dict:
    node = _node(db, path)
    if node["kind"] != "file":
        raise ToolError("invalid_value", f"{path} is a folder, not a file")
    return node


def _parent_dir(db: State, path: str) -> None:
    parent = posixpath.dirname(path)
    node = db.get("files", parent)
    if node is None:
        raise ToolError("not_found", f"folder {parent} does not exist")
    if node["kind"] != "dir":
        raise ToolError("invalid_value", f"{parent} is a file, not a folder")


def _children(db: State, path: str, recursive: bool) -> list[dict]:
    prefix = path.rstrip("/") + "/"
    out = []
    for p, node in db.rows("files"):
        if p != path and p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]):
            out.append(node)
    return sorted(out, key=lambda n: n["path"])


def _size(node: dict) -> int:
    return len(node["content"].encode()) if node["kind"] == "file" else 0


def _put_file(db: State, path: str, content: str) -> int:
    size = len(content.encode())
    if size > MAX_FILE_BYTES:
        raise ToolError("limit_exceeded", f"{path} would be {size} bytes (limit {MAX_FILE_BYTES})")
    db.put("files", path, {"path": path, "kind": "file", "content": content})
    return size


@tool()
def list_directory(
    db: State,
    path: Annotated[str, "Folder to list (absolute or relative to the working directory)."] = ".",
    show_hidden: Annotated[bool, "Include names starting with a dot."] = False,
    recursive: Annotated[bool, "List every level below, not only direct children."] = False,
    sort_by: Annotated[Literal["name", "size"], "Order: by path, or largest first."] = "name",
) -> Listing:
    """List a folder's files and subfolders."""
    full = _abs(db, path)
    if _node(db, full)["kind"] != "dir":
        raise ToolError("invalid_value", f"{full} is a file, not a folder")
    entries: list[Entry] = [
        {
            "name": posixpath.basename(n["path"]),
            "path": n["path"],
            "kind": n["kind"],
            "size_bytes": _size(n),
        }
        for n in _children(db, full, recursive)
        if show_hidden or not any(part.startswith(".") for part in n["path"].split("/"))
    ]
    if sort_by == "size":
        entries.sort(key=lambda e: (-e["size_bytes"], e["path"]))
    return {"path": full, "entries": entries}


@tool()
def read_file(
    db: State,
    path: Annotated[str, "File to read."],
    max_lines: Annotated[int | None, "Return at most this many lines.", {"minimum": 1}] = None,
) -> FileContent:
    """Read a text file."""
    full = _abs(db, path)
    node = _file(db, full)
    lines = node["content"].splitlines(keepends=True)
    text = "".join(lines[:max_lines]) if max_lines else node["content"]
    return {"path": full, "content": text, "lines": len(lines), "size_bytes": _size(node)}


@tool(writes=True)
def write_file(
    db: State,
    path: Annotated[str, "File to write."],
    content: Annotated[str, "The full new text."],
    overwrite: Annotated[bool, "Replace the file if it exists."] = False,
) -> WriteResult:
    """Create a file, or replace one with overwrite=true."""
    full = _abs(db, path)
    node = db.get("files", full)
    if node is not None and node["kind"] == "dir":
        raise ToolError("invalid_value", f"{full} is a folder")
    if node is not None and not overwrite:
        raise ToolError("conflict", f"{full} exists; pass overwrite=true to replace it")
    _parent_dir(db, full)
    size = _put_file(db, full, content)
    return {"path": full, "size_bytes": size, "created": node is None}


@tool(writes=True)
def append_to_file(
    db: State,
    path: Annotated[str, "File to append to (created if missing)."],
    content: Annotated[str, "Text to add at the end."],
) -> WriteResult:
    """Append text to a file."""
    full = _abs(db, path)
    node = db.get("files", full)
    if node is not None and node["kind"] == "dir":
        raise ToolError("invalid_value", f"{full} is a folder")
    if node is None:
        _parent_dir(db, full)
    size = _put_file(db, full, (node["content"] if node else "") + content)
    return {"path": full, "size_bytes": size, "created": node is None}


@tool(writes=True)
def delete_path(
    db: State,
    path: Annotated[str, "File or folder to delete."],
    recursive: Annotated[bool, "Delete a non-empty folder with everything in it."] = False,
) -> DeleteResult:
    """Delete a file, or a folder (recursive=true if it is not empty)."""
    full = _abs(db, path)
    node = _node(db, full)
    if full in ("/", "/home", "/home/user"):
        raise ToolError("permission_denied", f"{full} may not be deleted")
    below = _children(db, full, True) if node["kind"] == "dir" else []
    if below and not recursive:
        raise ToolError("conflict", f"{full} is not empty; pass recursive=true")
    for n in below:
        db.delete("files", n["path"])
    db.delete("files", full)
    return {"path": full, "deleted": len(below) + 1}


def _relocate(db: State, source: str, destination: str, overwrite: bool, keep: bool) -> MoveResult:
    src = _abs(db, source)
    dst = _abs(db, destination)
    node = _node(db, src)
    target = db.get("files", dst)
    if target is not None and target["kind"] == "dir":
        dst = posixpath.join(dst, posixpath.basename(src))
        target = db.get("files", dst)
    if dst == src or dst.startswith(src.rstrip("/") + "/"):
        raise ToolError("conflict", f"cannot move or copy {src} into itself")
    if target is not None and not overwrite:
        raise ToolError("conflict", f"{dst} exists; pass overwrite=true to replace it")
    if target is not None and target["kind"] == "dir":
        raise ToolError("conflict", f"{dst} is a folder")
    _parent_dir(db, dst)
    moved = [node, *(_children(db, src, True) if node["kind"] == "dir" else [])]
    for n in moved:
        new_path = dst + n["path"][len(src) :]
        db.put("files", new_path, {**n, "path": new_path})
        if not keep:
            db.delete("files", n["path"])
    return {"source": src, "destination": dst}


@tool(writes=True)
def move_path(
    db: State,
    source: Annotated[str, "File or folder to move."],
    destination: Annotated[str, "New path, or an existing folder to move into."],
    overwrite: Annotated[bool, "Replace an existing file at the destination."] = False,
) -> MoveResult:
    """Move or rename a file or folder."""
    return _relocate(db, source, destination, overwrite, keep=False)


@tool(writes=True)
def copy_file(
    db: State,
    source: Annotated[str, "File to copy."],
    destination: Annotated[str, "New path, or an existing folder to copy into."],
    overwrite: Annotated[bool, "Replace an existing file at the destination."] = False,
) -> MoveResult:
    """Copy a file."""
    _file(db, _abs(db, source))
    return _relocate(db, source, destination, overwrite, keep=True)


@tool(writes=True)
def make_directory(
    db: State,
    path: Annotated[str, "Folder to create."],
    parents: Annotated[bool, "Create missing parent folders too (no error if it exists)."] = False,
) -> DirResult:
    """Create a folder."""
    full = _abs(db, path)
    node = db.get("files", full)
    if node is not None:
        if parents and node["kind"] == "dir":
            return {"path": full, "created": False}
        raise ToolError("conflict", f"{full} already exists")
    if parents:
        parts = full.strip("/").split("/")
        for depth in range(1, len(parts)):
            d = "/" + "/".join(parts[:depth])
            existing = db.get("files", d)
            if existing is None:
                db.put("files", d, {"path": d, "kind": "dir", "content": None})
            elif existing["kind"] != "dir":
                raise ToolError("invalid_value", f"{d} is a file")
    else:
        _parent_dir(db, full)
    db.put("files", full, {"path": full, "kind": "dir", "content": None})
    return {"path": full, "created": True}


@tool()
def find_files(
    db: State,
    name_pattern: Annotated[str, "Glob on the base name, e.g. '*.csv' or 'report*'."],
    root: Annotated[str, "Folder to search below."] = "/",
    contains: Annotated[str | None, "Only files whose text contains this string."] = None,
) -> FindResult:
    """Find files by name (and optionally content) below a folder."""
    base = _abs(db, root)
    _node(db, base)
    prefix = "/" if base == "/" else base.rstrip("/") + "/"
    found: list[Match] = [
        {"path": p, "size_bytes": _size(n)}
        for p, n in sorted(db.rows("files"))
        if n["kind"] == "file"
        and p.startswith(prefix)
        and fnmatch.fnmatch(posixpath.basename(p), name_pattern)
        and (contains is None or contains in n["content"])
    ]
    return {"matches": found, "count": len(found)}


@tool()
def file_info(db: State, path: Annotated[str, "File or folder."]) -> FileInfo:
    """Size, line and word counts of a file (or a folder's size 0)."""
    full = _abs(db, path)
    node = _node(db, full)
    text = node["content"] or ""
    ext = posixpath.splitext(full)[1].lstrip(".") if node["kind"] == "file" else ""
    return {
        "path": full,
        "kind": node["kind"],
        "size_bytes": _size(node),
        "lines": len(text.splitlines()),
        "words": len(text.split()),
        "extension": ext,
    }


@tool()
def search_in_file(
    db: State,
    path: Annotated[str, "File to search."],
    query: Annotated[str, "Text to look for."],
    case_sensitive: Annotated[bool, "Match case exactly."] = False,
) -> GrepResult:
    """Find the lines of a file that contain a string."""
    full = _abs(db, path)
    node = _file(db, full)
    want = query if case_sensitive else query.lower()
    hits: list[LineMatch] = [
        {"line_number": i, "line": line}
        for i, line in enumerate(node["content"].splitlines(), 1)
        if want in (line if case_sensitive else line.lower())
    ]
    return {"path": full, "matches": hits, "count": len(hits)}


@tool(writes=True)
def change_directory(db: State, path: Annotated[str, "Folder to make current."]) -> Cwd:
    """Change the working directory."""
    full = _abs(db, path)
    if _node(db, full)["kind"] != "dir":
        raise ToolError("invalid_value", f"{full} is a file, not a folder")
    db.put("session", "cwd", {"path": full})
    return {"cwd": full}


TOOLS = [
    list_directory,
    read_file,
    write_file,
    append_to_file,
    delete_path,
    move_path,
    copy_file,
    make_directory,
    find_files,
    file_info,
    search_in_file,
    change_directory,
]


# fmt: off
def authored_tasks() -> list:
    return [
        task(
            "files-read-notes",
            ["single_call"],
            turn(
                "Show me what's in /home/user/docs/notes.md.",
                call("read_file", path="/home/user/docs/notes.md"),
            ),
            required_outputs=["renew passport"],
        ),
        task(
            "files-archive-report",
            ["dependent_calls", "optional_params", "multi_call"],
            turn(
                "Find my report draft and move it into a new folder /home/user/archive/2025 "
                "(create the folders as needed).",
                call("find_files", name_pattern="report*", root="/home/user"),
                call("make_directory", path="/home/user/archive/2025", parents=True),
                call("move_path", source=ref("c0.matches[0].path"), destination=ref("c1.path")),
            ),
            required_outputs=["/home/user/archive/2025/report_draft.txt"],
        ),
        task(
            "files-parallel-info",
            ["parallel_calls"],
            turn(
                "How big are sales_2024.csv and customers.json in /home/user/data?",
                [
                    call("file_info", path="/home/user/data/sales_2024.csv"),
                    call("file_info", path="/home/user/data/customers.json"),
                ],
            ),
            required_outputs=[ref("c0.size_bytes"), ref("c1.size_bytes")],
        ),
        task(
            "files-overwrite-recovery",
            ["error_recovery"],
            turn(
                "Write 'call the bank - done' as the content of /home/user/docs/notes.md.",
                call(
                    "write_file",
                    path="/home/user/docs/notes.md",
                    content="call the bank - done\n",
                    expect_error="conflict",
                ),
                call(
                    "write_file",
                    path="/home/user/docs/notes.md",
                    content="call the bank - done\n",
                    overwrite=True,
                ),
            ),
        ),
        task(
            "files-todo-digest",
            ["long_horizon", "dependent_calls"],
            turn(
                "Collect every TODO line from my docs into /home/user/todo.txt, then clean up: "
                "delete the old/ folder under docs and remove /tmp/scratch.txt.",
                call("find_files", name_pattern="*", root="/home/user/docs", contains="TODO"),
                call(
                    "search_in_file",
                    path=ref("c0.matches[0].path"),
                    query="TODO",
                    case_sensitive=True,
                ),
                call(
                    "write_file",
                    path="/home/user/todo.txt",
                    content="{{c1.matches[0].line}}\n{{c1.matches[1].line}}\n",
                ),
                call("delete_path", path="/home/user/docs/old", recursive=True),
                call("delete_path", path="/tmp/scratch.txt"),
                call("list_directory", path="/home/user/docs"),
            ),
            required_outputs=["todo.txt"],
        ),
        task(
            "files-clarify-rename",
            ["needs_clarification"],
            turn(
                "Rename my notes file.",
                call(
                    "move_path",
                    source="/home/user/docs/notes.md",
                    destination="/home/user/docs/todo_notes.md",
                ),
                kind="clarify",
                answer="What should the new name be?",
                clarification="Call it todo_notes.md, same folder.",
            ),
        ),
        task(
            "files-no-tool",
            ["no_tool_needed"],
            turn(
                "What does the .csv extension mean?",
                kind="no_tool",
                answer="Comma-separated values: a plain-text table, one record per line.",
            ),
            required_outputs=["comma-separated values"],
        ),
    ]
# fmt: on


DOMAIN = Domain(
    name="files",
    description="A virtual file system: read, write, move, copy, search and delete files.",
    tools=TOOLS,
    build_state=build_state,
    authored_tasks=authored_tasks,
    policy="You manage the user's files. Never delete or overwrite without being asked to.",
)
