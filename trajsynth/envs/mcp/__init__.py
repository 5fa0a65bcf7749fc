"""The ``mcp`` environment: tools served by a Model Context Protocol server, executed for real
(https://modelcontextprotocol.io; the ``mcp`` Python SDK, ``pip install 'trajsynth[mcp]'``),
over stdio (a command the factory starts) or streamable HTTP (a URL).

- :mod:`.config`: :class:`MCPConfig`, how a server is started and treated;
- :mod:`.state`: where a stdio server keeps its state on disk, and the private copies every
  episode runs on;
- :mod:`.results`: what an answer means (``isError``, error-shaped results, exceptions);
- :mod:`.server`: :class:`MCPServer`, one connection usable from any thread (start in the
  sandbox's private view, calls, state by reset / restore / restart, stop);
- :mod:`.env`: :class:`MCPEnvironment`, an episode against a server;
- :mod:`.probe`: values a server accepts, found by calling its read-only tools.

Replaying a log gives the same results only if the server is deterministic given its calls:
stdio servers get a fixed time zone, locale and git clock (``deterministic``); what a server
still draws from the clock is volatile (:mod:`trajsynth.core.volatile`) and left out when a
replay is compared.
"""

from typing import Any

from .config import DETERMINISTIC_ENV, MCPConfig, parse_target
from .env import MCPEnvironment
from .server import MCPServer, tool_spec

__all__ = [
    "DETERMINISTIC_ENV",
    "MCPConfig",
    "MCPEnvironment",
    "MCPServer",
    "describe_server",
    "parse_target",
    "tool_spec",
]


def describe_server(config: MCPConfig, name: str = "mcp") -> dict[str, Any]:
    """Start a server, list its tools, stop it: ``{"toolset", "state", "isolation",
    "reset", "stderr_log"}`` (what ``trajsynth tools list`` and ``validate`` show)."""
    server = MCPServer(config, name)
    try:
        toolset = server.toolset(name)
        return {
            "toolset": toolset,
            "state": [str(p) for p in server.state_paths()],
            "isolation": server.isolation,
            "reset": server.reset_mode(),
            "stderr_log": str(server.stderr_path) if server.stderr_path else None,
        }
    finally:
        server.close()
