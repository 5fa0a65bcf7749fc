"""The emulated OpenAI batch API of :class:`~.chat.ChatServer`: ``/v1/files`` (multipart
upload, info, content) and ``/v1/batches`` (create, list, get, cancel). A batch's lines are
answered as live requests would be, ``batch_delay_s`` after it was created, into an output
and an error file."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import EndpointError
from ..base import Backend, BackendReply
from .http import _Conn, _err, _json, _request_from_body
from .options import ServerOptions


class BatchAPI:
    """The files and batches endpoints; :class:`~.chat.ChatServer` holds the state below."""

    backend: Backend
    options: ServerOptions
    counters: dict[str, int]
    files: dict[str, _File]
    batches: dict[str, dict[str, Any]]
    _seen_custom_ids: set[str]
    _sync: bool
    _tasks: set[asyncio.Task[None]]
    _render_async: Callable[[BackendReply, int, int], Awaitable[bytes]]

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
