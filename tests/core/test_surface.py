"""Surface forms of argument values: every form a writer may use maps back to exactly the
gold value, and a value merely contained in another one is not "stated".

Run: PYTHONPATH=. python -m pytest tests/core/test_surface.py -q
"""

from __future__ import annotations

import random

import pytest

from trajsynth.core.surface import FORMS, find, forms, other_form, stated, write


@pytest.mark.parametrize(
    "value",
    ["2024-03-05", "2025-12-01", "14:30", "09:00", "12:00", "00:15", "EUR", "JPY", 2, 7, 10,
     5000, 250000, 1250, 1_500_000, 42.195, 5000.0, "Paris", "#W1003", "report_v2.txt"],
)  # fmt: skip
def test_every_form_reads_back_as_that_form(value: object) -> None:
    plain = forms(value)[0][1]
    for form, text in forms(value):
        assert form in FORMS
        expected = "verbatim" if plain in text else form  # "12:00 PM" holds "12:00"
        assert find(value, f"Please use {text} for it.") == expected, text


def test_forms_map_back_to_one_value_only() -> None:
    # a date written long is that date and no other; a time with am/pm is one 24-hour time
    assert find("2024-03-05", "on March 5, 2024") == "date_long"
    assert find("2024-03-06", "on March 5, 2024") is None
    assert find("2023-03-05", "on March 5, 2024") is None
    assert find("14:30", "at 2:30 pm") == "time_12h" and find("02:30", "at 2:30 pm") is None
    assert find("12:00", "at noon") == "time_12h" and find("00:00", "at noon") is None
    # no form without a year, and no "dollars" for USD (CAD, AUD are dollars too)
    assert all("2024" in text for _, text in forms("2024-03-05"))
    assert dict(forms("USD"))["currency_name"] == "US dollars"
    assert not stated("USD", "in dollars")


def test_numbers_are_whole_numbers_not_digits_inside_others() -> None:
    assert not stated(2, "leaving 2026-05-01") and not stated(2, "version 2.5")
    assert not stated(5, "order #W1053") and not stated(50, "5,000 units")
    assert stated(2, "for 2 people.") and stated(2, "for two people")
    assert stated(5000, "a budget of 5,000") and stated(5000, "about 5k")
    assert stated(5.0, "round 5 up") and stated(42.195, "42.195 km")
    assert not stated(5001, "5k")


def test_a_unit_written_against_a_number_is_that_number() -> None:
    assert find(440, "notes of 440Hz and 880Hz") == "unit" and find(880, "of 880Hz") == "unit"
    assert find(20, "a wall 20ft wide.") == "unit" and find(2.5, "about 2.5kg") == "unit"
    assert find(5000, "at 5,000m up") == "unit"  # thousands and a unit
    assert find(20, "a wall 20 ft wide") == "verbatim" and find(999, "for $999") == "verbatim"
    # only unit symbols, in their case: not "5k", "2nd", "5M", "20fts", nor digits of another
    assert not stated(5, "5M") and not stated(2, "the 2nd") and not stated(20, "20fts")
    assert not stated(5001, "5k") and not stated(40, "440Hz") and not stated(5, "2.5kg")


def test_strings_lists_objects_and_flags() -> None:
    assert stated("Paris", "from paris") and not stated("Paris", "Parisian food")
    assert stated(["c_dana", "c_raj"], "invite c_dana and c_raj")
    assert not stated(["c_dana", "c_raj"], "invite c_dana")
    assert find(["2025-06-18", "x"], "on June 18, 2025 and x") == "date_long"
    assert stated({"city": "Oslo", "days": 3}, "city Oslo, days 3")
    # a switch or a null is stated by naming its parameter
    assert stated(True, "unread only please", "unread_only")
    assert not stated(False, "show everything", "unread_only")
    assert stated(None, "with no max price", "max_price")


def test_write_keeps_most_values_verbatim_and_is_seeded() -> None:
    rng = random.Random(0)
    drawn = [write("2024-03-05", rng)[0] for _ in range(400)]
    assert 0.5 < drawn.count("verbatim") / 400 < 0.7  # transform_p = 0.4
    assert [write(7, random.Random(3)) for _ in range(3)] == [write(7, random.Random(3))] * 3
    assert write("no-other-form", rng) == ("verbatim", "no-other-form")


def test_other_form_reads_casefolded_text() -> None:
    """The quality scores read casefolded text and floats: a date written long, a currency by
    name and a number in words still count as grounded there."""
    assert other_form("2026-05-01", "from paris on may 1, 2026") == "date_long"
    assert other_form("eur", "in euros") == "currency_name"
    assert other_form(2.0, "for two nights") == "number_word"
    assert other_form("paris", "from paris") is None  # verbatim is the caller's check
    assert other_form(3.5, "three and a half") is None


def test_a_code_is_named_by_what_its_parameter_says_it_codes() -> None:
    """ "CA" is California for a state and Canada for a country; the name maps back to the
    code only through the parameter, and a code cased unlike its table has no name."""
    assert dict(forms("DE", "country_code"))["code_name"] == "Germany"
    assert dict(forms("DEU", "country"))["code_name"] == "Germany"
    assert dict(forms("DE", "state"))["code_name"] == "Delaware"
    assert dict(forms("fr", "target_language"))["code_name"] == "French"
    assert dict(forms("C", "temperature_unit"))["code_name"] == "Celsius"
    assert "code_name" not in dict(forms("de", "country"))  # not how countries are written
    assert "code_name" not in dict(forms("DE"))  # no parameter: no name
    assert "code_name" not in dict(forms("DE", "department"))
    assert find("CA", "I live in California", "state") == "code_name"
    assert find("CA", "I live in California", "country") is None
    assert find("CA", "moving to Canada", "country") == "code_name"
    assert find("US", "prices in the United States", "country") == "code_name"
    assert find(["DE", "FR"], "Germany and France", "countries") == "code_name"
    assert find("fr", "translate it into French", "lang") == "code_name"
    # without a parameter (the quality scores' casefolded text): any table the code is in
    assert other_form("ca", "moving to canada") == "code_name"
    assert other_form("ca", "i live in california") == "code_name"
    assert other_form("c", "in celsius") == "code_name"
    assert other_form("de", "a trip to spain") is None


def test_millions_are_written_and_read_back_exactly() -> None:
    assert dict(forms(2_500_000))["millions"] == "2.5 million"
    assert dict(forms(20_000_000.0))["millions"] == "20 million"
    assert "millions" not in dict(forms(2_345_678)) and "millions" not in dict(forms(500_000))
    assert find(2_500_000, "a payout of 2.5 million dollars") == "millions"
    assert find(1_000_000, "a budget of 1 million") == "millions"
    assert not stated(20_000_000, "2 million") and not stated(2_000_000, "12 million")
    assert not stated(2_000_000, "1.2 million")
    assert other_form(1_500_000.0, "about 1.5 million shares") == "millions"
