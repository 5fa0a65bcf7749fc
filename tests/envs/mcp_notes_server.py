"""A small stateful MCP server for the ``mcp`` environment's tests (not part of the package).

python mcp_notes_server.py               # stdio
python mcp_notes_server.py --http PORT   # streamable HTTP on 127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from typing_extensions import TypedDict

server = MCPServer("notes", log_level="ERROR")
NOTES: dict[str, dict] = {}
COUNTER = [0]
READ = ToolAnnotations(read_only_hint=True)


class NoteRef(TypedDict):
    note_id: str
    title: str


class Note(TypedDict):
    note_id: str
    title: str
    body: str
    tag: str


class NoteList(TypedDict):
    notes: list[NoteRef]


def _seed() -> None:
    NOTES.clear()
    COUNTER[0] = 0
    for title, body, tag in [("Groceries", "milk, eggs", "home"), ("Sprint", "ship v2", "work")]:
        create_note(title, body, tag)


@server.tool()
def create_note(title: str, body: str, tag: str = "misc") -> NoteRef:
    """Create a note."""
    COUNTER[0] += 1
    note_id = f"n{COUNTER[0]}"
    NOTES[note_id] = {"note_id": note_id, "title": title, "body": body, "tag": tag}
    return {"note_id": note_id, "title": title}


@server.tool(annotations=READ)
def get_note(note_id: str) -> Note:
    """Read one note."""
    if note_id not in NOTES:
        raise ToolError(f"no note {note_id}")
    return NOTES[note_id]


@server.tool(annotations=READ)
def list_notes(tag: str) -> NoteList:
    """Notes with a tag."""
    return {"notes": [{"note_id": n["note_id"], "title": n["title"]}
                      for n in NOTES.values() if n["tag"] == tag]}  # fmt: skip


@server.tool()
def retag_note(note_id: str, tag: str) -> Note:
    """Give a note another tag."""
    if note_id not in NOTES:
        raise ToolError(f"no note {note_id}")
    NOTES[note_id] = {**NOTES[note_id], "tag": tag}
    return NOTES[note_id]


@server.tool()
def reset() -> dict:
    """Back to the initial notes."""
    _seed()
    return {"ok": True}


@server.tool(annotations=READ)
def state() -> dict:
    """Every note and the id counter."""
    return {"notes": NOTES, "counter": COUNTER[0]}


_seed()

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
