"""Volatile parts of tool results (trajsynth.core.volatile): the clock and minted ids are left
out of a comparison, everything else is compared.

Run: PYTHONPATH=. python -m pytest tests/core/test_volatile.py -q
"""

from __future__ import annotations

import json

from trajsynth.core.volatile import mask, same_result


def test_times_in_json_and_text_are_masked() -> None:
    first = {"timezone": "Europe/London", "datetime": "2026-12-03T07:36:50+00:00",
             "day_of_week": "Thursday", "is_dst": False}  # fmt: skip
    later = {**first, "datetime": "2026-12-04T00:00:01+00:00", "day_of_week": "Friday"}
    assert same_result(json.dumps(first), json.dumps(later))
    assert not same_result(first, {**later, "timezone": "Asia/Tokyo"})  # the rest still counts
    git = "Commit: 1a2b3c4\nAuthor: Ada\nDate: {}\nMessage: Add notes\n"
    assert same_result(git.format("2024-05-01 10:00:00+00:00"), git.format("2025-01-01 09:00:00"))
    assert not same_result(git.format("2024-05-01 10:00"), git.replace("Ada", "Bob").format("x"))
    info = "size: 12\nmodified: Thu Dec 03 2026 07:36:32 GMT+0000 (Coordinated Universal Time)"
    assert mask(info) == "size: 12\nmodified: <time>"
    assert mask("Date:   Thu Dec 3 07:36:32 2026 +0000") == "Date:   <time>"


def test_ids_epochs_and_time_members() -> None:
    a = {"id": "0b5e0bd6-8f6e-4c1e-9a57-6c1f1f0d3a10", "mtimeMs": 1764747392123, "n": 3}
    b = {"id": "5f1d3c2a-1b2c-4d5e-8f90-a1b2c3d4e5f6", "mtimeMs": 1764747399000, "n": 3}
    assert same_result(a, b) and not same_result(a, {**b, "n": 4})
    assert mask({"created_at": "yesterday", "updatedAt": 5, "name": "x"}) == {
        "created_at": "<time>", "updatedAt": "<time>", "name": "x"}  # fmt: skip
    assert mask({"date": "2025-07-01", "is_dst": True}, loose=False) == {
        "date": "2025-07-01", "is_dst": "<time>"}  # fmt: skip
    assert mask({"price": 12.5, "count": 3, "year": 2024}) == {"price": 12.5, "count": 3,
                                                              "year": 2024}  # fmt: skip
