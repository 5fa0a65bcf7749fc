"""Argument values a tool accepts (trajsynth.envs.values) and what an MCP server's answer means
(trajsynth.envs.mcp.results): values follow what a spec and its description say; error-shaped
results are failures.

Run: PYTHONPATH=. python -m pytest tests/envs/test_values.py -q
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest

from trajsynth.envs.mcp.results import error_text, stderr_error
from trajsynth.envs.values import Known, invent, kind, pattern_value, suggested

TZ = {"type": "string", "description": "IANA timezone name (e.g., 'America/New_York', "
      "'Europe/London', 'America/San_Francisco'). Use 'Etc/UTC' if none is given."}  # fmt: skip


def test_descriptions_and_schemas_name_values() -> None:
    assert kind("timezone", TZ) == "timezone"
    assert suggested("timezone", TZ) == ["America/New_York", "Europe/London", "Etc/UTC"]
    branch = {"type": "string", "description": "List local branches ('local'), remote "
              "branches ('remote') or all branches('all')."}  # fmt: skip
    assert suggested("branch_type", branch) == ["local", "remote", "all"]
    assert suggested("n", {"type": "integer", "default": 3, "examples": [5, "x"]}) == [3, 5]
    assert kind("time", {"type": "string", "description": "Time in 24-hour format (HH:MM)"}) == (
        "time"
    )
    assert kind("repo_path", {"type": "string"}) == "path"
    assert kind("when", {"type": "string", "format": "date-time"}) == "date-time"
    assert kind("query", {"type": "string", "description": "SELECT SQL query to execute"}) == (
        "sql"
    )


def test_values_of_a_kind() -> None:
    rng = random.Random(0)
    assert invent("timezone", TZ, rng) in {"America/New_York", "Europe/London", "Asia/Tokyo",
                                           "Europe/Paris", "America/Chicago", "Australia/Sydney",
                                           "Asia/Kolkata", "America/Los_Angeles",
                                           "Europe/Berlin", "UTC"}  # fmt: skip
    columns = [["id", "INTEGER"], ["name", "TEXT"], ["price", "REAL"]]
    known = Known(dirs=["/data/repo"], files=["/data/repo/a.txt"],
                  nouns={"branch": ["main", "restock"]}, tables={"items": columns})  # fmt: skip
    assert invent("repo_path", {"type": "string"}, rng, known) == "/data/repo"
    assert invent("path", {"type": "string", "description": "the file to read"}, rng, known) == (
        "/data/repo/a.txt"
    )
    assert invent("branch_name", {"type": "string"}, rng, known) in {"main", "restock"}
    insert = {"type": "string", "description": "Execute an INSERT query"}
    assert re.fullmatch(r"INSERT INTO items \(name, price\) VALUES \('\w+', \d+\.5\)",
                        invent("query", insert, rng, known))  # fmt: skip
    create = {"type": "string", "description": "CREATE TABLE SQL statement"}
    assert invent("query", create, rng, known).startswith("CREATE TABLE ")
    assert invent("email", {"type": "string", "format": "email"}, rng).endswith("@example.com")
    assert invent("x", {"type": "string"}, rng) is None  # nothing said: the caller decides
    for pattern in (r"^[A-Z]{3}-\d{4}$", r"^(red|blue)_[a-z]+$", r"\d{2}:\d{2}"):
        value = pattern_value(pattern, rng)
        assert value is not None and re.search(pattern, value)


def test_error_shaped_results() -> None:
    for text in ("Error: Only CREATE TABLE statements are allowed",
                 'Database error: near "selec": syntax error',
                 "Error executing tool git_commit: No changes staged",
                 "ENOENT: no such file or directory, open '/x'",
                 "Traceback (most recent call last):\n  File ...",
                 "ValueError: bad"):  # fmt: skip
        assert error_text(text) == text, text
    for text in ("Repository status:\nOn branch main", "[{'name': 'items'}]", "errors: 0",
                 "The error rate fell."):  # fmt: skip
        assert error_text(text) is None, text
    assert error_text({"error": "no such entity"}) == "no such entity"
    assert error_text({"success": False, "message": "nothing deleted"}) == "nothing deleted"
    assert error_text({"success": True, "message": "ok"}) is None
    assert error_text({"error": None, "items": []}) is None
    assert error_text("quota exceeded for today", [re.compile("quota exceeded")])
    boxed = (
        "│ ❱ 213 │ raise Unexpected │\n OSError: [Errno 30] Read-only file\n system: "
        "'/data/kv.log'\n The above exception\n UnexpectedToolError: Error executing tool log"
    )
    assert stderr_error(boxed) == "OSError: [Errno 30] Read-only file system: '/data/kv.log'"


def test_everyday_values_where_the_name_says_what_it_holds() -> None:
    """A simulated tool has no state and often no value in its spec: a quarter of a benchmark
    run's call values were two stock words ("budget draft" as a city, a username, a
    language), which a student then copied as the shape of every value."""
    from trajsynth.envs.values import everyday
    from trajsynth.stages.common.grounding import ValuePool

    rng = random.Random(0)
    s = {"type": "string"}
    places = [everyday("location", s, rng) for _ in range(200)]
    assert any(", " in p for p in places) and any(", " not in p for p in places)  # as people write
    assert all(re.fullmatch(r"[A-Z][\w .'-]+(, [A-Z][\w ]+)?", p) for p in places)
    # a pool a student cannot memorize: 200 draws, nearly as many places
    assert len(set(places)) > 150
    assert everyday("country", s, rng) in {"France", "Germany", "Japan", "Canada", "Brazil",
        "India", "Kenya", "Australia", "Mexico", "Italy", "Spain", "South Korea",
        "United States", "United Kingdom"}  # fmt: skip
    assert re.fullmatch(r"[A-Z]{2}", everyday("countryCode", s, rng))
    assert re.fullmatch(r"[a-z]{2}", everyday("src_lang", {**s, "description": "ISO code"}, rng))
    assert everyday("language", s, rng)[0].isupper()
    assert re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", everyday("receiver", s, rng))
    assert re.fullmatch(r"[A-Z][a-z]+", everyday("first_name", s, rng))
    assert re.fullmatch(r"[a-z_]+\d*", everyday("username", s, rng))
    assert re.fullmatch(r"\d{6}", everyday("verificationCode", s, rng))
    assert re.fullmatch(r"203\.0\.113\.\d+", everyday("ip", s, rng))
    assert re.fullmatch(r"[A-Z]{3}/[A-Z]{3}", everyday("currency_pair", s, rng))
    assert re.fullmatch(r"\d+ [\w ]+", everyday("addressLine1", s, rng))
    assert re.fullmatch(r"\d{5}", everyday("zipCode", s, rng))
    assert re.fullmatch(r"\w{12}", everyday("api_key", s, rng))
    assert " " in everyday("keyword", s, rng) and everyday("message", s, rng).endswith(
        (".", "!", "?")
    )
    # a name that says nothing, or a kind of its own: the caller decides
    for param in ("x", "name", "status", "file_name", "email", "city_id", "start_date"):
        assert everyday(param, s, rng) is None, param
    # a pool with no state: everyday values, an email of its kind, a few words for the rest
    pool = ValuePool({}, {})
    assert pool.invent("city", s, rng)[0].isupper()
    assert pool.invent("email", s, rng).endswith("@example.com")
    assert 2 <= len(pool.invent("status", s, rng).split()) <= 3


def test_an_invented_list_has_several_items_within_its_bounds() -> None:
    from trajsynth.stages.common.grounding import ValuePool

    rng, pool = random.Random(0), ValuePool({}, {})
    numbers = {"type": "array", "items": {"type": "integer"}}
    lists = [pool.invent("numbers", numbers, rng) for _ in range(60)]
    assert all(isinstance(x, int) for lst in lists for x in lst)
    sizes = {len(lst) for lst in lists}
    assert 1 in sizes and max(sizes) >= 4 and max(sizes) <= 6  # one item was all there was
    bounded = {**numbers, "minItems": 2, "maxItems": 3}
    assert {len(pool.invent("numbers", bounded, rng)) for _ in range(30)} == {2, 3}
    words = [pool.invent("tags", {"type": "array", "items": {"type": "string"}}, rng)
             for _ in range(30)]  # fmt: skip
    assert all(len(set(w)) == len(w) for w in words) and max(map(len, words)) > 1
    enum = {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c", "d"]}}
    picks = [pool.invent("details", enum, rng) for _ in range(30)]
    assert all(len(set(p)) == len(p) <= 3 and set(p) <= set("abcd") for p in picks)
    assert max(map(len, picks)) > 1
    objects = {"type": "array", "items": {"type": "object", "properties": {}}}
    assert pool.invent("rows", objects, rng) == [{}]  # one object, as before


def test_invented_values_are_too_many_to_memorize_and_read_as_people_write_them() -> None:
    """A 135M student trained on values from a dozen names and cities wrote
    ``location="New York"`` for a BFCL request about Manhattan: values that recur are learned
    as priors instead of copied. Integers were 1-5 wherever a schema gave no bounds."""
    from trajsynth.envs import vocab
    from trajsynth.envs.simulated import make_value
    from trajsynth.stages.common.grounding import ValuePool

    rng = random.Random(1)
    names = {f"{vocab.first_name(rng)} {vocab.last_name(rng)}" for _ in range(500)}
    assert len(names) >= 495 and all(re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", n) for n in names)
    assert len({vocab.phrase(rng) for _ in range(500)}) >= 495
    assert len({vocab.company(rng) for _ in range(300)}) >= 280

    ints = [vocab.integer_like("quantity", {"type": "integer"}, rng) for _ in range(2000)]
    assert sum(i <= 10 for i in ints) / 2000 == pytest.approx(0.5, abs=0.05)  # counts
    assert sum(i >= 1000 for i in ints) > 100  # and 1,200, 12,000 as people write them
    assert all(1950 <= vocab.integer_like("birth_year", {}, rng) <= 2030 for _ in range(50))
    bounded = {"type": "integer", "minimum": 3, "exclusiveMaximum": 7}
    assert {vocab.integer_like("n", bounded, rng) for _ in range(300)} == {3, 4, 5, 6}
    nums = [vocab.number_like("price", {"minimum": 0.5, "maximum": 99}, rng) for _ in range(500)]
    assert all(0.5 <= x <= 99 for x in nums) and len(set(nums)) > 200
    # a whole number as people write it: 20, never 20.0 (a float only where it has a fraction)
    assert 20 < sum(isinstance(x, int) for x in nums) < 400
    assert all(isinstance(x, int) or not x.is_integer() for x in nums)

    days = {vocab.date_like(rng) for _ in range(300)}
    assert len(days) > 250 and all(re.fullmatch(r"202[4-7]-\d\d-\d\d", d) for d in days)

    # both places that invent values use them
    pool = ValuePool({}, {})
    drawn = {pool.invent("count", {"type": "integer"}, rng) for _ in range(200)}
    assert max(drawn) >= 100 and min(drawn) >= 1
    made = {make_value("slogan", {"type": "string"}, rng) for _ in range(100)}
    assert len(made) >= 95 and not any(re.search(r"\d", m) for m in made)


def test_pools_and_code_state_are_the_same_in_every_process() -> None:
    """A seeded run makes the same rows in another process: the value pools come out in one
    order (faker builds Italy's city list from a set) and a code environment's state hash
    holds no memory address (four of BFCL's API classes keep a ``random.Random``). Both had
    varied with the process's string-hash seed: 411 of 1,440 tasks of a benchmark run differed
    in a second run of the same pipeline."""
    pytest.importorskip("bfcl_eval")
    script = (
        "import hashlib\n"
        "from trajsynth.envs import CodeEnvironment, vocab\n"
        "from trajsynth.envs.code import toolset_from_targets\n"
        "t = 'bfcl_eval.eval_checker.multi_turn_eval.func_source_code.message_api:MessageAPI'\n"
        "env = CodeEnvironment('m', [t], toolset_from_targets([t], name='m'))\n"
        "env.reset()\n"
        "pools = '|'.join(vocab._places() + vocab._names()[0] + vocab._words())\n"
        "print(hashlib.md5(pools.encode()).hexdigest(), env.state_hash())\n"
    )
    out = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(out) == 1, out
