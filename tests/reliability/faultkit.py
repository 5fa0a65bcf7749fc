"""Tools of the reliability suite, shared by ``tests/reliability`` and ``bench/reliability.py``.

- :func:`fuzz_outputs` — seeded model outputs meant to break a tool-call parser: random
  mixtures of tags, brackets, quotes, escapes (surrogate halves included), near misses of
  valid calls in every format, pathological runs (``<tool_call>`` + 40,000 ``{``, deep lists,
  thousands of tags) and native calls with malformed or deeply nested arguments;
- :func:`long_outputs` — long adversarial outputs up to the parser's 200,000-character cap:
  backtick fences followed by letters, newlines or spaces, unclosed ``<think>`` and
  ``<tool_call>`` tags repeated, deep brackets, long pythonic calls, repeated near-JSON,
  quotes, escapes, surrogates;
- :func:`fuzz_parser` — runs them through ``parse_output``: crashes and slow outputs (each
  parse stopped by :func:`cpu_limit` if it runs away);
- :class:`FaultProxy` — an OpenAI-compatible proxy on 127.0.0.1 in front of a real endpoint
  (``trajsynth serve``) that answers a seeded fraction of requests with a fault instead:
  ``429`` (with or without ``retry-after``), ``500``, ``hang`` (no answer until ``hang_s``),
  ``garbage`` (a truncated body) or ``surrogate`` (the real answer with a JSON-escaped lone
  surrogate appended to its content). Bounded: it serves at most ``max_requests`` requests
  and stops when its ``with`` block ends;
- :func:`corrupt_file` — overwrite bytes in the middle of a file, keeping its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------
# fuzzed model outputs
# --------------------------------------------------------------------------------------

_TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "```", "```json\n", "\n```"]
_ATOMS = [
    "{", "}", "[", "]", "(", ")", ",", ":", "=", '"', "'", "\\", "\\\\", "\n", " ",
    '"name"', '"arguments"', '"parameters"', '"function"', "null", "true", "1e999", "-0",
    "\\ud83d", "\\ude00", "\\ud83d\\ude00", "\\u0000", "\ud83d", "\x00", "\ufffd", "😀", "é",
    "f(", "a=", "math.sqrt", "get_weather", "None", "True", "...", "**kw", "*a",
]  # fmt: skip
_CALLS = [
    ("get_weather", {"city": "Paris", "days": 3}),
    ("say", {"text": "hi \ud83d\ude00 there", "loud": True}),
    ("math.sqrt", {"x": 2.5}),
    ("search", {"q": "a\\b \"quoted\" 'single'", "filters": {"tags": ["x", "y"], "n": None}}),
]


def _render(calls: list[tuple[str, dict[str, Any]]], fmt: str) -> str:
    from trajsynth.llm.parsing import format_hermes, format_json_list, format_pythonic

    if fmt == "hermes":
        return format_hermes(calls)
    if fmt == "json":
        return format_json_list(calls)
    return format_pythonic(calls)


def _near_miss(text: str, rnd: random.Random) -> str:
    n = len(text)
    i, j = sorted((rnd.randint(0, n), rnd.randint(0, n)))
    kind = rnd.randrange(7)
    if kind == 0:
        return text[:i]
    if kind == 1:
        return text[:i] + text[i + rnd.randint(1, 6) :]
    if kind == 2:
        return text[:i] + rnd.choice(_ATOMS) * rnd.randint(1, 3) + text[i:]
    if kind == 3:
        return text.replace('"', "'")
    if kind == 4:
        return text[:i] + rnd.choice(_TAGS) + text[i:j] + rnd.choice(_TAGS) + text[j:]
    if kind == 5:  # an escaped emoji pair in near-JSON (json-repair splits it)
        return text.replace('"}', '\\ud83d\\ude00",}', 1)
    return text * rnd.randint(2, 20)


def _pathological(rnd: random.Random) -> str:
    n = rnd.choices([1_000, 10_000, 40_000, 100_000], weights=[4, 3, 2, 1])[0]
    unit = rnd.choice(
        ["{", "[", "(", "[f(", '{"a":', '{"name": "f", "arguments": ', "<think>", "<tool_call>",
         "<tool_call>{", "</tool_call>", '"', "\\", "'", "a=(", "```", "\ud83d", "\\ud83d", ",",
         '[{"name": "f", "arguments": {}}, ', "<tool_call>{}</tool_call>"]
    )  # fmt: skip
    heads = ["", "<tool_call>", "[", "```json\n", "<think>", '{"name": "f", "arguments": ']
    head = rnd.choice(heads)
    reps = max(1, n // len(unit))
    return head + unit * reps + rnd.choice(["", "}" * rnd.randint(0, 50), "</tool_call>"])


def fuzz_outputs(count: int, seed: int = 0) -> Iterator[tuple[str | None, list[dict] | None]]:
    """``count`` seeded (content, native_calls) pairs (see the module docstring)."""
    rnd = random.Random(seed)
    for k in range(count):
        kind = k % 5
        native = None
        if kind == 0:
            text = "".join(
                rnd.choice(_ATOMS + _TAGS) * rnd.choice([1, 1, 1, 2, 5, 50])
                for _ in range(rnd.randint(1, 120))
            )
        elif kind == 1:
            calls = rnd.sample(_CALLS, rnd.randint(1, len(_CALLS)))
            text = _render(calls, rnd.choice(["hermes", "json", "pythonic"]))
            for _ in range(rnd.randint(1, 3)):
                text = _near_miss(text, rnd)
        elif kind == 2:
            text = _pathological(rnd)
        elif kind == 3:
            text = "".join(chr(rnd.randint(0, 0x2FFFF)) for _ in range(rnd.randint(0, 400)))
        else:
            text = rnd.choice([None, "", "Let me check.", "\ud83d"])
            depth = rnd.choice([1, 10, 100, 5_000, 200_000])
            native = [
                {"id": "c0", "name": "f", "arguments": '{"a": ' + "[" * depth + "]" * depth + "}"},
                {"id": "c1", "name": "g", "arguments": '{"b": "\ud83d"}'},
                {"id": "", "name": rnd.choice(["", "h", "\x00"]), "arguments": rnd.choice(_ATOMS)},
            ]
        yield text, native


#: long adversarial outputs: name → one repeated unit (or a head, a unit and a tail), built
#: to the length asked; each one is a shape that made some parser (a backtracking pattern,
#: a repair library, a recursive reader, a pure-Python scan) slow or deep
_LONG: dict[str, tuple[str, str, str]] = {
    "fence + letters": ("```", "x", ""),  # issue 23: the fence pattern's backtracking
    "fence + newlines": ("```", "\n", ""),
    "fence + spaces": ("```", " ", ""),
    "fence json + deep list": ("```json\n", "[", "\n```"),
    "fence + letters, closed": ("```", "x", "```"),
    "fences repeated": ("", "```json\n", ""),
    "unclosed <think> repeated": ("", "<think>", ""),
    "<think> + text": ("<think>", "a", ""),
    "<think></think> repeated": ("", "<think></think>", ""),
    "<think> + <tool_call> repeated": ("", "<think><tool_call>", ""),
    "unclosed <tool_call> repeated": ("", "<tool_call>", ""),
    "<tool_call>{ repeated": ("", "<tool_call>{", ""),
    "<tool_call> + deep object": ("<tool_call>", "{", ""),
    "<tool_call> + repair bomb": ("<tool_call>", '1]{ "', ""),
    "empty <tool_call> blocks": ("", "<tool_call></tool_call>", ""),
    "near-JSON <tool_call> blocks": (
        "",
        "<tool_call>{'name': 'f', 'arguments': {'a': 1,},}</tool_call>",
        "",
    ),
    "deep list": ("", "[", ""),
    "deep object": ("", '{"a":', ""),
    "deep parentheses": ("", "(", ""),
    "nested pythonic calls": ("", "[f(", ""),
    "balanced deep list": ("", "[", "]"),  # the tail is repeated too (see long_outputs)
    "long pythonic list": ("[", "f(a=1, b='x'), ", "g()]"),
    "long pythonic argument": ('[f(a="', "x", '")]'),
    "pythonic list argument": ("[f(a=[", "1, ", "])]"),
    "dotted name": ("", "a.", "b()"),
    "JSON call list, unclosed": ("[", '{"name": "f", "arguments": {}}, ', ""),
    "JSON call list, closed": ("[", '{"name": "f", "arguments": {"a": 1}}, ', "{}]"),
    "near-JSON call list": ("[", "{'name': 'f', 'arguments': {'a': 1,}}, ", ""),
    "near-JSON repair bomb list": ("[", '1]{ "', ""),
    "JSON call, long argument": ('[{"name": "f", "arguments": {"a": "', "x", '"}}]'),
    "JSON call, unclosed string": ('{"name": "f", "arguments": {"a": "', "x", ""),
    "JSON call + backslashes": ('[{"name": "f", "arguments": "', "\\", ""),
    "JSON call + spaces": ('[{"name": "f", "arguments": {}} ', " ", ""),
    "JSON call + deep list": ('[{"name": "f", "arguments": ', "[", ""),
    "JSON call + quotes": ('[{"name": "f", "arguments": ', '"', ""),
    "JSON call, unclosed list argument": ('[{"name": "f", "arguments": {"a": [', "1, ", ""),
    "quotes": ("[", '"', ""),
    "single quotes": ("[", "'", ""),
    "backslashes in a string": ('["', "\\", ""),
    "commas": ("[", ",", ""),
    "lone surrogates": ("", "\ud83d", ""),
    "escaped surrogates": ("<tool_call>", "\\ud83d", ""),
    "NUL": ("", "\x00", ""),
}


def long_outputs(max_chars: int = 200_000) -> Iterator[tuple[str, str]]:
    """``(name, text)`` for every shape of :data:`_LONG` at 1,000, 10,000 and 50,000
    characters and at ``max_chars`` (the parser's input cap, 200,000: the longest output
    it searches for calls)."""
    for size in sorted({1_000, 10_000, 50_000, max_chars}):
        if size > max_chars:
            continue
        for name, (head, unit, tail) in _LONG.items():
            if name == "balanced deep list":
                half = size // 2
                yield name, unit * half + tail * half
                continue
            reps = max(1, (size - len(head) - len(tail)) // len(unit))
            text = head + unit * reps + tail
            yield name, text[:size]


class CPULimit(BaseException):
    """Raised by :func:`cpu_limit` (a BaseException: the parser's own ``except Exception``
    must not swallow it)."""


@contextlib.contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Stop the block with :class:`CPULimit` once the process has used ``seconds`` of CPU
    (``SIGPROF``; the regular-expression engine checks for signals, so a backtracking match
    is stopped too). In the main thread only; elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise CPULimit(f"over {seconds:g} s of CPU")

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def fuzz_parser(
    count: int,
    seed: int = 0,
    slow_s: float = 1.0,
    long_chars: int = 0,
    limit_s: float = 10.0,
) -> dict[str, Any]:
    """Run ``count`` fuzzed outputs through ``parse_output``, then (with ``long_chars``) the
    long adversarial ones of :func:`long_outputs` up to that size: crashes, slow ones, the
    slowest.

    A parse is slow when it used more than ``slow_s`` of CPU (this thread's time): the
    parser's own cost, which a loaded machine does not inflate; one that runs past
    ``limit_s`` of CPU is stopped there and counted slow (and as a crash), so that a parser
    with a quadratic case fails in seconds instead of minutes. ``max_s`` is the longest
    wall time, ``max_cpu_s`` the longest CPU time, ``max_chars`` the longest output tried
    and ``slowest`` the name and size of the long output that took the most CPU."""
    from trajsynth.llm.parsing import parse_output

    crashes: list[str] = []
    slow = 0
    worst = worst_cpu = 0.0
    chars = max_chars = seen = 0
    slowest = ""
    outputs: Iterator[tuple[str, str | None, list[dict] | None]] = (
        ("", text, native) for text, native in fuzz_outputs(count, seed)
    )
    if long_chars:
        long = ((f"{n} ({len(t):,} chars)", t, None) for n, t in long_outputs(long_chars))
        outputs = itertools.chain(outputs, long)
    for name, text, native in outputs:
        chars += len(text or "")
        max_chars = max(max_chars, len(text or ""))
        t, cpu = time.perf_counter(), time.thread_time()
        try:
            with cpu_limit(limit_s):
                r = parse_output(text, native)
            for call in r.calls:  # what it returns is well formed and encodable
                if native is None:  # (native calls are kept with malformed arguments)
                    json.loads(call.arguments)
                (call.id + call.name + call.arguments).encode("utf-8")
            for part in (r.content, r.reasoning, *r.errors):
                (part or "").encode("utf-8")
        except (Exception, CPULimit) as exc:
            crashes.append(f"{name or 'fuzzed'}: {type(exc).__name__}: {exc}"[:200])
        took, took_cpu = time.perf_counter() - t, time.thread_time() - cpu
        if took_cpu > worst_cpu:
            slowest = name or "a fuzzed output"
        worst, worst_cpu = max(worst, took), max(worst_cpu, took_cpu)
        slow += took_cpu > slow_s
        seen += 1
    return {"outputs": seen, "chars": chars, "crashes": crashes, "slow": slow, "max_s": worst,
            "max_cpu_s": worst_cpu, "max_chars": max_chars, "slowest": slowest}  # fmt: skip


# --------------------------------------------------------------------------------------
# corrupt files
# --------------------------------------------------------------------------------------


def corrupt_file(path: Path, nbytes: int = 2048, seed: int = 0, *, anywhere: bool = False) -> None:
    """Overwrite ``nbytes`` of ``path`` with different bytes, in the middle (or, with
    ``anywhere``, at a seeded random offset); the size is kept."""
    data = bytearray(path.read_bytes())
    rnd = random.Random(seed)
    n = min(nbytes, max(1, len(data) // 2))
    start = rnd.randrange(0, len(data) - n + 1) if anywhere else max(0, len(data) // 2 - n // 2)
    for i in range(start, start + n):
        data[i] = (data[i] + 1 + rnd.randrange(255)) % 256
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------------------
# the fault-injecting proxy
# --------------------------------------------------------------------------------------

FAULTS = ("429", "429-no-retry-after", "500", "hang", "garbage", "surrogate")


class FaultProxy:
    """``with FaultProxy(upstream, rate=0.2, faults=("429", "500")) as proxy:`` →
    ``proxy.base_url`` is an OpenAI-compatible endpoint (see the module docstring)."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.2,
        faults: tuple[str, ...] = FAULTS,
        seed: int = 0,
        hang_s: float = 30.0,
        retry_after_s: float = 0.05,
        max_requests: int = 100_000,
    ) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.faults = faults
        self.hang_s = hang_s
        self.retry_after_s = retry_after_s
        self.max_requests = max_requests
        self.counts: Counter[str] = Counter()
        #: fault rates of the first requests, in order (then none); None: ``rate`` throughout
        self.rate_schedule: list[float] | None = None
        self._rnd = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.base_url = ""

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        import aiohttp
        from aiohttp import web

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._forward_get)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._session.close()
            await runner.cleanup()

    # -- handlers ------------------------------------------------------------------------
    def _draw(self) -> str:
        if self.counts["requests"] > self.max_requests:
            return "500"
        rate = self.rate
        if self.rate_schedule is not None:  # per-request rates, then no faults
            k = self.counts["requests"] - 1
            rate = self.rate_schedule[k] if k < len(self.rate_schedule) else 0.0
        if self.faults and self._rnd.random() < rate:
            return self._rnd.choice(self.faults)
        return "ok"

    async def _forward_get(self, request: Any) -> Any:
        from aiohttp import web

        async with self._session.get(self.upstream + "/models") as r:
            return web.Response(status=r.status, body=await r.read())

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        self.counts["requests"] += 1
        fault = self._draw()
        self.counts[fault] += 1
        body = await request.read()
        if fault == "429":
            ms = int(self.retry_after_s * 1000)
            return web.json_response(
                {"error": {"message": "rate limited (injected)", "type": "rate_limit"}},
                status=429,
                headers={"retry-after-ms": str(ms), "retry-after": f"{self.retry_after_s:g}"},
            )
        if fault == "429-no-retry-after":
            return web.json_response({"error": {"message": "slow down (injected)"}}, status=429)
        if fault == "500":
            return web.json_response({"error": {"message": "injected 500"}}, status=500)
        if fault == "hang":
            stop = self._stop
            assert stop is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.hang_s)
            return web.json_response({"error": {"message": "hung (injected)"}}, status=500)
        async with self._session.post(
            self.upstream + "/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        ) as r:
            status, data = r.status, await r.read()
        if fault == "garbage" and status == 200:
            return web.Response(
                status=200, body=data[: len(data) // 2], content_type="application/json"
            )
        if fault == "surrogate" and status == 200:
            reply = json.loads(data)
            for choice in reply.get("choices") or []:
                msg = choice.get("message") or {}
                msg["content"] = (msg.get("content") or "") + " Done \ud83d"
            # json.dumps escapes the lone surrogate as \ud83d: valid JSON, as models send it
            data = json.dumps(reply).encode()
        return web.Response(status=status, body=data, content_type="application/json")
