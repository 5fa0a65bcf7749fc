"""The OpenAI-compatible backend end to end over real HTTP against `trajsynth serve --backend
sim` on 127.0.0.1: tools, n, logprobs, metadata, a 500-request stage under 20% injected faults
run through the real runner, warm-cache reruns that send zero requests, fan-out for servers
without n, error classes.

Run: PYTHONPATH=. python -m pytest tests/llm/test_http.py -q
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core.errors import EndpointError
from trajsynth.core.schema import Message, Trajectory
from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth
from trajsynth.llm import FatalEndpointError, client_for_role
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.stages import Context, Metrics, RowStage, register
from trajsynth.store import read_records

from .conftest import arun

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
GT = GroundTruth(
    turns=[
        GoldTurn(
            request="Weather in Paris?",
            steps=[[GoldCall(name="get_weather", arguments={"city": "Paris"})]],
        )
    ]
)


def role(server: Any, **extra: Any) -> dict[str, Any]:
    return {
        "backend": "openai",
        "base_url": server.base_url,
        "model": "sim",
        "send_metadata": True,
        "backoff_base_s": 0.01,
        **extra,
    }


def test_chat_over_http_with_tools_n_logprobs_and_metadata(serve: Any, tmp_path: Path) -> None:
    server = serve(
        "--latency-ms",
        "2",
        "--sim-config",
        json.dumps(
            {
                "profile": {
                    "drop_optional_param": 0,
                    "wrong_argument_value": 0,
                    "wrong_tool": 0,
                    "malformed_json": 0,
                    "hallucinated_tool": 0,
                    "needless_clarification": 0,
                }
            }
        ),
    )
    metrics = Metrics()
    client = client_for_role(
        "teacher",
        {
            "teacher": role(
                server,
                api_key="sk-secret-123",
                prices={"prompt_per_mtok": 1.0, "completion_per_mtok": 2.0},
            )
        },
        spec=type("S", (), {"cache_dir": str(tmp_path)})(),
        metrics=metrics,
    )
    result = arun(
        client.chat(
            [Message(role="user", content="Weather in Paris?")],
            TOOLS,
            n=3,
            seed=5,
            logprobs=True,
            top_logprobs=2,
            metadata={"role": "teacher", "ground_truth": GT.model_dump(mode="json")},
        )
    )
    assert result.ok and len(result.choices) == 3 and result.attempts == 1
    for choice in result.choices:
        call = choice.message.tool_calls[0]
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        assert choice.message.reasoning and choice.finish_reason == "tool_calls"
        assert choice.logprobs and len(choice.logprobs[0].top) == 2
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    expected_cost = (result.usage.prompt_tokens * 1.0 + result.usage.completion_tokens * 2.0) / 1e6
    assert result.cost_usd == pytest.approx(expected_cost)
    c = metrics.snapshot()["counters"]
    assert c["llm.teacher.requests"] == 1 and c["llm.teacher.http_requests"] == 1
    assert c["llm.teacher.cost_usd"] == pytest.approx(expected_cost)
    assert server.metrics()["chat_requests"] == 1
    # the same request again: answered from the cache, no HTTP request
    again = arun(
        client.chat(
            [Message(role="user", content="Weather in Paris?")],
            TOOLS,
            n=3,
            seed=5,
            logprobs=True,
            top_logprobs=2,
            metadata={"role": "teacher", "ground_truth": GT.model_dump(mode="json")},
        )
    )
    assert again.cached and again.choices == result.choices and again.cost_usd == 0
    assert server.metrics()["chat_requests"] == 1
    # the API key never reaches the cache (neither files nor keys)
    files = list((tmp_path / "llm").glob("seg-*.jsonl"))
    assert len(files) == 1 and len(files[0].read_text().splitlines()) == 1
    assert "sk-secret-123" not in files[0].read_text()
    assert client.config.api_key is not None and "sk-secret-123" not in repr(client.config)


def test_servers_without_n_are_fanned_out(serve: Any) -> None:
    server = serve("--ignore-n")
    client = client_for_role("judge", {"judge": role(server)}, spec=None)
    result = arun(client.chat([{"role": "user", "content": "hi"}], n=3, seed=1))
    assert len(result.choices) == 3 and result.attempts == 3
    assert len({c.message.content for c in result.choices}) == 3  # seeds 1, 2, 3
    # the client remembers: the next n=2 call goes straight to two requests
    result = arun(client.chat([{"role": "user", "content": "yo"}], n=2, seed=1))
    assert len(result.choices) == 2 and result.attempts == 2
    assert server.metrics()["chat_requests"] == 5


def test_client_errors_are_recorded_and_unreachable_endpoints_are_fatal(serve: Any) -> None:
    server = serve()
    client = client_for_role("teacher", {"teacher": role(server)}, spec=None)
    # the simulator rejects bad metadata with HTTP 400: recorded, not raised, not retried
    result = arun(client.chat([{"role": "user", "content": "x"}], metadata={"role": "teacher"}))
    assert not result.ok and "HTTP 400" in result.error and "ground_truth" in result.error
    assert result.attempts == 1 and server.metrics()["bad_request"] == 1
    with pytest.raises(EndpointError, match="HTTP 400"):
        result.raise_for_error()
    # nothing listens on this port: one clear fatal error, raised
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    dead = client_for_role(
        "teacher",
        {
            "teacher": {
                "backend": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "m",
                "max_retries": 1,
                "backoff_base_s": 0.01,
            }
        },
        spec=None,
    )
    with pytest.raises(FatalEndpointError, match=f"cannot reach http://127.0.0.1:{port}/v1"):
        arun(dead.chat([{"role": "user", "content": "x"}]))


# -- a stage of 500 requests through the real runner -------------------------------------------


@register
class AskTeacher(RowStage):
    """Test stage: ask the teacher for the first step of each row's task."""

    name = "test_ask_teacher"
    io_bound = True

    async def aprocess_row(self, row: Trajectory, ctx: Context) -> list[Trajectory]:
        calls = [c for m in row.messages for c in m.tool_calls]
        gt = GroundTruth(
            turns=[
                GoldTurn(
                    request=row.goal,
                    steps=[
                        [GoldCall(name=c.name, arguments=c.parsed_arguments() or {})] for c in calls
                    ],
                )
            ]
        )
        result = await ctx.llm("teacher").chat(
            row.messages[:2],
            row.tools,
            seed=ctx.row_seed(row.id),
            metadata={"role": "teacher", "ground_truth": gt.model_dump(mode="json")},
        )
        if result.ok:
            extra = {"answer": result.choices[0].message.model_dump(mode="json")}
            messages = [*row.messages[:2], result.choices[0].message]
        else:
            extra = {"error": result.error}
            messages = row.messages[:2]
        extra["attempts"] = result.attempts
        return [
            row.derive(
                id=Trajectory.make_id("ask", row.id),
                messages=messages,
                extra=extra,
                step_rewards=[],
                step_flags=[],
            )
        ]


def _pipeline(base_url: str, out: Path, rows: int, **llm: Any) -> Any:
    return resolve_pipeline(
        {
            "name": "ask",
            "defaults": {
                "seed": 3,
                "llm": {
                    "teacher": {
                        "backend": "openai",
                        "base_url": base_url,
                        "model": "sim",
                        "send_metadata": True,
                        "backoff_base_s": 0.01,
                        **llm,
                    }
                },
            },
            "stages": [
                {"id": "tasks", "uses": "synthetic", "with": {"rows": rows}},
                {"id": "ask", "uses": "test_ask_teacher", "from": "tasks"},
            ],
        },
        output=str(out),
    )


def _outcomes(out: Path) -> tuple[list[Trajectory], list[Trajectory]]:
    rows = read_records(out / "ask")
    answered = [r for r in rows if "answer" in r.extra]
    errored = [r for r in rows if r.extra.get("error")]
    return answered, errored


@pytest.mark.slow
def test_500_requests_under_20_percent_faults_finish_with_every_row_accounted(
    serve: Any, tmp_path: Path
) -> None:
    server = serve(
        "--latency-ms",
        "5",
        "--fault-rate",
        "0.2",
        "--retry-after-ms",
        "20",
        "--hang-s",
        "5",
        "--seed",
        "11",
    )
    out = tmp_path / "run"
    result = run_pipeline(
        _pipeline(
            server.base_url, out, 500, max_retries=1, max_rate_limit_retries=1, timeout_s=0.5
        ),
        out=out,
    )
    state = result.manifest.stages["ask"]
    assert state.status == "done" and state.rows_out() == 500
    answered, errored = _outcomes(out)
    assert len(answered) + len(errored) == 500  # every row answered or carrying its error
    assert len(answered) > 430 and len(errored) > 0
    assert all(("429" in r.extra["error"]) or ("attempts" in r.extra["error"]) for r in errored)
    # the counts add up: requests the client counted = per-row sum = requests the server saw,
    # but for attempts the client's timeout cut before the server read them (on a loaded
    # machine the client's event loop lags, and a request can time out before it is written)
    counters = state.metrics["counters"]
    sent = sum(r.extra["attempts"] for r in answered + errored)
    timeouts = counters.get("llm.teacher.timeouts", 0)
    m = server.metrics()
    hedges = counters.get("llm.teacher.hedges", 0)
    assert counters["llm.teacher.http_requests"] == sent
    assert sent - timeouts - hedges <= m["chat_requests"] <= sent
    # every hang the server made cost a client a timeout, or was hedged
    assert timeouts + hedges >= m["fault_timeout"] > 0
    # on the server every request it read was answered or failed on purpose...
    faults = sum(m[f"fault_{k}"] for k in ("429", "500", "timeout", "garbage"))
    assert faults == m["chat_requests"] - m["ok"]
    # ...and each answered row got one of the answers (a few more answers may have been sent
    # to clients that had already timed out under load and retried)
    assert len(answered) <= m["ok"] <= len(answered) + (sent - 500)
    assert counters["llm.teacher.requests"] == 500
    assert counters["llm.teacher.errors"] == len(errored)
    assert (
        counters["llm.teacher.prompt_tokens"] > 0 and counters["llm.teacher.completion_tokens"] > 0
    )
    # a rerun with --force: answered rows come from the cache; only the failed ones are resent
    before = m["chat_requests"]
    again = run_pipeline(
        _pipeline(
            server.base_url, out, 500, max_retries=1, max_rate_limit_retries=1, timeout_s=0.5
        ),
        out=out,
        force=True,
    )
    counters = again.manifest.stages["ask"].metrics["counters"]
    assert counters["llm.teacher.cache_hits"] == len(answered)
    resent = counters["llm.teacher.http_requests"]
    seen = server.metrics()["chat_requests"] - before
    cut = counters.get("llm.teacher.timeouts", 0) + counters.get("llm.teacher.hedges", 0)
    assert resent - cut <= seen <= resent
    assert resent >= len(errored)


def test_a_hung_request_is_hedged_instead_of_waiting_out_the_timeout(
    serve: Any, tmp_path: Path
) -> None:
    """Every tenth request hangs. Without hedging each hang is cut by the timeout; with it,
    a duplicate sent after 0.3 s answers, and only a duplicate that hangs too times out."""
    server = serve(
        "--latency-ms", "5", "--fault-rate", "0.1", "--fault-mix", "timeout",
        "--hang-s", "30", "--seed", "5",
    )  # fmt: skip
    common = {"max_retries": 2, "timeout_s": 3.0, "backoff_base_s": 0.01}

    def ask(out: Path, **llm: Any) -> tuple[dict[str, int], dict[str, Any]]:
        before = server.metrics()
        result = run_pipeline(_pipeline(server.base_url, out, 80, **common, **llm), out=out)
        answered, errored = _outcomes(out)
        assert len(answered) == 80 and not errored
        after = server.metrics()
        return result.manifest.stages["ask"].metrics["counters"], {
            k: after[k] - before[k] for k in ("chat_requests", "fault_timeout")
        }

    plain, seen = ask(tmp_path / "plain", hedge_budget=0)
    assert seen["fault_timeout"] > 0 and "llm.teacher.hedges" not in plain
    assert plain["llm.teacher.timeouts"] >= seen["fault_timeout"]  # each hang cost a timeout

    hedged, seen = ask(tmp_path / "hedged", hedge_budget=0.5, hedge_after_s=0.3)
    hedges, timeouts = hedged["llm.teacher.hedges"], hedged.get("llm.teacher.timeouts", 0)
    assert seen["fault_timeout"] > 0 and hedges >= 1
    assert hedges <= 0.5 * hedged["llm.teacher.http_requests"]  # the budget holds
    # a hang times out only when its duplicate hung too (1 in 10), not once per hang
    assert timeouts < seen["fault_timeout"] and timeouts <= hedges // 2
    sent = hedged["llm.teacher.http_requests"]
    assert sent - timeouts - hedges <= seen["chat_requests"] <= sent


def test_warm_cache_rerun_sends_zero_requests(serve: Any, tmp_path: Path) -> None:
    server = serve("--latency-ms", "1")
    out = tmp_path / "run"
    secret = "sk-pipeline-secret-42"
    # counts requests: no hedged duplicates of replies slowed by a loaded machine
    llm = {"api_key": secret, "hedge_budget": 0}
    first = run_pipeline(_pipeline(server.base_url, out, 60, **llm), out=out)
    sent = server.metrics()["chat_requests"]
    assert sent == 60 and first.manifest.stages["ask"].status == "done"
    rows = sorted((r.id, r.messages[-1].model_dump_json()) for r in read_records(out / "ask"))
    # the API key is in no file of the run (manifest, logs, shards, cache)
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    # unchanged: the runner skips the stage
    second = run_pipeline(_pipeline(server.base_url, out, 60, **llm), out=out)
    assert "ask" in second.skipped and server.metrics()["chat_requests"] == sent
    # forced: the stage runs again, every answer comes from the cache, identical rows
    third = run_pipeline(_pipeline(server.base_url, out, 60, **llm), out=out, force=True)
    assert "ask" in third.executed and server.metrics()["chat_requests"] == sent
    assert third.manifest.stages["ask"].metrics["counters"]["llm.teacher.cache_hits"] == 60
    assert rows == sorted(
        (r.id, r.messages[-1].model_dump_json()) for r in read_records(out / "ask")
    )


def test_the_hedging_delay_follows_recent_latencies_and_the_budget_caps_duplicates() -> None:
    from trajsynth.llm.base import RoleConfig
    from trajsynth.llm.openai_backend import _Hedger

    hedger = _Hedger(RoleConfig(backend="openai", model="m", timeout_s=10.0, hedge_min_s=0.5))
    for _ in range(9):
        hedger.record(0.8)
    assert hedger.delay() is None  # too few answers to know what slow is
    hedger.record(0.8)
    assert hedger.delay() == pytest.approx(0.8)  # the p95
    for i in range(200):
        hedger.record(1.0 + i / 100)  # 1.00 .. 2.99 s
    assert hedger.delay() == pytest.approx(2.89, abs=0.011)
    for _ in range(200):
        hedger.record(8.0)
    assert hedger.delay() == 5.0  # never more than half the timeout
    fast = _Hedger(RoleConfig(backend="openai", model="m", hedge_min_s=0.5))
    for _ in range(40):
        fast.record(0.01)
    assert fast.delay() == 0.5  # never below hedge_min_s
    fast.sent = 100  # the default budget: 10 duplicates per 100 requests
    assert sum(fast.take() for _ in range(30)) == 10
    assert not _Hedger(RoleConfig(backend="openai", model="m", hedge_budget=0)).enabled
