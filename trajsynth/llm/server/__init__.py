"""``trajsynth serve``: an OpenAI-compatible HTTP server over the simulator or a local model.

Endpoints: ``POST /v1/chat/completions`` (messages, tools, n, temperature, top_p,
max_tokens, seed, logprobs/top_logprobs, stop; the simulator also reads the body field
``trajsynth_metadata``), ``GET /v1/models``, ``GET /metrics`` (JSON counters: requests by
outcome, so tests can assert how many requests a client really sent) and ``GET /health``.
Every response carries ``x-trajsynth-requests`` (chat requests received so far).

Built for tests and benchmarks, where client and server share two cores, so it is an
``asyncio.Protocol`` speaking just enough HTTP/1.1 (keep-alive, Content-Length bodies) rather
than a framework; ``bench/llm_throughput.py`` measures its CPU per request. Per request:

1. parse the request line, headers and body (pipelined requests on one connection are
   answered in order);
2. draw a fault with probability ``fault_rate`` from ``fault_mix``: ``429`` (with
   ``retry-after-ms`` and ``retry-after``), ``500``, ``timeout`` (never answers; the
   connection is closed after ``hang_s``) or ``garbage`` (200 with a truncated JSON body);
3. draw the latency (``200`` fixed ms, ``100:300`` uniform, ``exp:200`` exponential mean);
4. answer: the simulator is computed at once and the response written when the latency has
   passed (a timer, no task per request); a local model is awaited (its batcher groups
   concurrent requests) and the rest of the latency, if any, waited out. Tool calls in a local
   model's text are parsed into native ``tool_calls`` with the shared parser, as vLLM's tool
   parsers do.

Modules, one job each: :mod:`.options` (latency, faults and the other settings),
:mod:`.http` (the connection: request parsing, responses; the JSON bodies), :mod:`.chat`
(:class:`ChatServer`: routing, ``/v1/chat/completions``, ``/metrics``), :mod:`.batch` (the
emulated OpenAI files and batches API), :mod:`.launch` (:func:`serve` in this process,
:func:`spawn_server` in a subprocess).
"""

from .chat import ChatServer
from .launch import READY_LINE, ServeProcess, serve, spawn_server
from .options import Latency, ServerOptions

__all__ = [
    "READY_LINE",
    "ChatServer",
    "Latency",
    "ServeProcess",
    "ServerOptions",
    "serve",
    "spawn_server",
]
