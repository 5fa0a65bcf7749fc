"""HTTP/1.1 on an ``asyncio.Protocol``: one connection's request parsing (keep-alive,
pipelined requests answered in order, Content-Length bodies) and responses, and the JSON
bodies every endpoint shares: errors, and a chat request body read into a ChatRequest."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

from ..base import ChatRequest

if TYPE_CHECKING:
    from .chat import ChatServer

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
_MAX_HEAD = 64 * 1024


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


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()


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
