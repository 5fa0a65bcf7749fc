"""``backend: openai`` — any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, llama.cpp,
Ollama, ``trajsynth serve``) through the official ``openai`` package (``AsyncOpenAI``).

For each request:

1. take a slot from the endpoint's adaptive limiter (``trajsynth.llm.limiter``; one per
   (base_url, model), shared by every role). Waiting here is never a failure;
2. send it with the SDK's own retries switched off (``max_retries=0``) — retrying is done
   here, by error class:

   - 429: tell the limiter (which slows this role when it is being rate limited, see
     ``limiter.py``), give the slot back, wait ``retry-after``, retry; at most
     ``max_rate_limit_retries`` times, then :class:`RateLimited`;
   - 5xx, connection errors, timeouts, unreadable bodies: exponential backoff with full jitter
     (``backoff_base_s`` doubling up to ``backoff_max_s``), at most ``max_retries`` times;
   - 401/403/404: :class:`FatalEndpointError` at once (the key or the model is wrong, and
     every request would fail alike);
   - other 4xx: fail this request with the server's message (recorded on its row);
   - an endpoint that never answered any request and refuses connections after the retries:
     :class:`FatalEndpointError` ("cannot reach ...");
   - retries exhausted (5xx, connection errors, timeouts, bodies; 429s): an
     :class:`~trajsynth.core.errors.InfraError` (:class:`RateLimited` for 429s), the endpoint's
     failure and not the model's, which rollout stages drop and count instead of recording;
   - every attempt first passes the role's circuit breaker (``limiter.CircuitBreaker``:
     ``circuit_failures`` consecutive failed attempts pause the role ``circuit_pause_s``, then
     one probe; still failing, attempts fail fast with :class:`CircuitOpen`);
3. hedge a slow attempt (``hedge_budget``, ``hedge_after_s``): an attempt still unanswered
   after the p95 of the role's recent answered latencies (at least ``hedge_min_s``, at most
   half of ``timeout_s``) is sent once more, and once more again if both copies stay
   unanswered as long (three copies at most); the first copy to finish decides and the
   others are cancelled. A hung request then costs about that delay instead of
   ``timeout_s``. Duplicates take no limiter slot; at most ``hedge_budget`` of the requests
   sent are duplicates (Dean & Barroso, "The Tail at Scale", CACM 2013). Every copy counts
   in ``attempts`` and the duplicates in ``hedges``. trajsynth seeds its requests, so on a
   server that honours seeds the copies are the same sample;
4. ``n > 1``: ask the server for ``n`` choices in one request; when it returns fewer
   (servers without ``n``), send the missing ones as separate requests (seed + i when a seed
   is set) and remember that this endpoint needs fan-out.

The HTTP connection pool keeps ``max_concurrency`` connections alive (the SDK's default keeps
100, so at higher concurrency every request above 100 opens a new connection: measured as
the largest client cost in ``bench/llm_throughput.py``). The API key comes from the role
config or the environment and is never logged, cached or written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import email.utils
import functools
import inspect
import json
import random
import time
import weakref
from typing import Any

from ..core.errors import CircuitOpen, ConfigError, EndpointError, InfraError, RateLimited
from ..core.text import clean_json
from .base import (
    Backend,
    BackendReply,
    ChatRequest,
    FatalEndpointError,
    RawChoice,
    RoleConfig,
    TokenLogprob,
    Usage,
)
from .limiter import AIMDLimiter, CircuitBreaker

__all__ = [
    "OpenAIBackend",
    "aclose_http_clients",
    "chat_body",
    "reply_from_json",
    "retry_after_seconds",
]

# per event loop: (base_url, model) -> limiter, and (base_url, key hash, pool) -> SDK client
_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], AIMDLimiter]]
_LIMITERS = weakref.WeakKeyDictionary()
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]]
_CLIENTS = weakref.WeakKeyDictionary()
# per event loop: (base_url, model, role) -> circuit breaker
_BREAKERS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str, str], CircuitBreaker]
]
_BREAKERS = weakref.WeakKeyDictionary()


def retry_after_seconds(headers: Any, default: float) -> float:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    if headers is None:
        return default
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return default
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return default


def chat_body(config: RoleConfig, request: ChatRequest) -> dict[str, Any]:
    """The ``/chat/completions`` body of ``request`` for the role's model (shared with the
    batch backend, whose batch lines carry the same body)."""
    body: dict[str, Any] = {"model": config.model, "messages": request.messages}
    if request.tools:
        body["tools"] = request.tools
    if request.n != 1:
        body["n"] = request.n
    for name in ("temperature", "top_p", "max_tokens", "seed", "stop"):
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = request.top_logprobs
    body.update(config.extra_body)
    if request.extra_body:
        body.update(request.extra_body)
    if config.send_metadata and request.metadata is not None:
        body["trajsynth_metadata"] = request.metadata
    return body


class _Tally:
    """HTTP requests one call sent: all of them (``attempts``), and of them those cut by the
    timeout and the hedged duplicates. A reply carries them as fields, a failure as
    attributes, so failed calls are counted too."""

    FIELDS = ("attempts", "timeouts", "hedges")
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.attempts = self.timeouts = self.hedges = 0

    def add(self, sent: Any) -> None:
        """Add what a sub-request (a reply, or a failure carrying counts) sent."""
        for name in self.FIELDS:
            setattr(self, name, getattr(self, name) + int(getattr(sent, name, 0)))

    def onto(self, target: Any) -> Any:
        """Write the counts onto a reply or an exception, and return it."""
        for name in self.FIELDS:
            setattr(target, name, getattr(self, name))
        return target


class _Retry(Exception):
    """Internal: this attempt failed in a way worth retrying."""

    def __init__(self, kind: str, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # rate_limited | transient | connect
        self.message = message
        self.wait = wait
        self.timed_out = False


class _Hedger:
    """Recent answered latencies of one backend, and its hedging budget.

    ``delay()`` is how long the copies of a request may all go unanswered before one more is
    sent: ``hedge_after_s``, or the p95 of the last 200 answered requests (Dean & Barroso's
    rule: about 5% of requests of a healthy endpoint get a duplicate) and at least
    ``hedge_min_s``; never more than half of ``timeout_s``; none before 10 answers.
    ``take()`` spends one duplicate from the budget: duplicates stay under ``hedge_budget`` ×
    requests sent. At most ``COPIES`` copies of one request are in flight.
    """

    WINDOW, MIN_SAMPLES, COPIES = 200, 10, 3

    def __init__(self, config: RoleConfig) -> None:
        self.config = config
        self.samples: collections.deque[float] = collections.deque(maxlen=self.WINDOW)
        self.sent = self.hedges = 0
        self._p95: float | None = None
        self._fresh = 0

    def record(self, seconds: float) -> None:
        self.samples.append(seconds)
        self._fresh += 1
        if self._p95 is None or self._fresh >= 16:  # re-sorted every 16 answers, not each
            ordered = sorted(self.samples)
            self._p95 = ordered[int(0.95 * (len(ordered) - 1))]
            self._fresh = 0

    @property
    def enabled(self) -> bool:
        return self.config.hedge_budget > 0

    def delay(self) -> float | None:
        cfg = self.config
        if not self.enabled:
            return None
        if cfg.hedge_after_s is not None:
            after = cfg.hedge_after_s
        elif self._p95 is None or len(self.samples) < self.MIN_SAMPLES:
            return None
        else:
            after = max(cfg.hedge_min_s, self._p95)
        return min(after, cfg.timeout_s / 2)

    def take(self) -> bool:
        if self.hedges + 1 > max(1.0, self.config.hedge_budget * self.sent):
            return False
        self.hedges += 1
        return True


class OpenAIBackend(Backend):
    """Requests to one OpenAI-compatible endpoint (see the module docstring)."""

    name = "openai"

    def __init__(self, config: RoleConfig, role: str = "") -> None:
        if not config.base_url and not config.model:
            raise EndpointError("openai backend: set `model` (and `base_url` for other servers)")
        self.config = config
        self.role = role  # the limiter slows this role, not the endpoint, on 429s
        self.base_url = config.base_url
        self.model = config.model
        self._api_key = config.resolved_api_key()
        self._native_n = config.native_n
        self._ever_ok = False
        #: attempts by outcome, for tests and the bench (process-wide for this backend)
        self.stats = dict.fromkeys(
            ("sent", "ok", "rate_limited", "transient", "timed_out", "client_error", "hedged"),
            0,
        )
        self._hedger = _Hedger(config)

    # -- per-loop state --------------------------------------------------------------------
    def _limiter(self) -> AIMDLimiter:
        loop = asyncio.get_running_loop()
        table = _LIMITERS.setdefault(loop, {})
        key = (self.base_url or "", self.model)
        lim = table.get(key)
        if lim is None:
            lim = table[key] = AIMDLimiter(
                self.config.max_concurrency, floor=self.config.min_concurrency
            )
        return lim

    def _breaker(self) -> CircuitBreaker:
        loop = asyncio.get_running_loop()
        table = _BREAKERS.setdefault(loop, {})
        key = (self.base_url or "", self.model, self.role)
        breaker = table.get(key)
        if breaker is None:
            breaker = table[key] = CircuitBreaker(
                self.config.circuit_failures,
                self.config.circuit_pause_s,
                where=self._where(),
                role=self.role,
            )
        return breaker

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        table = _CLIENTS.setdefault(loop, {})
        cfg = self.config
        key = (self.base_url, hash(self._api_key), cfg.max_concurrency, cfg.timeout_s)
        client = table.get(key)
        if client is None:
            import openai

            http_mod = _http_module()
            # the limiter bounds what is in flight; the pool must never make a request wait
            # (a wait there would count against the timeout), so it is not capped below it
            limits = http_mod.Limits(
                max_connections=_UNCAPPED,
                max_keepalive_connections=cfg.max_concurrency,
                keepalive_expiry=30.0,
            )
            timeout = http_mod.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s)
            if _use_aiohttp(cfg.http_client):
                http = openai.DefaultAioHttpClient(limits=limits, timeout=timeout)
            else:
                http = openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
            if not table:
                _close_at_exit(loop)
            client = table[key] = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                max_retries=0,
                http_client=http,
                timeout=timeout,
            )
        return client

    # -- one logical request -----------------------------------------------------------------
    async def complete(self, request: ChatRequest) -> BackendReply:
        n = request.n
        if n == 1 or self._native_n is not False:
            reply = await self._with_retries(request)
            if len(reply.choices) >= n or n == 1:
                if n > 1 and self._native_n is None:
                    self._native_n = True
                reply.choices = reply.choices[:n]
                return reply
            # the server ignored n: fan out the rest from now on
            self._native_n = False
            got = reply
        else:
            got = BackendReply(choices=[], usage=Usage(), model=self.model)
        missing = n - len(got.choices)
        start = len(got.choices)
        subs = [
            request.model_copy(
                update={"n": 1, "seed": None if request.seed is None else request.seed + start + i}
            )
            for i in range(missing)
        ]
        results = await asyncio.gather(
            *(self._with_retries(s) for s in subs), return_exceptions=True
        )
        choices = list(got.choices)
        usage, partial = got.usage, list(got.partial_errors)
        tally = _Tally()
        tally.add(got)
        infra = True
        for res in results:
            if isinstance(res, FatalEndpointError):
                raise res
            if isinstance(res, BaseException):
                if not isinstance(res, EndpointError):
                    raise res
                partial.append(str(res))
                infra = infra and isinstance(res, InfraError)
                tally.add(res)
                continue
            choices.extend(res.choices[:1])
            usage = usage + res.usage
            tally.add(res)
        if not choices:
            error = InfraError if partial and infra else EndpointError
            raise tally.onto(error(partial[0] if partial else "no choices returned"))
        return tally.onto(
            BackendReply(
                choices=choices, usage=usage, model=got.model or self.model, partial_errors=partial
            )
        )

    async def _with_retries(self, request: ChatRequest) -> BackendReply:
        cfg = self.config
        limiter = self._limiter()
        breaker = self._breaker()
        transient = rate_limited = 0
        tally = _Tally()
        role = self.role
        while True:
            try:
                probe = await breaker.before()  # waits out a pause; raises when failing fast
            except CircuitOpen as exc:
                raise tally.onto(exc) from None
            sent_at = await limiter.acquire(role)
            try:
                reply = await self._send_hedged(request, tally)
            except _Retry as retry:
                limiter.release(role)
                if retry.kind == "rate_limited":
                    breaker.on_answer()  # a 429 is an answer: the limiter slows the role
                    rate_limited += 1
                    limiter.on_rate_limited(retry.wait or cfg.backoff_base_s, sent_at, role)
                    if rate_limited > cfg.max_rate_limit_retries:
                        raise tally.onto(
                            RateLimited(
                                f"{self._where()}: still rate limited (429) after "
                                f"{tally.attempts} attempts: {retry.message}"
                            )
                        ) from None
                    await asyncio.sleep(retry.wait or cfg.backoff_base_s)
                    continue
                transient += 1
                tally.timeouts += retry.timed_out
                breaker.on_failure(retry.message, probe=probe)
                if transient > cfg.max_retries:
                    if retry.kind == "connect" and not self._ever_ok:
                        raise FatalEndpointError(
                            f"cannot reach {self.base_url or 'the OpenAI API'}: {retry.message}",
                            hint="is the server running? check `base_url` in the role config",
                        ) from None
                    raise tally.onto(
                        InfraError(
                            f"{self._where()}: failed after {tally.attempts} attempts: "
                            f"{retry.message}"
                        )
                    ) from None
                cap = min(cfg.backoff_max_s, cfg.backoff_base_s * (2 ** (transient - 1)))
                await asyncio.sleep(random.uniform(0.0, cap))
                continue
            except EndpointError as exc:
                limiter.release(role)
                breaker.on_answer()  # a 4xx is an answer (the request was refused)
                raise tally.onto(exc) from None
            except BaseException:
                limiter.release(role)
                breaker.on_abandon(probe=probe)
                raise
            limiter.release(role)
            limiter.on_success(role)
            breaker.on_answer()
            self._ever_ok = True
            return tally.onto(reply)

    async def _send_hedged(self, request: ChatRequest, tally: _Tally) -> BackendReply:
        """One attempt: ``_send``, plus a duplicate each time the copies in flight have all
        been unanswered for another hedging delay (see :class:`_Hedger`; at most
        ``_Hedger.COPIES`` copies in all). The delay is re-read while waiting, so a request
        sent before enough answers came back to know what slow is still gets hedged. The
        first copy to finish decides, success or failure, and the others are cancelled: a
        duplicate failing fast while the first hangs is retried at once instead of waiting
        the hang out."""
        hedger = self._hedger
        hedger.sent += 1
        tally.attempts += 1
        start = time.monotonic()
        if not hedger.enabled:
            reply = await self._send(request)
            hedger.record(time.monotonic() - start)
            return reply
        copies = [asyncio.ensure_future(self._send(request))]
        last = start  # when the newest copy was sent
        try:
            while True:
                after = hedger.delay()
                waited = time.monotonic() - last
                wait: float | None
                if len(copies) >= hedger.COPIES:
                    wait = None  # no more duplicates: wait for a copy to finish
                elif after is None:  # too few answers yet: look again shortly
                    wait = self.config.hedge_min_s
                elif waited < after:
                    wait = after - waited
                elif hedger.take():
                    self.stats["hedged"] += 1
                    hedger.sent += 1
                    tally.attempts += 1
                    tally.hedges += 1
                    copies.append(asyncio.ensure_future(self._send(request)))
                    last = time.monotonic()
                    continue
                else:  # over budget: no duplicate
                    wait = None
                done, _ = await asyncio.wait(
                    copies, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
                if done:
                    task = next(t for t in copies if t in done)  # the earliest sent, on a tie
                    reply = task.result()  # raises its failure
                    if task is copies[0]:
                        hedger.record(time.monotonic() - start)
                    return reply
        finally:
            for task in copies:
                if not task.done():
                    task.cancel()
                elif not task.cancelled():
                    task.exception()  # a loser's failure is expected: not an unretrieved one

    def _where(self) -> str:
        return f"{self.base_url or 'openai'} ({self.model})"

    async def _send(self, request: ChatRequest) -> BackendReply:
        """One HTTP request; raises _Retry for retryable failures, EndpointError otherwise."""
        import openai

        body = chat_body(self.config, request)
        self.stats["sent"] += 1
        try:
            # the SDK's generic `post` (its documented way to call any endpoint): same HTTP
            # client, auth and error classes. The body is serialized once, here, and sent as
            # bytes where the SDK allows it: the typed `create` transforms every field and
            # `post(body=...)` deep-copies the body, which cost more CPU than our whole client
            # at 512 requests in flight (bench/llm_throughput.py)
            client = self._client()
            if _post_takes_content(client):
                response = await client.post(
                    "/chat/completions",
                    content=_body_bytes(body),
                    cast_to=_http_module().Response,
                    options=_JSON_OPTIONS,
                )
            else:
                response = await client.post(
                    "/chat/completions", body=body, cast_to=_http_module().Response
                )
            data = json.loads(response.content)
        except openai.RateLimitError as exc:
            self.stats["rate_limited"] += 1
            wait = retry_after_seconds(
                getattr(exc.response, "headers", None), self.config.backoff_base_s
            )
            raise _Retry("rate_limited", _server_message(exc), wait) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status >= 500 or status in (408, 409):
                self.stats["transient"] += 1
                raise _Retry("transient", f"HTTP {status}: {_server_message(exc)}") from None
            self.stats["client_error"] += 1
            message = f"{self._where()}: HTTP {status}: {_server_message(exc)}"
            if status in (401, 403):
                raise FatalEndpointError(
                    message, hint="check api_key / api_key_env in the role config"
                ) from None
            if status == 404:
                raise FatalEndpointError(
                    message, hint="check `model` and `base_url` in the role config"
                ) from None
            raise EndpointError(message) from None
        except openai.APIConnectionError as exc:  # also APITimeoutError
            self.stats["transient"] += 1
            root = _root_cause(exc)
            if _is_connect_failure(exc):
                raise _Retry("connect", f"cannot connect: {type(root).__name__}: {root}") from None
            if isinstance(exc, openai.APITimeoutError):
                self.stats["timed_out"] += 1
                retry = _Retry("transient", f"timed out after {self.config.timeout_s:g}s")
                retry.timed_out = True
                raise retry from None
            raise _Retry("transient", f"connection error: {type(root).__name__}: {root}") from None
        except (openai.APIResponseValidationError, ValueError) as exc:
            self.stats["transient"] += 1
            raise _Retry("transient", f"unreadable response body: {exc}"[:300]) from None
        try:
            reply = reply_from_json(data, self.model)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            self.stats["transient"] += 1
            raise _Retry("transient", f"malformed completion: {exc}"[:300]) from None
        self.stats["ok"] += 1
        return reply

    async def aclose(self) -> None:
        await aclose_http_clients()


async def aclose_http_clients() -> None:
    """Close every HTTP client (connection pool) made on the running event loop.

    Call it before leaving a loop you made with ``asyncio.run``; the shared loop of a
    pipeline's stages is closed for you at exit.
    """
    loop = asyncio.get_running_loop()
    for client in _CLIENTS.pop(loop, {}).values():
        await client.close()


def _close_at_exit(loop: asyncio.AbstractEventLoop) -> None:
    """Close the loop's clients at interpreter exit if the loop is still running then (the
    stages' shared loop lives in a daemon thread until exit)."""
    import atexit

    def close() -> None:
        if loop.is_running() and not loop.is_closed():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(aclose_http_clients(), loop).result(5)

    atexit.register(close)


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return (getattr(exc, "message", None) or str(exc))[:500]


def _causes(exc: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def _root_cause(exc: BaseException) -> BaseException:
    return _causes(exc)[-1]


def _is_connect_failure(exc: BaseException) -> bool:
    """The TCP connection could not be made (refused, unresolvable, unreachable) — as
    opposed to a request that was sent and timed out. The aiohttp transport reports refused
    connections as connect *timeouts*, so the cause chain decides."""
    return any(
        isinstance(c, (ConnectionRefusedError, ConnectionAbortedError))
        or type(c).__name__ in ("ClientConnectorError", "ConnectError", "gaierror")
        for c in _causes(exc)
    )


def _use_aiohttp(choice: str) -> bool:
    """aiohttp as the SDK's transport when installed (the SDK's own advice for concurrency:
    measured 2–4× less client CPU per request than its httpx default at 64–512 in flight)."""
    import openai

    if choice == "httpx":
        return False
    try:
        import aiohttp  # noqa: F401

        openai.DefaultAioHttpClient  # noqa: B018 - the SDK supports it (openai >= 1.7x)
    except (ImportError, AttributeError):
        if choice == "aiohttp":
            raise ConfigError(
                "http_client: aiohttp is not installed", hint="pip install 'openai[aiohttp]'"
            ) from None
        return False
    return True


_JSON_OPTIONS: Any = {"headers": {"Content-Type": "application/json"}}
_UNCAPPED = 1_000_000  # connections: the AIMD limiter is the only cap


@functools.cache
def _http_module() -> Any:
    """The HTTP library the installed SDK is built on (httpx2 in openai 3, httpx before)."""
    import openai._base_client as base

    # openai < 3 has httpx (the installed SDK's stubs name httpx2 only)
    return getattr(base, "httpx2", None) or base.httpx  # type: ignore[attr-defined]


def _post_takes_content(client: Any) -> bool:
    return _POST_CONTENT.setdefault(
        type(client), "content" in inspect.signature(client.post).parameters
    )


_POST_CONTENT: dict[type, bool] = {}


def _body_bytes(body: dict[str, Any]) -> bytes:
    """The request body as UTF-8 JSON; text that has no UTF-8 form (a lone surrogate in a
    message taken from imported data) is cleaned rather than failing every attempt."""
    try:
        return json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(clean_json(body), ensure_ascii=False).encode()


def reply_from_json(data: Any, model: str) -> BackendReply:
    """A chat.completion JSON object → BackendReply (tolerant of servers that omit fields)."""
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("choices"), list)
        or not data["choices"]
    ):
        raise ValueError("no choices in the response")
    choices = []
    for ch in data["choices"]:
        msg = ch.get("message") or {}
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        calls = []
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                args = fn.get("arguments")
                calls.append(
                    {
                        "id": str(tc.get("id") or ""),
                        "name": str(fn.get("name") or ""),
                        "arguments": args if isinstance(args, str) else json.dumps(args or {}),
                    }
                )
        logprobs = None
        lp = ch.get("logprobs")
        if isinstance(lp, dict) and isinstance(lp.get("content"), list):
            logprobs = [
                TokenLogprob(
                    token=t["token"],
                    logprob=float(t["logprob"]),
                    top=[(a["token"], float(a["logprob"])) for a in t.get("top_logprobs") or []],
                )
                for t in lp["content"]
            ]
        content = msg.get("content")
        choices.append(
            RawChoice(
                content=content if isinstance(content, str) else None,
                reasoning=reasoning if isinstance(reasoning, str) else None,
                tool_calls=calls,
                finish_reason=ch.get("finish_reason"),
                logprobs=logprobs,
            )
        )
    usage = data.get("usage") or {}
    return BackendReply(
        choices=choices,
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
        model=str(data.get("model") or model),
    )
