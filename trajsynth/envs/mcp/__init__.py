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
still draws from the clock is volatile (:mod:`trajsynth.envs.volatile`) and left out when a
replay is compared.
"""

from .config import DETERMINISTIC_ENV, MCPConfig
from .env import MCPEnvironment
from .server import MCPServer, tool_spec

__all__ = ["DETERMINISTIC_ENV", "MCPConfig", "MCPEnvironment", "MCPServer", "tool_spec"]
