"""A small MCP server that keeps its state in a JSON file, with no reset or state tool, for
the isolation and operation tests of the ``mcp`` environment (not part of the package).

python mcp_kv_server.py STORE.json

- ``put``/``get``/``keys``: a key-value store in STORE.json (read and written on every call);
- ``log``: appends to the file named by $KV_LOG (a write the command does not name);
- ``spawn_and_wait``: starts ``sleep`` with a marker argument, then waits (a hung call whose
  server has a child);
- ``crash``: exits at once;
- ``add``: a number parameter, for schema errors the server itself reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("kv", log_level="ERROR")
READ = ToolAnnotations(read_only_hint=True)
STORE = sys.argv[1]
print("kv server starting", file=sys.stderr, flush=True)


def _load() -> dict[str, str]:
    if not os.path.exists(STORE):
        return {}
    with open(STORE) as f:
        return json.load(f)


@server.tool()
def put(key: str, value: str) -> dict:
    """Store a value under a key."""
    data = _load()
    data[key] = value
    with open(STORE, "w") as f:
        json.dump(data, f, sort_keys=True)
    return {"stored": key, "size": len(data)}


@server.tool(annotations=READ)
def get(key: str) -> dict:
    """The value of a key."""
    data = _load()
    if key not in data:
        raise ToolError(f"no key {key}")
    return {"key": key, "value": data[key]}


@server.tool(annotations=READ)
def keys() -> dict:
    """Every key."""
    return {"keys": sorted(_load())}


@server.tool()
def log(text: str) -> str:
    """Append a line to the log file."""
    with open(os.environ["KV_LOG"], "a") as f:
        f.write(text + "\n")
    return "logged"


@server.tool(annotations=READ)
def spawn_and_wait(marker: str, seconds: float) -> str:
    """Start a child process, then wait."""
    subprocess.Popen(["sleep", f"300.{marker}"])
    time.sleep(seconds)
    return "done"


@server.tool(annotations=READ)
def crash() -> str:
    """Exit at once, as a server with a fatal bug does."""
    print("fatal: the kv server lost its mind", file=sys.stderr, flush=True)
    os._exit(1)


@server.tool(annotations=READ)
def add(a: float, b: float) -> float:
    """a + b."""
    return a + b


if __name__ == "__main__":
    server.run()
