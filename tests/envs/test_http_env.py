"""HTTP tools (a ToolAlpaca OpenAPI toolset) called through the filtering, caching proxy,
against a local server standing in for the API: recorded once, then replayed exactly with
the server gone; a host outside the allowlist is never reached.

Run: python -m pytest tests/envs/test_http_env.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from httpkit import ShopServer, write_toolalpaca

from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import ToolCall
from trajsynth.envs.factory import EnvFactory
from trajsynth.envs.http import HTTPConfig, HTTPProxy

REPO = Path(__file__).resolve().parents[2]


def shop_env(tmp_path: Path, url: str, mode: str, **http) -> dict:
    spec = write_toolalpaca(tmp_path / "shop.json")
    return {
        "toolsets": {
            "shop": {
                "file": str(spec),
                "format": "toolalpaca",
                "backend": "http",
                "http": {"base_url": url, "allow": ["127.0.0.1"], "mode": mode,
                         "cache": str(tmp_path / "http-cache.jsonl"), **http},
            }
        }
    }  # fmt: skip


def calls(env) -> list[str]:
    out = []
    for i, (name, args) in enumerate(
        [
            ("search_products", {"query": "kettle"}),
            ("get_product", {"product_id": "P3"}),
            ("create_order", {"product_id": "P3", "quantity": 2}),
            ("get_product", {"product_id": "P9"}),
        ]
    ):
        r = env.execute(ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args)))
        out.append(env.format_observation(r))
    return out


def test_recorded_then_replayed_offline_exactly(tmp_path: Path) -> None:
    with ShopServer() as shop:
        live = EnvFactory(shop_env(tmp_path, shop.url, "record")).make("shop")
        first = calls(live)
        assert shop.hits == 4
        assert json.loads(first[0])["results"] == [
            {"product_id": "P1", "name": "red kettle"},
            {"product_id": "P3", "name": "steel kettle"},
        ]
        assert json.loads(first[2]) == {"order_id": "O-1", "total": 80.0}
        assert "HTTP 404" in first[3]
        again = calls(EnvFactory(shop_env(tmp_path, shop.url, "record")).make("shop"))
        assert again == first and shop.hits == 4  # from the cache: nothing sent twice
    # the server is gone: replay answers alike, twice
    for _ in range(2):
        assert calls(EnvFactory(shop_env(tmp_path, shop.url, "replay")).make("shop")) == first
    miss = EnvFactory(shop_env(tmp_path, shop.url, "replay")).make("shop")
    r = miss.execute(ToolCall(id="x", name="get_product", arguments='{"product_id": "P2"}'))
    assert r.error["type"] == "not_recorded"


def test_nothing_outside_the_allowlist_is_reached(tmp_path: Path) -> None:
    with ShopServer() as shop:
        proxy = HTTPProxy(HTTPConfig(allow=["127.0.0.1"], mode="live"))
        got = proxy.request("GET", "http://localhost:1/api/products", {"query": "x"}, None)
        assert got["type"] == "forbidden_host" and "localhost:1" in got["message"]
        assert shop.hits == 0
        # a toolset whose server is not allowed does not start
        env = shop_env(tmp_path, None, "record")
        with pytest.raises(ConfigError, match=r"shop\.example\.test.*not in http\.allow"):
            EnvFactory(env).make("shop")
        assert shop.hits == 0


def test_a_host_outside_the_allowlist_stops_the_run(tmp_path: Path) -> None:
    env = shop_env(tmp_path, None, "record")
    res = subprocess.run(
        [sys.executable, "-m", "trajsynth", "run", "rejection", "-q", "--out",
         str(tmp_path / "run"), "--set", f"defaults.env={json.dumps(env)}",
         "--set", "stages.tasks.with.domains=[shop]"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "shop.example.test" in res.stderr and "not in http.allow" in res.stderr
    assert "Traceback" not in res.stderr


def test_an_http_tool_pipeline_replays_offline_twice_with_identical_rows(tmp_path: Path) -> None:
    """Magnet tasks → rejection sampling → verify on the shop's HTTP tools: recorded with the
    server up, then run twice with it gone (``mode: replay``): the same rows every time."""
    from trajsynth.pipeline import run_pipeline
    from trajsynth.store import read_records

    def run(url: str, mode: str, out: str) -> dict[str, list[dict]]:
        sets = [
            f"defaults.env={json.dumps(shop_env(tmp_path, url, mode))}",
            "stages.tasks.with.domains=[shop]",
            "stages.tasks.with.tasks_per_domain=3",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=2",
        ]
        result = run_pipeline("rejection", out=tmp_path / out, overrides=sets)
        return {
            s: [r.model_dump(mode="json", exclude={"created_at", "run_id"})
                for r in read_records(result.output(s))]
            for s in ("tasks", "rollouts", "verified")
        }  # fmt: skip

    with ShopServer() as shop:
        recorded = run(shop.url, "record", "recorded")
        assert shop.hits > 0
    assert recorded["tasks"] and recorded["verified"]
    assert {r["domain"] for r in recorded["rollouts"]} == {"shop"}
    first = run(shop.url, "replay", "offline-1")
    second = run(shop.url, "replay", "offline-2")
    assert first == second == recorded
