"""The chat server: routing, ``POST /v1/chat/completions`` (fault, latency, answer; see the
package docstring), ``GET /v1/models``, ``/metrics`` and ``/health``."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from ...core.errors import ConfigError, EndpointError
from ..base import Backend, BackendReply, ChatRequest
from ..parsing import OFF_LOOP_CHARS, output_chars, parse_output
from .batch import BatchAPI, _ApiError, _File
from .http import _Conn, _err, _request_from_body
from .options import ServerOptions


class ChatServer(BatchAPI):
    """The server's request handling (transport-independent apart from :class:`_Conn`)."""

    def __init__(self, backend: Backend, options: ServerOptions | None = None) -> None:
        self.backend = backend
        self.options = options or ServerOptions()
        self.rng = random.Random(self.options.seed)
        self.counters: dict[str, int] = {
            "chat_requests": 0,
            "ok": 0,
            "bad_request": 0,
            "fault_429": 0,
            "fault_500": 0,
            "fault_timeout": 0,
            "fault_garbage": 0,
            "other_requests": 0,
            "connections": 0,
            "files_uploaded": 0,
            "batches_created": 0,
            "batch_requests": 0,
            "batch_custom_ids_repeated": 0,
        }
        self.files: dict[str, _File] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self._seen_custom_ids: set[str] = set()
        self._sync = hasattr(backend, "answer")
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = time.time()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Conn(self), host, port, backlog=4096, reuse_address=True
            )
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        sock = self._server.sockets[0].getsockname()
        return sock[0], sock[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- routing -----------------------------------------------------------------------------
    def dispatch(self, conn: _Conn, method: str, path: str, body: bytes, keep: bool) -> None:
        if path == "/v1/chat/completions" or path == "/chat/completions":
            if method != "POST":
                conn.respond(405, _err("use POST"), keep=keep)
                return
            self.chat(conn, body, keep)
            return
        self.counters["other_requests"] += 1
        if path.startswith(("/v1/files", "/v1/batches")):
            try:
                status, payload = self.batch_api(conn, method, path, body)
            except _ApiError as exc:
                status, payload = exc.status, _err(exc.message, "invalid_request_error")
            conn.respond(status, payload, keep=keep)
            return
        if method != "GET":
            conn.respond(405, _err("use GET"), keep=keep)
        elif path in ("/v1/models", "/models"):
            data = {
                "object": "list",
                "data": [
                    {"id": self.options.model_name, "object": "model", "owned_by": "trajsynth"}
                ],
            }
            conn.respond(200, json.dumps(data).encode(), keep=keep)
        elif path == "/metrics":
            conn.respond(200, json.dumps(self.metrics()).encode(), keep=keep)
        elif path == "/health":
            conn.respond(200, b'{"status":"ok"}', keep=keep)
        else:
            conn.respond(404, _err(f"no route {path}"), keep=keep)

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counters)
        out["uptime_s"] = round(time.time() - self.started, 3)
        stats = getattr(self.backend, "stats", None)
        if isinstance(stats, dict):
            out["backend"] = dict(stats)
        return out

    # -- chat --------------------------------------------------------------------------------
    def chat(self, conn: _Conn, body: bytes, keep: bool) -> None:
        self.counters["chat_requests"] += 1
        number = self.counters["chat_requests"]
        opts = self.options
        loop = asyncio.get_running_loop()
        # 1) parse
        try:
            request = _request_from_body(body, ignore_n=opts.ignore_n)
        except ValueError as exc:
            self.counters["bad_request"] += 1
            conn.respond(400, _err(str(exc), "invalid_request_error"), keep=keep)
            return
        # 2) fault, 3) latency
        fault = None
        if opts.fault_rate and self.rng.random() < opts.fault_rate:
            fault = self.rng.choice(opts.fault_mix)
        delay = opts.latency.sample(self.rng)
        if fault == "timeout":
            self.counters["fault_timeout"] += 1
            conn.hang(opts.hang_s)
            return
        if fault is not None:
            self.counters[f"fault_{fault}"] += 1
            loop.call_later(delay, self._fault, conn, fault, keep)
            return
        # 4) answer
        if self._sync:
            try:
                # _sync: the backend has a synchronous answer() (hasattr), which Backend lacks
                reply = self.backend.answer(request)  # type: ignore[attr-defined]
            except EndpointError as exc:
                self.counters["bad_request"] += 1
                conn.respond(400, _err(exc.message, "invalid_request_error"), keep=keep)
                return
            payload = self._render(reply, number, request.n)
            self.counters["ok"] += 1
            if delay > 0:
                loop.call_later(delay, conn.respond, 200, payload, keep)
            else:
                conn.respond(200, payload, keep=keep)
            return
        task = loop.create_task(self._answer_async(conn, request, number, delay, keep))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_async(
        self, conn: _Conn, request: ChatRequest, number: int, delay: float, keep: bool
    ) -> None:
        start = time.monotonic()
        try:
            reply = await self.backend.complete(request)
        except EndpointError as exc:
            self.counters["bad_request"] += 1
            conn.respond(400, _err(exc.message, "invalid_request_error"), keep=keep)
            return
        except Exception as exc:  # a model failure is the server's 500, not a crash
            conn.respond(500, _err(f"{type(exc).__name__}: {exc}"), keep=keep)
            return
        rest = delay - (time.monotonic() - start)
        if rest > 0:
            await asyncio.sleep(rest)
        self.counters["ok"] += 1
        conn.respond(200, await self._render_async(reply, number, request.n), keep=keep)

    async def _render_async(self, reply: BackendReply, number: int, n: int) -> bytes:
        """:meth:`_render`, in a worker thread when it parses a long output (the loop serves
        the other connections meanwhile)."""
        if self.options.parse_calls and any(
            output_chars(ch.content, None, ch.reasoning) > OFF_LOOP_CHARS for ch in reply.choices
        ):
            return await asyncio.to_thread(self._render, reply, number, n)
        return self._render(reply, number, n)

    def _fault(self, conn: _Conn, fault: str, keep: bool) -> None:
        if fault == "429":
            ms = self.options.retry_after_ms
            conn.respond(
                429,
                _err("rate limited (injected fault)", "rate_limit_exceeded"),
                keep=keep,
                headers={"retry-after-ms": f"{ms:g}", "retry-after": f"{max(ms / 1000.0, 0):g}"},
            )
        elif fault == "500":
            conn.respond(500, _err("internal error (injected fault)", "server_error"), keep=keep)
        else:
            conn.respond(200, b'{"id": "chatcmpl-garbage", "choices": [{"ind', keep=keep)

    def _render(self, reply: BackendReply, number: int, n: int) -> bytes:
        choices = []
        for i, ch in enumerate(reply.choices):
            content, reasoning, calls = ch.content, ch.reasoning, ch.tool_calls
            if self.options.parse_calls and not calls and content:
                parsed = parse_output(content, reasoning=reasoning)
                if parsed.calls:
                    calls = [c.model_dump() for c in parsed.calls]
                    content = parsed.content
                reasoning = parsed.reasoning
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls
                ]
            if reasoning:
                message["reasoning_content"] = reasoning
            logprobs = None
            if ch.logprobs is not None:
                logprobs = {
                    "content": [
                        {
                            "token": t.token,
                            "logprob": t.logprob,
                            "bytes": None,
                            "top_logprobs": [
                                {"token": a, "logprob": b, "bytes": None} for a, b in t.top
                            ],
                        }
                        for t in ch.logprobs
                    ]
                }
            choices.append(
                {
                    "index": i,
                    "message": message,
                    "finish_reason": ch.finish_reason or "stop",
                    "logprobs": logprobs,
                }
            )
        u = reply.usage
        body = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.options.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.total_tokens,
            },
        }
        return json.dumps(body, ensure_ascii=False).encode()
