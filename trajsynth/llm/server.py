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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any, cast

from ..core.errors import ConfigError, EndpointError
from .base import Backend, BackendReply, ChatRequest
from .parsing import OFF_LOOP_CHARS, output_chars, parse_output

__all__ = [
    "READY_LINE",
    "ChatServer",
    "Latency",
    "ServeProcess",
    "ServerOptions",
    "serve",
    "spawn_server",
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
FAULT_KINDS = ("429", "500", "timeout", "garbage")
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Latency:
    """Response latency in milliseconds: fixed, uniform, or exponential."""

    kind: str = "fixed"
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | float | None) -> Latency:
        if text is None or text == "":
            return cls()
        if isinstance(text, (int, float)):
            return cls("fixed", float(text))
        s = str(text).strip()
        try:
            if s.startswith("exp:"):
                return cls("exp", float(s[4:]))
            if ":" in s:
                lo, hi = s.split(":", 1)
                return cls("uniform", float(lo), float(hi))
            return cls("fixed", float(s))
        except ValueError:
            raise ConfigError(
                f"--latency-ms {text!r}: use 200 (fixed), 100:300 (uniform) or exp:200"
            ) from None

    def sample(self, rng: random.Random) -> float:
        """Seconds."""
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b) / 1000.0
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.a) / 1000.0 if self.a > 0 else 0.0
        return self.a / 1000.0


@dataclass
class ServerOptions:
    """Behaviour of the server (``trajsynth serve`` options)."""

    model_name: str = "sim"
    latency: Latency = field(default_factory=Latency)
    fault_rate: float = 0.0
    fault_mix: tuple[str, ...] = FAULT_KINDS
    retry_after_ms: float = 100.0
    hang_s: float = 30.0
    seed: int = 0
    ignore_n: bool = False  # behave like servers without `n`: always one choice
    parse_calls: bool = False  # parse tool calls out of text (local models)
    batch_delay_s: float = 1.0  # a batch completes this long after it was created

    def __post_init__(self) -> None:
        if not 0 <= self.fault_rate <= 1:
            raise ConfigError(f"--fault-rate {self.fault_rate}: must be between 0 and 1")
        bad = [k for k in self.fault_mix if k not in FAULT_KINDS]
        if bad or not self.fault_mix:
            raise ConfigError(f"--fault-mix {bad or '(empty)'}: choose from {list(FAULT_KINDS)}")
        if self.batch_delay_s < 0:
            raise ConfigError(f"--batch-delay {self.batch_delay_s}: must be 0 or more seconds")


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection; requests are answered one at a time, in order."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.headers: dict[str, str] = {}  # of the request being answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's: read and write
        self.server.counters["connections"] += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self.respond(413, b'{"error":{"message":"headers too large"}}', keep=False)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self.respond(400, b'{"error":{"message":"bad request line"}}', keep=False)
                return
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.respond(400, b'{"error":{"message":"chunked bodies unsupported"}}', keep=False)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                length = -1
            if length < 0:
                self.respond(400, b'{"error":{"message":"bad content-length"}}', keep=False)
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            conn_header = headers.get("connection", "").lower()
            keep = conn_header != "close" and (version == "HTTP/1.1" or conn_header == "keep-alive")
            self.busy = True
            self.headers = headers
            self.server.dispatch(self, method, target.split("?", 1)[0], body, keep)

    def respond(
        self, status: int, body: bytes, keep: bool = True, headers: dict[str, str] | None = None
    ) -> None:
        if self.closed or self.transport is None:
            return
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"x-trajsynth-requests: {self.server.counters['chat_requests']}\r\n{extra}"
            f"connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        )
        self.transport.write(head.encode("latin-1") + body)
        self.busy = False
        if not keep:
            self.transport.close()
            self.closed = True
        elif self.buf:
            self._next()

    def hang(self, seconds: float) -> None:
        """Never answer this request; drop the connection after ``seconds``."""
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, lambda: self.transport.close() if self.transport else None)


class ChatServer:
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

    # -- batch API ---------------------------------------------------------------------------
    def batch_api(self, conn: _Conn, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """Files and batches (see the module docstring): (status, JSON body)."""
        parts = path.strip("/").split("/")[1:]  # ["files", id, "content"] or ["batches", ...]
        if parts == ["files"] and method == "POST":
            return 200, _json(self._upload(conn.headers.get("content-type", ""), body))
        if parts[0] == "files" and len(parts) in (2, 3) and method == "GET":
            f = self.files.get(parts[1])
            if f is None:
                raise _ApiError(404, f"no file {parts[1]!r}")
            if len(parts) == 3 and parts[2] == "content":
                return 200, f.data
            if len(parts) == 2:
                return 200, _json(f.info())
        if parts == ["batches"] and method == "POST":
            return 200, _json(self._create_batch(body))
        if parts == ["batches"] and method == "GET":
            newest = sorted(self.batches.values(), key=lambda b: -b["_n"])
            data = [_public(b) for b in newest]
            return 200, _json({"object": "list", "data": data, "has_more": False})
        if parts[0] == "batches" and len(parts) >= 2:
            batch = self.batches.get(parts[1])
            if batch is None:
                raise _ApiError(404, f"no batch {parts[1]!r}")
            if len(parts) == 2 and method == "GET":
                return 200, _json(_public(batch))
            if parts[2:] == ["cancel"] and method == "POST":
                if batch["status"] in ("validating", "in_progress"):
                    batch["status"] = "cancelled"
                    batch["cancelled_at"] = int(time.time())
                return 200, _json(_public(batch))
        raise _ApiError(404 if method in ("GET", "POST") else 405, f"no route {method} {path}")

    def _upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        fields = _multipart(content_type, body)
        if "file" not in fields:
            raise _ApiError(400, "multipart field `file` is missing")
        purpose = fields.get("purpose", (None, b"batch"))[1].decode("utf-8", "replace")
        name, data = fields["file"]
        self.counters["files_uploaded"] += 1
        f = _File(f"file-{len(self.files) + 1:06d}", name or "upload.jsonl", purpose, data)
        self.files[f.id] = f
        return f.info()

    def _create_batch(self, body: bytes) -> dict[str, Any]:
        try:
            p = json.loads(body)
        except ValueError:
            raise _ApiError(400, "body is not JSON") from None
        if not isinstance(p, dict):
            raise _ApiError(400, "body must be a JSON object")
        source = self.files.get(str(p.get("input_file_id")))
        if source is None:
            raise _ApiError(400, f"no input file {p.get('input_file_id')!r}")
        if p.get("endpoint") != "/v1/chat/completions":
            raise _ApiError(400, "endpoint must be /v1/chat/completions")
        lines = [json.loads(x) for x in source.data.splitlines() if x.strip()]
        ids = [str(x.get("custom_id")) for x in lines if isinstance(x, dict)]
        if len(ids) != len(lines) or len(set(ids)) != len(ids):
            raise _ApiError(400, "every line needs a custom_id, unique within the batch")
        self.counters["batches_created"] += 1
        self.counters["batch_requests"] += len(ids)
        self.counters["batch_custom_ids_repeated"] += len(self._seen_custom_ids.intersection(ids))
        self._seen_custom_ids.update(ids)
        n = self.counters["batches_created"]
        now = int(time.time())
        batch: dict[str, Any] = {
            "id": f"batch_{n:06d}",
            "object": "batch",
            "endpoint": p["endpoint"],
            "errors": None,
            "input_file_id": source.id,
            "completion_window": p.get("completion_window") or "24h",
            "status": "in_progress",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": now,
            "expires_at": now + 86400,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": p.get("metadata"),
            "_n": n,
        }
        self.batches[batch["id"]] = batch
        task = asyncio.get_running_loop().create_task(self._run_batch(batch, lines))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return _public(batch)

    async def _run_batch(self, batch: dict[str, Any], lines: list[dict[str, Any]]) -> None:
        """Answer every line as a live request would be, after the batch delay."""
        await asyncio.sleep(self.options.batch_delay_s)
        out: list[bytes] = []
        errors: list[bytes] = []
        for i, line in enumerate(lines):
            if batch["status"] != "in_progress":
                return  # cancelled meanwhile
            custom_id = line["custom_id"]
            status, body = await self._answer_line(line)
            record = {
                "id": f"{batch['id']}_req_{i}",
                "custom_id": custom_id,
                "response": {
                    "status_code": status,
                    "request_id": f"req_{batch['id']}_{i}",
                    "body": json.loads(body),
                },
                "error": None,
            }
            (out if status == 200 else errors).append(json.dumps(record).encode() + b"\n")
        if batch["status"] != "in_progress":
            return
        name = batch["id"]
        for kind, rows in (("output", out), ("error", errors)):
            if rows:
                f = _File(f"file-{len(self.files) + 1:06d}", f"{name}_{kind}.jsonl",
                          "batch_output", b"".join(rows))  # fmt: skip
                self.files[f.id] = f
                batch[f"{kind}_file_id"] = f.id
        batch["request_counts"] = {"total": len(lines), "completed": len(out),
                                   "failed": len(errors)}  # fmt: skip
        batch["finalizing_at"] = batch["completed_at"] = int(time.time())
        batch["status"] = "completed"

    async def _answer_line(self, line: dict[str, Any]) -> tuple[int, bytes]:
        if line.get("method") != "POST" or line.get("url") != "/v1/chat/completions":
            return 400, _err("each line must POST to /v1/chat/completions")
        body = line.get("body")
        try:
            request = _request_from_body(json.dumps(body).encode(), ignore_n=self.options.ignore_n)
        except ValueError as exc:
            return 400, _err(str(exc), "invalid_request_error")
        self.counters["chat_requests"] += 1
        number = self.counters["chat_requests"]
        try:
            if self._sync:
                # the backend has a synchronous answer() (hasattr), which Backend lacks
                reply = self.backend.answer(request)  # type: ignore[attr-defined]
            else:
                reply = await self.backend.complete(request)
        except EndpointError as exc:
            self.counters["bad_request"] += 1
            return 400, _err(exc.message, "invalid_request_error")
        self.counters["ok"] += 1
        return 200, await self._render_async(reply, number, request.n)


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


class _ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name → (filename, bytes)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    if "multipart/form-data" not in content_type.lower():
        raise _ApiError(400, "upload files as multipart/form-data")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    msg = BytesParser(policy=HTTP).parsebytes(head + body)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            payload = part.get_payload(decode=True)  # bytes; None for a nested multipart
            fields[str(name)] = (
                part.get_filename(),
                payload if isinstance(payload, bytes) else b"",
            )
    return fields


def _err(message: str, kind: str = "error") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind}}).encode()


def _request_from_body(body: bytes, *, ignore_n: bool) -> ChatRequest:
    try:
        p = json.loads(body)
    except ValueError:
        raise ValueError("body is not JSON") from None
    if not isinstance(p, dict):
        raise ValueError("body must be a JSON object")
    messages = p.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("`messages` must be a non-empty list")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise ValueError("every message needs a `role`")
    n = p.get("n") or 1
    if not isinstance(n, int) or n < 1 or n > 128:
        raise ValueError("`n` must be an integer between 1 and 128")
    stop = p.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    tools = p.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("`tools` must be a list")
    meta = p.get("trajsynth_metadata")
    return ChatRequest.model_construct(
        messages=messages,
        tools=tools or None,
        n=1 if ignore_n else n,
        temperature=p.get("temperature"),
        top_p=p.get("top_p"),
        max_tokens=p.get("max_tokens") or p.get("max_completion_tokens"),
        seed=p.get("seed"),
        logprobs=bool(p.get("logprobs")),
        top_logprobs=p.get("top_logprobs"),
        stop=stop,
        metadata=meta if isinstance(meta, dict) else None,
        extra_body=None,
    )


def serve(
    backend: Backend,
    options: ServerOptions,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    use_uvloop: bool = True,
    on_ready: Any = None,
) -> None:
    """Run the server until SIGINT/SIGTERM. ``on_ready(host, port)`` is called once listening."""

    async def main() -> None:
        server = ChatServer(backend, options)
        bound = await server.start(host, port)
        if on_ready is not None:
            on_ready(*bound)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # non-POSIX
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.close()

    if use_uvloop:
        try:
            import uvloop

            uvloop.run(main())
            return
        except ImportError:
            pass
    asyncio.run(main())


# --------------------------------------------------------------------------------------
# a server in a subprocess (tests, benchmarks, scripts)
# --------------------------------------------------------------------------------------

#: what ``trajsynth serve`` prints, followed by its base URL, once it accepts requests
READY_LINE = "listening on "


@dataclass
class ServeProcess:
    """A ``trajsynth serve`` running in a subprocess (see :func:`spawn_server`)."""

    proc: Any  # subprocess.Popen[str]
    base_url: str  # http://HOST:PORT/v1

    def metrics(self) -> dict[str, Any]:
        """The server's ``/metrics`` counters."""
        import urllib.request

        url = self.base_url.rsplit("/v1", 1)[0] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_server(*args: str, host: str = "127.0.0.1", timeout: float = 120.0) -> ServeProcess:
    """Start ``trajsynth serve --host HOST --port 0 ARGS`` (a free port) in a subprocess of
    this interpreter and wait until it listens; its stderr is in the error if it does not.
    ``with spawn_server("--backend", "sim") as server: ... server.base_url``."""
    import os
    import subprocess
    import sys
    import threading
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # the folder holding the package
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajsynth", "serve", "--host", host, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line: list[str] = []
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both piped
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not line or READY_LINE not in line[0]:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"trajsynth serve did not start: {line} {err[-2000:]}")
    # stderr is not read while it runs: keep it from filling the pipe
    threading.Thread(target=stderr.read, daemon=True).start()
    return ServeProcess(proc=proc, base_url=line[0].strip().split(READY_LINE, 1)[1])
