"""``backend: openai_batch`` — a role's requests through the endpoint's batch API (OpenAI's
``/v1/files`` + ``/v1/batches``; half the live price at OpenAI), behind the same ``chat`` as
every other backend.

A stage awaits ``chat`` exactly as it would with ``backend: openai``; what changes is when the
answer comes. For each request:

1. its ``custom_id`` is its cache key (``cache.request_key``): the same request always has the
   same id, in this run and in a resumed one;
2. a request already submitted in a batch that the run's journal records (a run killed while
   batches were in flight) waits for that batch instead of being sent again; a request already
   waiting in this process shares the waiting (ids are unique within a batch);
3. otherwise it joins the open batch, which is submitted once no new request arrived for
   ``batch.flush_idle_s`` (or its oldest request waited ``max_wait_s``, or it holds
   ``max_requests`` requests or ``max_bytes``). A rollout stage plays many episodes at once, each
   waiting for its next step, so the open episodes go out together and advance one turn per
   batch;
4. submitting: the batch's JSONL (``{custom_id, method: POST, url: /v1/chat/completions,
   body}`` per line, the body exactly as ``backend: openai`` sends it) is uploaded
   (``purpose=batch``) and the upload recorded in the journal *before* the batch is created;
   the batch id is recorded after. A run killed between the two finds, on resume, the batch
   made from its uploaded file (``GET /v1/batches``) and adopts it; only a file with no batch
   is submitted then. So no batch is ever submitted twice;
5. the batch is polled every ``poll_s`` (``GET /v1/batches/{id}``) until it ends; its output and
   error files are downloaded into the run folder (``batches/<batch id>.jsonl``), the journal
   records the collection, and every waiting request gets its line: the chat completion,
   parsed as ``backend: openai`` parses it, or its error (recorded on the row like any failed
   request). Lines of a batch that failed, expired or was cancelled without an answer fail the
   same way.

The journal is ``<run folder>/batches/journal.jsonl`` (append-only JSON lines: ``uploaded``
with the file id and its custom ids, ``submitted`` with the batch id, ``collected`` with the
status); answers collected before a kill are read back from the run folder (a line that
failed, like a failed request, is not kept: a later run sends it again). Answers also go to
the response cache as usual, so a rerun of a finished stage sends nothing.

Cost: the client prices a batch role's tokens at the batch price (``prices.batch_factor``,
0.5 by default, or ``batch_prompt_per_mtok`` / ``batch_completion_per_mtok``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import EndpointError
from .base import Backend, BackendReply, ChatRequest, FatalEndpointError, RoleConfig
from .cache import request_key
from .openai_backend import chat_body, reply_from_json

__all__ = ["BatchJournal", "OpenAIBatchBackend", "aclose_batch_clients"]

T = TypeVar("T")

#: batch statuses after which nothing changes any more
TERMINAL = ("completed", "failed", "expired", "cancelled")
CHAT_URL = "/v1/chat/completions"

_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]]
_CLIENTS = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------------------
# the journal (in the run folder)
# --------------------------------------------------------------------------------------


class BatchJournal:
    """What a run submitted: uploaded files and their custom ids, their batches, and which
    batches were collected (answers kept next to the journal). One per folder and process."""

    _open: dict[str, BatchJournal] = {}
    _open_lock = threading.Lock()

    @classmethod
    def at(cls, folder: str | Path) -> BatchJournal:
        key = str(Path(folder).resolve())
        with cls._open_lock:
            journal = cls._open.get(key)
            if journal is None:
                journal = cls._open[key] = cls(folder)
            return journal

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / "journal.jsonl"
        self._lock = threading.Lock()
        self.files: dict[str, list[str]] = {}  # uploaded file id → custom ids
        self.batch_of_file: dict[str, str] = {}  # file id → batch id
        self.keys_of_batch: dict[str, list[str]] = {}
        self.status: dict[str, str] = {}  # batch id → final status, once collected
        self._where: dict[str, str] = {}  # custom id → batch id (not yet answered here)
        self._answers: dict[str, dict[str, dict[str, Any]]] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        for line in self.path.read_bytes().splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn by a kill mid-write
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self._apply(ev)

    def _apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "uploaded":
            self.files[ev["file"]] = list(ev["keys"])
        elif kind == "submitted":
            keys = self.files.get(ev["file"], [])
            self.batch_of_file[ev["file"]] = ev["batch"]
            self.keys_of_batch[ev["batch"]] = keys
            for k in keys:
                self._where[k] = ev["batch"]
        elif kind == "collected":
            self.status[ev["batch"]] = ev["status"]

    def _append(self, ev: dict[str, Any]) -> None:
        line = (json.dumps(ev) + "\n").encode()
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._apply(ev)

    # -- events ------------------------------------------------------------------------------
    def uploaded(self, file_id: str, keys: list[str]) -> None:
        self._append({"event": "uploaded", "file": file_id, "keys": keys, "t": time.time()})

    def submitted(self, file_id: str, batch_id: str) -> None:
        self._append({"event": "submitted", "file": file_id, "batch": batch_id, "t": time.time()})

    def collected(self, batch_id: str, status: str, records: dict[str, dict[str, Any]]) -> None:
        """Keep the batch's answers in the folder, then record the collection."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"{batch_id}.jsonl"
        tmp = final.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records.values()))
        os.replace(tmp, final)
        with self._lock:
            self._answers[batch_id] = records
        self._append({"event": "collected", "batch": batch_id, "status": status, "t": time.time()})

    # -- queries -----------------------------------------------------------------------------
    def unsubmitted(self) -> list[str]:
        """Uploaded files with no batch recorded (a kill between upload and create)."""
        with self._lock:
            return [f for f in self.files if f not in self.batch_of_file]

    def locate(self, key: str) -> str | None:
        """The batch holding ``key`` that has not answered it in this process yet."""
        with self._lock:
            return self._where.get(key)

    def consume(self, key: str) -> None:
        with self._lock:
            self._where.pop(key, None)

    def answer(self, batch_id: str, key: str) -> dict[str, Any] | None:
        """The collected line of ``key`` (read back from the folder after a restart)."""
        with self._lock:
            records = self._answers.get(batch_id)
        if records is None:
            records = {}
            path = self.folder / f"{batch_id}.jsonl"
            if path.exists():
                for line in path.read_text().splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    records[str(rec.get("custom_id"))] = rec
            with self._lock:
                self._answers[batch_id] = records
        return records.get(key)


# --------------------------------------------------------------------------------------
# the backend
# --------------------------------------------------------------------------------------


@dataclass
class _LoopState:
    """What one event loop holds: the open batch, the waiting requests, the pollers."""

    queue: list[tuple[str, bytes]] = field(default_factory=list)
    queued_bytes: int = 0
    first_at: float = 0.0
    last_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    waiters: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    pollers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    submits: set[asyncio.Task[None]] = field(default_factory=set)
    batch_keys: dict[str, list[str]] = field(default_factory=dict)  # without a journal
    recovered: asyncio.Task[None] | None = None


class OpenAIBatchBackend(Backend):
    """Requests collected into batches of the endpoint's batch API (see the module docstring).

    ``state_dir`` is the run folder: the journal and the collected answers go to its
    ``batches/`` folder; without one, nothing survives the process.
    """

    name = "openai_batch"
    #: the client prices this backend's tokens at the role's batch price
    batch_priced = True

    def __init__(self, config: RoleConfig, role: str = "", state_dir: str | None = None) -> None:
        if not config.base_url and not config.model:
            raise EndpointError(
                "openai_batch backend: set `model` (and `base_url` for other servers)"
            )
        self.config = config
        self.role = role
        self.settings = config.batch
        self._api_key = config.resolved_api_key()
        self._identity = config.identity()
        self.journal = (
            BatchJournal.at(Path(state_dir) / "batches")
            if state_dir and config.batch.journal
            else None
        )
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState]
        self._states = weakref.WeakKeyDictionary()
        self._ever_ok = False
        #: for tests and the bench: batches by how they were obtained, requests by source
        self.stats = {
            "batches_submitted": 0,
            "batches_adopted": 0,
            "batches_collected": 0,
            "requests_batched": 0,
            "requests_from_journal": 0,
        }

    def custom_id(self, request: ChatRequest) -> str:
        """The request's id in a batch: its cache key (the client computes the same)."""
        return request_key(self._identity, request, with_metadata=self.config.send_metadata)

    # -- one request -------------------------------------------------------------------------
    async def complete(self, request: ChatRequest) -> BackendReply:
        key = self.custom_id(request)
        loop = asyncio.get_running_loop()
        st = self._state(loop)
        if self.journal is not None:
            if st.recovered is None:
                st.recovered = loop.create_task(self._recover(st))
            await asyncio.shield(st.recovered)
        fut = st.waiters.get(key)
        if fut is None:
            fut = st.waiters[key] = loop.create_future()
            journal = self.journal
            batch_id = journal.locate(key) if journal is not None else None
            answer = None
            if journal is not None and batch_id is not None and batch_id in journal.status:
                # collected before a restart: only an answer is reused, like the cache;
                # a failed line (or one a failed/expired batch never answered) is sent again
                answer = journal.answer(batch_id, key)
                if answer is None or (answer.get("response") or {}).get("status_code") != 200:
                    journal.consume(key)
                    batch_id = answer = None
            if answer is not None:
                self.stats["requests_from_journal"] += 1
                self._resolve(st, key, {**answer, "batch": batch_id})
            elif batch_id is not None:
                self.stats["requests_from_journal"] += 1
                self._poll(st, batch_id)
            else:
                self._enqueue(st, key, request)
        record = await asyncio.shield(fut)
        return self._reply(record)

    def _reply(self, record: dict[str, Any]) -> BackendReply:
        response = record.get("response") or {}
        status = int(response.get("status_code") or 0)
        body = response.get("body")
        if status == 200 and isinstance(body, dict):
            try:
                reply = reply_from_json(body, self.config.model)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise EndpointError(f"{self._where()}: malformed batch answer: {exc}") from None
            reply.attempts = 1
            return reply
        message = record.get("error_message")
        if message is None:
            err = (body or {}).get("error") if isinstance(body, dict) else None
            err = err or record.get("error") or {}
            message = err.get("message") if isinstance(err, dict) else str(err)
            message = f"HTTP {status}: {message}"
        error = EndpointError(f"{self._where()}: batch {record.get('batch', '?')}: {message}")
        error.attempts = 1
        raise error

    def _resolve(self, st: _LoopState, key: str, record: dict[str, Any]) -> None:
        fut = st.waiters.pop(key, None)
        if fut is None:
            return  # nobody asked (yet): the answer stays in the journal's folder
        if self.journal is not None:
            self.journal.consume(key)
        if not fut.done():
            fut.set_result(record)

    def _fail(self, st: _LoopState, keys: list[str], exc: BaseException) -> None:
        for key in keys:
            fut = st.waiters.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_exception(exc)

    # -- the open batch ----------------------------------------------------------------------
    def _enqueue(self, st: _LoopState, key: str, request: ChatRequest) -> None:
        line: dict[str, Any] = {"custom_id": key, "method": "POST", "url": CHAT_URL}
        line["body"] = chat_body(self.config, request)
        try:
            data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
        except UnicodeEncodeError:
            from ..core.text import clean_json

            data = (json.dumps(clean_json(line), ensure_ascii=False) + "\n").encode()
        s = self.settings
        if st.queue and st.queued_bytes + len(data) > s.max_bytes:
            self._flush(st)
        now = time.monotonic()
        if not st.queue:
            st.first_at = now
        st.queue.append((key, data))
        st.queued_bytes += len(data)
        st.last_at = now
        if len(st.queue) >= s.max_requests:
            self._flush(st)
        elif st.timer is None:
            st.timer = asyncio.get_running_loop().call_later(s.flush_idle_s, self._tick, st)

    def _tick(self, st: _LoopState) -> None:
        st.timer = None
        if not st.queue:
            return
        s = self.settings
        now = time.monotonic()
        due = min(st.last_at + s.flush_idle_s, st.first_at + s.max_wait_s)
        if now >= due - 1e-3:
            self._flush(st)
        else:
            st.timer = asyncio.get_running_loop().call_later(due - now, self._tick, st)

    def _flush(self, st: _LoopState) -> None:
        entries, st.queue, st.queued_bytes = st.queue, [], 0
        if st.timer is not None:
            st.timer.cancel()
            st.timer = None
        task = asyncio.get_running_loop().create_task(self._submit(st, entries))
        st.submits.add(task)
        task.add_done_callback(st.submits.discard)

    async def _submit(self, st: _LoopState, entries: list[tuple[str, bytes]]) -> None:
        keys = [k for k, _ in entries]
        try:
            client = self._client()
            name = f"trajsynth-{self.role or 'batch'}-{keys[0][:12]}-{len(keys)}.jsonl"
            upload = await self._call(
                "upload the batch file",
                lambda: client.files.create(
                    file=(name, b"".join(d for _, d in entries), "application/jsonl"),
                    purpose="batch",
                ),
            )
            if self.journal is not None:
                self.journal.uploaded(upload.id, keys)
            batch_id = await self._create(upload.id)
            if self.journal is not None:
                self.journal.submitted(upload.id, batch_id)
            else:
                st.batch_keys[batch_id] = keys
        except BaseException as exc:  # every waiting request gets the failure
            self._fail(st, keys, exc if isinstance(exc, Exception) else EndpointError(str(exc)))
            if not isinstance(exc, Exception):
                raise
            return
        self.stats["batches_submitted"] += 1
        self.stats["requests_batched"] += len(keys)
        self._poll(st, batch_id)

    async def _create(self, file_id: str) -> str:
        """Create the batch of ``file_id`` once: a failed create is retried only after
        checking that the server did not create it anyway."""
        client = self._client().with_options(max_retries=0)
        tries = 0
        while True:
            try:
                batch = await self._call(
                    "create the batch",
                    lambda: client.batches.create(
                        input_file_id=file_id,
                        endpoint=CHAT_URL,
                        completion_window=self.settings.completion_window,
                        metadata={"trajsynth_role": self.role or "batch"},
                    ),
                )
                return str(batch.id)
            except FatalEndpointError:
                raise
            except EndpointError:
                tries += 1
                existing = await self._find_batch(file_id)
                if existing is not None:
                    return existing
                if tries > self.config.max_retries:
                    raise
                await asyncio.sleep(min(self.config.backoff_max_s, self.config.backoff_base_s))

    async def _find_batch(self, file_id: str) -> str | None:
        """The batch the server made from ``file_id``, if any (newest first)."""
        client = self._client()
        page = await self._call("list batches", lambda: client.batches.list(limit=100))
        async for batch in page:
            if batch.input_file_id == file_id:
                return str(batch.id)
        return None

    async def _recover(self, st: _LoopState) -> None:
        """Files a killed run uploaded without recording their batch: adopt the batch the
        server made from each, or submit it now (its first submission)."""
        assert self.journal is not None
        for file_id in self.journal.unsubmitted():
            batch_id = await self._find_batch(file_id)
            if batch_id is not None:
                self.stats["batches_adopted"] += 1
            else:
                batch_id = await self._create(file_id)
                self.stats["batches_submitted"] += 1
            self.journal.submitted(file_id, batch_id)

    # -- polling and collecting --------------------------------------------------------------
    def _poll(self, st: _LoopState, batch_id: str) -> None:
        if batch_id in st.pollers:
            return
        task = asyncio.get_running_loop().create_task(self._collect(st, batch_id))
        st.pollers[batch_id] = task

    async def _collect(self, st: _LoopState, batch_id: str) -> None:
        keys = (
            self.journal.keys_of_batch.get(batch_id, [])
            if self.journal is not None
            else st.batch_keys.pop(batch_id, [])
        )
        try:
            client = self._client()
            failures = 0
            while True:
                try:
                    batch = await self._call(
                        "poll the batch", lambda: client.batches.retrieve(batch_id)
                    )
                except FatalEndpointError:
                    raise
                except EndpointError:
                    # a batch runs for hours: a failed poll is tried again, not the batch
                    failures += 1
                    if failures > self.config.max_retries:
                        raise
                    await asyncio.sleep(self.settings.poll_s)
                    continue
                failures = 0
                if batch.status in TERMINAL:
                    break
                await asyncio.sleep(self.settings.poll_s)
            records: dict[str, dict[str, Any]] = {}
            for file_id in (batch.error_file_id, batch.output_file_id):
                if not file_id:
                    continue
                content = await self._call(
                    "download the batch results",
                    functools.partial(client.files.content, file_id),
                )
                for line in content.content.splitlines():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and rec.get("custom_id") is not None:
                        records[str(rec["custom_id"])] = rec
            status = str(batch.status)
            if self.journal is not None:
                self.journal.collected(batch_id, status, records)
            self.stats["batches_collected"] += 1
            errors = getattr(batch, "errors", None)
            reason = ""
            if errors is not None and getattr(errors, "data", None):
                reason = f": {errors.data[0].message}"
            for key in keys:
                rec = records.get(key)
                if rec is None:
                    rec = {"error_message": f"the batch ended {status}{reason} without an "
                           "answer for this request"}  # fmt: skip
                self._resolve(st, key, {**rec, "batch": batch_id})
        except Exception as exc:
            self._fail(st, keys, exc)
        finally:
            st.pollers.pop(batch_id, None)

    # -- plumbing ----------------------------------------------------------------------------
    def _state(self, loop: asyncio.AbstractEventLoop) -> _LoopState:
        st = self._states.get(loop)
        if st is None:
            st = self._states[loop] = _LoopState()
        return st

    def _where(self) -> str:
        return f"{self.config.base_url or 'openai'} ({self.config.model})"

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        table = _CLIENTS.setdefault(loop, {})
        cfg = self.config
        key = (cfg.base_url, hash(self._api_key), cfg.timeout_s)
        client = table.get(key)
        if client is None:
            import openai

            from .openai_backend import _http_module

            timeout = _http_module().Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
            client = table[key] = openai.AsyncOpenAI(
                base_url=cfg.base_url,
                api_key=self._api_key,
                max_retries=cfg.max_retries,
                timeout=timeout,
                http_client=openai.DefaultAsyncHttpxClient(timeout=timeout),
            )
        return client

    async def _call(self, what: str, send: Callable[[], Awaitable[T]]) -> T:
        """One control-plane call (the SDK retries transient failures): errors as
        :class:`EndpointError`, or :class:`FatalEndpointError` for those every call would
        meet (bad key, unknown route, an endpoint never reached)."""
        import openai

        try:
            result = await send()
        except openai.APIStatusError as exc:
            message = f"{self._where()}: cannot {what}: HTTP {exc.status_code}: {exc.message}"
            if exc.status_code in (401, 403):
                raise FatalEndpointError(
                    message, hint="check api_key / api_key_env in the role config"
                ) from None
            if exc.status_code == 404 and what != "poll the batch":
                raise FatalEndpointError(
                    message, hint="does the endpoint serve /v1/files and /v1/batches?"
                ) from None
            raise EndpointError(message) from None
        except openai.APIConnectionError as exc:
            if not self._ever_ok:
                raise FatalEndpointError(
                    f"cannot reach {self.config.base_url or 'the OpenAI API'}: {exc}",
                    hint="is the server running? check `base_url` in the role config",
                ) from None
            raise EndpointError(f"{self._where()}: cannot {what}: {exc}") from None
        self._ever_ok = True
        return result

    async def aclose(self) -> None:
        await aclose_batch_clients()


async def aclose_batch_clients() -> None:
    """Close the batch API clients made on the running event loop."""
    loop = asyncio.get_running_loop()
    for client in _CLIENTS.pop(loop, {}).values():
        await client.close()
