"""Six MCP servers nobody here wrote, as a user brings them (``make install`` puts them in
``.mcp-servers/``: the Python ones from PyPI in virtualenvs of their own, the npm ones when
npm is there), and a user folder for them to work on. Used by tests/envs/test_mcp_servers.py
and bench/byot_mcp.py; not part of the package.

- ``time`` (mcp-server-time): read-only, answers from the clock;
- ``git`` (mcp-server-git): a repository on disk;
- ``sqlite`` (mcp-server-sqlite): a database file; its errors come back as text;
- ``memory`` (@modelcontextprotocol/server-memory): a knowledge graph in a JSON Lines file;
- ``filesystem`` (@modelcontextprotocol/server-filesystem): a folder it reads and edits;
- ``everything`` (@modelcontextprotocol/server-everything): the protocol's test server.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVERS_DIR = Path(os.environ.get("TRAJSYNTH_MCP_SERVERS") or ROOT / ".mcp-servers")
NAMES = ("time", "git", "sqlite", "memory", "filesystem", "everything")
NPM = {
    "memory": "mcp-server-memory",
    "filesystem": "mcp-server-filesystem",
    "everything": "mcp-server-everything",
}


def program(name: str) -> Path:
    if name in NPM:
        return SERVERS_DIR / "node_modules" / ".bin" / NPM[name]
    return SERVERS_DIR / "py" / name / "bin" / f"mcp-server-{name}"


def missing(name: str) -> str | None:
    """Why the server cannot run here (None: it can)."""
    if program(name).exists():
        return None
    if name in NPM and shutil.which("npm") is None:
        return "npm is not installed: the npm MCP servers cannot be installed"
    return f"{program(name)} is missing: run `make install` (it installs the MCP servers)"


def user_folder(base: Path) -> Path:
    """A user's folder with something for each server: a git repository (two commits, a
    branch, a changed and a new file), a shop database, a memory file, documents."""
    home = base / "user"
    repo = home / "repo"
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=Ada", "-c", "user.email=ada@example.com"]
    env = {**os.environ, "GIT_AUTHOR_DATE": "2024-05-01T10:00:00", "GIT_COMMITTER_DATE":
           "2024-05-01T10:00:00"}  # fmt: skip
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("# Inventory\n\nTracks the shop's stock.\n")
    (repo / "stock.csv").write_text("item,count\npen,10\nbook,4\n")
    subprocess.run([*git, "add", "."], check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "Start the inventory"], check=True, env=env)
    (repo / "notes.txt").write_text("Order more pens.\n")
    subprocess.run([*git, "add", "notes.txt"], check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "Add notes"], check=True, env=env)
    subprocess.run([*git, "branch", "restock"], check=True, env=env)
    (repo / "stock.csv").write_text("item,count\npen,10\nbook,4\ncup,7\n")
    (repo / "todo.md").write_text("- count the cups\n")
    db = home / "shop" / "shop.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item_id INTEGER, qty INTEGER)")
        con.executemany("INSERT INTO items (name, price) VALUES (?, ?)",
                        [("pen", 1.5), ("book", 12.0), ("cup", 4.25)])  # fmt: skip
        con.executemany("INSERT INTO orders (item_id, qty) VALUES (?, ?)", [(1, 3), (2, 1)])
    con.close()
    memory = home / "memory" / "memory.jsonl"
    memory.parent.mkdir()
    records = [
        {"type": "entity", "name": "Ada", "entityType": "person",
         "observations": ["writes programs"]},
        {"type": "entity", "name": "Analytical Engine", "entityType": "machine",
         "observations": ["designed by Babbage"]},
        {"type": "relation", "from": "Ada", "to": "Analytical Engine", "relationType": "programs"},
    ]  # fmt: skip
    memory.write_text("".join(json.dumps(x) + "\n" for x in records))
    docs = home / "docs"
    (docs / "letters").mkdir(parents=True)
    (docs / "plan.md").write_text("# Plan\n\n1. Count stock\n2. Order pens\n")
    (docs / "letters" / "supplier.txt").write_text("Dear supplier,\nplease send 20 pens.\n")
    (docs / "budget.txt").write_text("pens: 30\nbooks: 48\n")
    return home


def mcp_config(name: str, home: Path) -> dict[str, Any]:
    """The ``mcp`` mapping of a toolset for ``name`` on the user's folder ``home``."""
    cmd = [str(program(name))]
    if name == "git":
        cmd += ["--repository", str(home / "repo")]
    elif name == "sqlite":
        cmd += ["--db-path", str(home / "shop" / "shop.db")]
    elif name == "filesystem":
        cmd += [str(home / "docs")]
    config: dict[str, Any] = {"command": cmd}
    if name == "memory":
        config["env"] = {"MEMORY_FILE_PATH": str(home / "memory" / "memory.jsonl")}
    return config


def folder_hash(folder: Path) -> str:
    """Every path, kind, mode and content under ``folder`` (modification times aside)."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        st = path.lstat()
        h.update(f"{rel}\0{st.st_mode}\0".encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()
