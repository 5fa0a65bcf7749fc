"""Argument values a tool accepts (trajsynth.envs.values) and what an MCP server's answer means
(trajsynth.envs.mcp.results): values follow what a spec and its description say; error-shaped
results are failures.

Run: PYTHONPATH=. python -m pytest tests/envs/test_values.py -q
"""

from __future__ import annotations

import random
import re

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
    places = {everyday("location", s, rng) for _ in range(60)}
    assert {"Paris", "Paris, France"} <= places  # with and without the region, as people write
    assert all(re.fullmatch(r"[A-Z][\w .]+(, [A-Z][\w ]+)?", p) for p in places)
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
    # a pool with no state: everyday values, an email of its kind, two words for the rest
    pool = ValuePool({}, {})
    assert pool.invent("city", s, rng)[0].isupper()
    assert pool.invent("email", s, rng).endswith("@example.com")
    assert len(pool.invent("status", s, rng).split()) == 2


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
