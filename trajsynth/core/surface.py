"""Surface forms of argument values: how a person writes a value in a request, and reading it
back.

People rarely type an argument the way a tool takes it: "March 5, 2024" for ``"2024-03-05"``,
"5,000" for ``5000``, "two" for ``2``, "euros" for ``"EUR"``. Each form below has exactly one
inverse, so a careful reader recovers the one gold value from it; a form whose inverse is
ambiguous ("March 5th" without a year, "5 o'clock", "a couple", "dollars") is not used.

=============  ===================================  ==========================================
form           value                                written as
=============  ===================================  ==========================================
verbatim       anything                             as it is (strings in any letter case)
date_long      ISO date ``YYYY-MM-DD``              "March 5, 2024", "5 March 2024",
                                                    "Mar 5, 2024", "March 5th, 2024"
time_12h       ``HH:MM``, 24-hour                   "2:30 pm", "2:30 PM", "9 am", "noon"
number_word    integer 2..10                        "two" ... "ten"
thousands      integer (or whole float) ≥ 1,000     "5,000"; a whole number of thousands
                                                    below a million also "5k"
currency_name  ISO code of a major currency         "euros", "US dollars", "Japanese yen", ...
unit           a number                             with a unit symbol written against it:
                                                    "20ft", "440Hz", "2.5kg" (a unit after a
                                                    space, "$" before, "%" after: verbatim)
=============  ===================================  ==========================================

Lists are stated item by item (each item in any of its forms), objects value by value. A
boolean or a null has no form of its own: a request states it by naming the parameter
("nonstop only", "without a price limit"), so :func:`find` accepts it when the parameter's
words appear. Numbers match as whole numbers only ("2" is not stated by "2026-05-01").

:func:`forms` lists a value's forms (verbatim first), :func:`write` picks one, :func:`find`
says which form states a value in a text, :func:`stated` whether one does.

>>> forms("2024-03-05")[:2]
[('verbatim', '2024-03-05'), ('date_long', 'March 5, 2024')]
>>> find("2024-03-05", "Book it for Mar 5, 2024 please.")
'date_long'
>>> stated(2, "from 2026-05-01"), stated(2, "for two people")
(False, True)
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from .text import split_words

__all__ = ["FORMS", "find", "forms", "other_form", "param_words", "stated", "verbatim", "write"]

#: every form a value may be written in (see the module docstring)
FORMS = ("verbatim", "date_long", "time_12h", "number_word", "thousands", "currency_name", "unit")

_MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip
_MONTH_NUMBER = {m.lower(): i + 1 for i, m in enumerate(_MONTHS)} | {
    m[:3].lower(): i + 1 for i, m in enumerate(_MONTHS)
}
_MONTH_RE = (
    r"(?P<mon>" + "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True)) + r")\.?"
)  # longest first: "march" before "mar"
_DATE_US = re.compile(
    rf"\b{_MONTH_RE}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<year>\d{{4}})\b", re.I
)
_DATE_EU = re.compile(
    rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_RE},?\s+(?P<year>\d{{4}})\b", re.I
)
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_TIME_12H = re.compile(r"(?<![\d:])(\d{1,2})(?::([0-5]\d))?\s?([ap])\.?m\.?(?!\w)", re.I)
_NUMBER_WORDS = {
    2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine",
    10: "ten",
}  # fmt: skip
_CURRENCIES = {
    "USD": "US dollars",
    "EUR": "euros",
    "GBP": "British pounds",
    "JPY": "Japanese yen",
    "CHF": "Swiss francs",
    "CAD": "Canadian dollars",
    "AUD": "Australian dollars",
    "SEK": "Swedish kronor",
    "CNY": "Chinese yuan",
    "INR": "Indian rupees",
    "MXN": "Mexican pesos",
}


def param_words(param: str) -> str:
    """A parameter identifier as words: ``"maxPrice"``, ``"max_price"`` → ``"max price"``."""
    return " ".join(split_words(param))


def verbatim(value: Any) -> str:
    """The value written as it is (a string as is, anything else as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if abs(value) >= 1000 else str(value)
    return json.dumps(value, ensure_ascii=False)


def _whole(value: Any) -> int | None:
    """The value as an integer when it is a whole number (not a bool), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return None


def forms(value: Any) -> list[tuple[str, str]]:
    """Every ``(form, text)`` of a scalar value, verbatim first."""
    out = [("verbatim", verbatim(value))]
    if isinstance(value, str):
        m = _ISO_DATE.match(value)
        if m and 1 <= int(m.group(2)) <= 12 and 1 <= int(m.group(3)) <= 31:
            y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
            month = _MONTHS[mo - 1]
            suffix = "th" if 11 <= d <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
            out += [
                ("date_long", f"{month} {d}, {y}"),
                ("date_long", f"{d} {month} {y}"),
                ("date_long", f"{month[:3]} {d}, {y}"),
                ("date_long", f"{month} {d}{suffix}, {y}"),
            ]
        m = _HHMM.match(value)
        if m:
            h, mi = int(m.group(1)), int(m.group(2))
            half = "am" if h < 12 else "pm"
            h12 = h % 12 or 12
            if mi == 0:
                out += [("time_12h", f"{h12} {half}"), ("time_12h", f"{h12}:00 {half.upper()}")]
                if h == 12:
                    out.append(("time_12h", "noon"))
            else:
                out += [
                    ("time_12h", f"{h12}:{mi:02d} {half}"),
                    ("time_12h", f"{h12}:{mi:02d} {half.upper()}"),
                ]
        if value in _CURRENCIES:
            out.append(("currency_name", _CURRENCIES[value]))
        return out
    n = _whole(value)
    if n is not None:
        if n in _NUMBER_WORDS and isinstance(value, int):
            out.append(("number_word", _NUMBER_WORDS[n]))
        if abs(n) >= 1000:
            out.append(("thousands", f"{n:,}"))
            if n % 1000 == 0 and abs(n) < 1_000_000:
                out.append(("thousands", f"{n // 1000}k"))
    return out


def write(value: Any, rng: random.Random, *, transform_p: float = 0.4) -> tuple[str, str]:
    """``(form, text)``: verbatim, or with probability ``transform_p`` another form of the
    value where it has one (drawn from ``rng``)."""
    options = forms(value)
    if len(options) > 1 and rng.random() < transform_p:
        return rng.choice(options[1:])
    return options[0]


# --------------------------------------------------------------------------------------
# reading a value back
# --------------------------------------------------------------------------------------


def _number_in(n_text: str, text: str) -> bool:
    """Whole-number match: not inside a longer number, a date or a version."""
    pattern = rf"(?<![\w.])(?<!\d,){re.escape(n_text)}(?!\w)(?!\.\d)(?!,\d{{3}})"
    return re.search(pattern, text) is not None


#: unit symbols a person writes against a number ("20ft", "440Hz"); case matters ("m", "M")
GLUED_UNITS = (
    "ft", "m", "cm", "mm", "km", "mi", "kg", "g", "mg", "lb", "lbs", "oz", "Hz", "kHz", "MHz",
    "GHz", "L", "ml", "mL", "W", "kW", "kWh", "V", "mph", "K", "s", "ms", "GB", "MB", "TB",
)  # fmt: skip
_GLUED = "|".join(sorted(GLUED_UNITS, key=len, reverse=True))


def _unit_in(n_text: str, text: str) -> bool:
    """The number with a unit symbol against it ("440Hz"), not inside a longer number."""
    pattern = rf"(?<![\w.])(?<!\d,){re.escape(n_text)}(?:{_GLUED})(?!\w)"
    return re.search(pattern, text) is not None


def _string_in(value: str, text: str) -> bool:
    """Case-insensitive match that does not start or end inside a word."""
    if not value:
        return True
    left = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    return re.search(left + re.escape(value) + right, text, re.I) is not None


def _dates_in(text: str) -> set[str]:
    """ISO dates written with a month name in ``text``."""
    out = set()
    for rx in (_DATE_US, _DATE_EU):
        for m in rx.finditer(text):
            mo = _MONTH_NUMBER[m.group("mon").lower()]
            d, y = int(m.group("day")), int(m.group("year"))
            if 1 <= d <= 31:
                out.add(f"{y:04d}-{mo:02d}-{d:02d}")
    return out


def _times_in(text: str) -> set[str]:
    """24-hour times written as 12-hour times ("2:30 pm", "9 AM", "noon") in ``text``."""
    out = set()
    for m in _TIME_12H.finditer(text):
        h, mi = int(m.group(1)), int(m.group(2) or 0)
        if 1 <= h <= 12:
            h24 = h % 12 + (12 if m.group(3).lower() == "p" else 0)
            out.add(f"{h24:02d}:{mi:02d}")
    if re.search(r"\bnoon\b", text, re.I):
        out.add("12:00")
    return out


def _scalar(value: Any, text: str) -> str | None:
    if isinstance(value, str):
        if _string_in(value, text):
            return "verbatim"
        if _ISO_DATE.match(value) and value in _dates_in(text):
            return "date_long"
        if _HHMM.match(value) and value in _times_in(text):
            return "time_12h"
        if value in _CURRENCIES and _string_in(_CURRENCIES[value], text):
            return "currency_name"
        return None
    n = _whole(value)
    if n is not None:
        candidates = {str(n), verbatim(value)}
        if isinstance(value, float):
            candidates.add(str(value))
        if any(_number_in(c, text) for c in candidates):
            return "verbatim"
        if isinstance(value, int) and n in _NUMBER_WORDS and _string_in(_NUMBER_WORDS[n], text):
            return "number_word"
        if abs(n) >= 1000 and (
            _number_in(f"{n:,}", text)
            or (n % 1000 == 0 and re.search(rf"(?<![\w.]){n // 1000}k\b", text, re.I))
        ):
            return "thousands"
        if any(_unit_in(c, text) for c in {*candidates, f"{n:,}"}):  # "5,000m" too
            return "unit"
        return None
    if isinstance(value, float):
        candidates = {str(value), f"{value:g}", repr(value)}
        if any(_number_in(c, text) for c in candidates):
            return "verbatim"
        if any(_unit_in(c, text) for c in candidates):
            return "unit"
        return None
    return "verbatim" if _string_in(verbatim(value), text) else None


def other_form(value: Any, text: str) -> str | None:
    """The form other than verbatim in which ``text`` states a scalar ``value`` (a currency
    code in any letter case), or None; cheap for values that have no other form."""
    if isinstance(value, str):
        code = value.upper()
        if code in _CURRENCIES and _string_in(_CURRENCIES[code], text):
            return "currency_name"
        if _ISO_DATE.match(value) and value in _dates_in(text):
            return "date_long"
        if _HHMM.match(value) and value in _times_in(text):
            return "time_12h"
        return None
    n = _whole(value)
    if n is None or (n not in _NUMBER_WORDS and abs(n) < 1000):
        return None
    found = _scalar(n if isinstance(value, float) and n in _NUMBER_WORDS else value, text)
    return found if found != "verbatim" else None


def find(value: Any, text: str, param: str | None = None) -> str | None:
    """The form in which ``text`` states ``value`` (the first non-verbatim one of a list's
    items), or None when it does not. A boolean, a null or an empty string is stated when
    ``param``'s words appear (always, without ``param``)."""
    if isinstance(value, bool) or value is None or value == "":
        if param is None:
            return "verbatim"
        words = param_words(param)
        flat = re.sub(r"[-_]", " ", text)
        return "verbatim" if _string_in(words, flat) else None
    if isinstance(value, list):
        found = [find(v, text, param) for v in value]
        if any(f is None for f in found):
            return None
        return next((f for f in found if f != "verbatim"), "verbatim")
    if isinstance(value, dict):
        found = [find(v, text, str(k)) for k, v in value.items()]
        if any(f is None for f in found):
            return None
        return next((f for f in found if f != "verbatim"), "verbatim")
    return _scalar(value, text)


def stated(value: Any, text: str, param: str | None = None) -> bool:
    """Whether ``text`` states ``value`` in one of its forms (see :func:`find`)."""
    return find(value, text, param) is not None
