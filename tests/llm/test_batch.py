"""``backend: openai_batch`` against `trajsynth serve --backend sim` on 127.0.0.1: the server's
/v1/files and /v1/batches answer each line as the live endpoint would; a rejection-sampling
pipeline run through batches gives the rows of the same run live, one turn of all open
episodes per batch, at the batch price; batch prices and cost per accepted trajectory.

Run: PYTHONPATH=. python -m pytest tests/llm/test_batch.py -q
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from trajsynth.llm import Prices, Usage, aclose, client_for_role
from trajsynth.llm.openai_batch import OpenAIBatchBackend
from trajsynth.llm.usage import run_cost
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.stages import Metrics
from trajsynth.store import read_records

from .conftest import arun

PRICES = {"prompt_per_mtok": 1.0, "completion_per_mtok": 4.0}
FAST = {"flush_idle_s": 0.05, "poll_s": 0.05}


def role(server: Any, backend: str, **extra: Any) -> dict[str, Any]:
    return {
        "backend": backend,
        "base_url": server.base_url,
        "model": "sim",
        "send_metadata": True,
        "backoff_base_s": 0.01,
        "prices": PRICES,
        "batch": FAST,
        **extra,
    }


def rejection(base_url: str, out: Path, backend: str, tasks_per_domain: int = 3) -> Any:
    """A small rejection-sampling run (two built-in domains, 4 rollouts per task)."""
    teacher = {
        "backend": backend,
        "base_url": base_url,
        "model": "sim",
        "send_metadata": True,
        "prices": PRICES,
        "batch": FAST,
        # the test counts requests: a hedged duplicate (a slow reply on a loaded machine)
        # would add to the live run's count and not the batch run's
        "hedge_budget": 0,
    }
    return resolve_pipeline(
        {
            "name": "rejection-batch",
            "defaults": {"seed": 0, "llm": {"teacher": teacher}},
            "stages": [
                {
                    "id": "tasks",
                    "uses": "magnet_tasks",
                    "with": {
                        "tasks_per_domain": tasks_per_domain,
                        "domains": ["math", "files"],
                        "graph": {"similarity": "lexical"},
                    },
                },
                {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 4}},
                {"id": "verified", "uses": "verify", "from": "rollouts"},
                {"id": "filtered", "uses": "filter", "from": "verified"},
            ],
        },
        output=str(out),
    )


def accepted(out: Path) -> list[tuple[str, str]]:
    """The accepted trajectories: (id, messages) of the final output."""
    return sorted(
        (r.id, json.dumps([m.model_dump(mode="json") for m in r.messages]))
        for r in read_records(out / "filtered")
    )


def test_batch_endpoints_answer_every_line_as_the_live_endpoint(serve: Any) -> None:
    import openai

    server = serve("--batch-delay", "0.2")

    async def main() -> tuple[Any, ...]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-x", max_retries=0)
        try:
            lines = [
                {
                    "custom_id": f"req-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": "sim",
                        "messages": [{"role": "user", "content": f"hello {i}"}],
                        "seed": i,
                        "n": 2,
                    },
                }
                for i in range(3)
            ]
            lines.append(
                {
                    "custom_id": "bad",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "sim", "messages": []},
                }
            )
            data = "".join(json.dumps(x) + "\n" for x in lines).encode()
            upload = await client.files.create(file=("in.jsonl", data), purpose="batch")
            assert (await client.files.content(upload.id)).content == data
            batch = await client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            assert batch.status == "in_progress"
            while batch.status != "completed":
                await asyncio.sleep(0.05)
                batch = await client.batches.retrieve(batch.id)
            out = (await client.files.content(batch.output_file_id)).content
            err = (await client.files.content(batch.error_file_id)).content
            live = await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "hello 1"}], seed=1, n=2
            )
            listed = [b.id async for b in await client.batches.list()]
            # a second batch, cancelled before it completes
            other = await client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            cancelled = await client.batches.cancel(other.id)
            return batch, out, err, live, listed, cancelled
        finally:
            await client.close()

    batch, out, err, live, listed, cancelled = asyncio.run(main())
    assert batch.request_counts.total == 4 and batch.request_counts.completed == 3
    assert batch.request_counts.failed == 1
    answers = {r["custom_id"]: r["response"] for r in map(json.loads, out.splitlines())}
    assert sorted(answers) == ["req-0", "req-1", "req-2"]
    assert all(a["status_code"] == 200 for a in answers.values())
    # the line is answered exactly as the live endpoint answers the same request
    body = answers["req-1"]["body"]
    assert [c["message"] for c in body["choices"]] == [
        c.message.model_dump(exclude_none=True) for c in live.choices
    ]
    assert body["usage"]["prompt_tokens"] == live.usage.prompt_tokens
    (failed,) = map(json.loads, err.splitlines())
    assert failed["custom_id"] == "bad" and failed["response"]["status_code"] == 400
    assert "messages" in failed["response"]["body"]["error"]["message"]
    assert listed == [batch.id] and cancelled.status == "cancelled"
    m = server.metrics()
    assert (m["files_uploaded"], m["batches_created"], m["batch_requests"]) == (1, 2, 8)
    assert m["batch_custom_ids_repeated"] == 4  # the second batch repeated the first's ids


def test_concurrent_requests_go_out_as_one_batch_priced_at_half(serve: Any, tmp_path: Path) -> None:
    server = serve("--batch-delay", "0.1")
    metrics = Metrics()
    spec = type("S", (), {"cache_dir": str(tmp_path / "cache"), "run_dir": str(tmp_path)})()
    client = client_for_role(
        "teacher", {"teacher": role(server, "openai_batch")}, spec=spec, metrics=metrics
    )
    live = client_for_role("teacher", {"teacher": role(server, "openai", cache=False)}, spec=None)

    async def ask(c: Any, i: int) -> Any:
        return await c.chat([{"role": "user", "content": f"q{i % 5}"}], seed=i % 5)

    async def both() -> tuple[list[Any], list[Any]]:
        batched = await asyncio.gather(*(ask(client, i) for i in range(8)))
        direct = await asyncio.gather(*(ask(live, i) for i in range(8)))
        return list(batched), list(direct)

    batched, direct = arun(both())
    assert [r.choices[0].message for r in batched] == [r.choices[0].message for r in direct]
    m = server.metrics()
    # 8 requests, 5 distinct: one batch of 5 lines (custom ids are unique within a batch)
    assert (m["batches_created"], m["batch_requests"]) == (1, 5)
    assert all(r.ok and r.backend == "openai_batch" for r in batched)
    live_cost = sum(r.cost_usd for r in direct)
    assert sum(r.cost_usd for r in batched) == pytest.approx(live_cost / 2)
    backend = client.backend
    assert isinstance(backend, OpenAIBatchBackend)
    assert backend.stats["batches_submitted"] == backend.stats["batches_collected"] == 1
    events = [
        json.loads(x) for x in (tmp_path / "batches" / "journal.jsonl").read_text().splitlines()
    ]
    assert [e["event"] for e in events] == ["uploaded", "submitted", "collected"]
    assert len(events[0]["keys"]) == 5 and events[2]["status"] == "completed"
    # answered again from the cache: no new batch
    again = arun(ask(client, 1))
    assert again.cached and server.metrics()["batches_created"] == 1


def test_batch_prices() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=500_000)
    prices = Prices(prompt_per_mtok=2.0, completion_per_mtok=8.0)
    assert prices.cost(usage) == pytest.approx(6.0)
    assert prices.cost(usage, batch=True) == pytest.approx(3.0)
    custom = Prices(prompt_per_mtok=2.0, completion_per_mtok=8.0, batch_completion_per_mtok=1.0)
    assert custom.cost(usage, batch=True) == pytest.approx(1.0 + 0.5)


def test_run_cost_divides_by_the_final_outputs_rows() -> None:
    stages = {
        "tasks": {"outputs": {"main": {"rows": 10}}, "metrics": {}},
        "rollouts": {
            "outputs": {"main": {"rows": 30}},
            "metrics": {"counters": {"llm.teacher.cost_usd": 0.6, "llm.judge.cost_usd": 0.2}},
        },
        "filtered": {"outputs": {"main": {"rows": 20}}, "metrics": {}},
        "train": {"outputs": {"main": {"rows": 0}}, "metrics": {}},
    }
    cost = run_cost(stages)
    assert cost["accepted"] == 20 and cost["accepted_stage"] == "filtered"
    assert cost["cost_usd"] == pytest.approx(0.8)
    assert cost["cost_per_accepted"] == pytest.approx(0.04)


def test_rejection_sampling_via_batches_accepts_what_the_live_run_accepts(
    serve: Any, tmp_path: Path
) -> None:
    server = serve("--batch-delay", "0.1")
    live = run_pipeline(
        rejection(server.base_url, tmp_path / "live", "openai"), out=tmp_path / "live"
    )
    sent_live = server.metrics()["chat_requests"]
    batch = run_pipeline(
        rejection(server.base_url, tmp_path / "batch", "openai_batch"), out=tmp_path / "batch"
    )
    m = server.metrics()
    rows = accepted(tmp_path / "live")
    assert rows and rows == accepted(tmp_path / "batch")
    # every request went through a batch, once; the open episodes advance one turn per batch
    assert m["chat_requests"] == 2 * sent_live and m["batch_requests"] == sent_live
    assert m["batch_custom_ids_repeated"] == 0
    assert 4 <= m["batches_created"] <= sent_live / 4
    # cost per accepted trajectory at the batch price: half the live one
    live_cost, batch_cost = run_cost(live.manifest.stages), run_cost(batch.manifest.stages)
    assert live_cost["accepted"] == batch_cost["accepted"] == len(rows)
    assert live_cost["cost_per_accepted"] > 0
    assert batch_cost["cost_per_accepted"] == pytest.approx(live_cost["cost_per_accepted"] / 2)
    journal = (tmp_path / "batch" / "batches" / "journal.jsonl").read_text().splitlines()
    kinds = [json.loads(x)["event"] for x in journal]
    assert kinds.count("submitted") == kinds.count("collected") == m["batches_created"]


@pytest.mark.parametrize("created", [True, False])
def test_a_file_uploaded_before_a_kill_is_adopted_or_submitted_once(
    serve: Any, tmp_path: Path, created: bool
) -> None:
    """Killed between upload and recording the batch: the resumed run finds the batch the
    server made from the file (created) or creates it now (not created) — once either way."""
    import openai

    from trajsynth.llm.base import ChatRequest
    from trajsynth.llm.client import role_config
    from trajsynth.llm.openai_backend import chat_body
    from trajsynth.llm.openai_batch import BatchJournal

    server = serve("--batch-delay", "0.1")
    config = role_config("teacher", {"teacher": role(server, "openai_batch")})
    requests = [
        ChatRequest(messages=[{"role": "user", "content": f"hi {i}"}], seed=i) for i in range(3)
    ]
    probe = OpenAIBatchBackend(config, role="teacher")  # only for the custom ids
    keys = [probe.custom_id(r) for r in requests]
    lines = [
        {
            "custom_id": k,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": chat_body(config, r),
        }
        for k, r in zip(keys, requests, strict=True)
    ]

    async def upload() -> str:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-x")
        try:
            data = "".join(json.dumps(x) + "\n" for x in lines).encode()
            f = await client.files.create(file=("in.jsonl", data), purpose="batch")
            if created:
                await client.batches.create(
                    input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
                )
            return f.id
        finally:
            await client.close()

    file_id = asyncio.run(upload())
    BatchJournal(tmp_path / "batches").uploaded(file_id, keys)  # what the killed run wrote
    backend = OpenAIBatchBackend(config, role="teacher", state_dir=str(tmp_path))

    async def ask() -> list[Any]:
        try:
            return list(await asyncio.gather(*(backend.complete(r) for r in requests)))
        finally:
            await aclose()

    replies = asyncio.run(ask())
    assert all(r.choices and r.choices[0].content for r in replies)
    m = server.metrics()
    assert m["batches_created"] == 1 and m["batch_custom_ids_repeated"] == 0
    assert backend.stats["batches_adopted"] == (1 if created else 0)
    assert backend.stats["requests_from_journal"] == 3 and backend.stats["requests_batched"] == 0


def test_collected_answers_are_reused_and_failed_lines_sent_again(
    serve: Any, tmp_path: Path
) -> None:
    """After a restart, a line its batch answered comes from the run folder (no request);
    a line that failed is sent again, in a new batch."""
    from trajsynth.llm.base import ChatRequest
    from trajsynth.llm.client import role_config
    from trajsynth.llm.openai_batch import BatchJournal

    server = serve("--batch-delay", "0.1")
    config = role_config("teacher", {"teacher": role(server, "openai_batch")})
    ok, failed = (ChatRequest(messages=[{"role": "user", "content": t}]) for t in ("a", "b"))
    probe = OpenAIBatchBackend(config, role="teacher")
    k_ok, k_failed = probe.custom_id(ok), probe.custom_id(failed)
    journal = BatchJournal(tmp_path / "batches")  # what an earlier run left
    journal.uploaded("file-old", [k_ok, k_failed])
    journal.submitted("file-old", "batch_old")
    answer = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "kept"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    error = {"error": {"message": "server error", "type": "server_error"}}
    journal.collected(
        "batch_old",
        "completed",
        {
            k_ok: {"custom_id": k_ok, "response": {"status_code": 200, "body": answer}},
            k_failed: {"custom_id": k_failed, "response": {"status_code": 500, "body": error}},
        },
    )
    backend = OpenAIBatchBackend(config, role="teacher", state_dir=str(tmp_path))

    async def ask() -> list[Any]:
        try:
            return list(await asyncio.gather(backend.complete(ok), backend.complete(failed)))
        finally:
            await aclose()

    kept, resent = asyncio.run(ask())
    assert kept.choices[0].content == "kept" and kept.usage.prompt_tokens == 3
    assert resent.choices[0].content and resent.choices[0].content != "kept"
    m = server.metrics()
    assert (m["batches_created"], m["batch_requests"]) == (1, 1)
