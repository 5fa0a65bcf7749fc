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
millions       whole number of 100,000s ≥ 1,000,000 "1.5 million", "20 million"
currency_name  ISO code of a major currency         "euros", "US dollars", "Japanese yen", ...
unit           a number                             with a unit symbol written against it:
                                                    "20ft", "440Hz", "2.5kg" (a unit after a
                                                    space, "$" before, "%" after: verbatim)
code_name      a code for a parameter that says     what the code stands for: "Germany" for
               what it codes (its words name a      a country's "DE" or "DEU", "Texas" for a
               country, a state, a language or a    state's "TX", "French" for a language's
               unit)                                "fr", "Celsius" for a unit's "C"
=============  ===================================  ==========================================

A code has a name only where the parameter says which code it is: "CA" is California for a
``state`` and Canada for a ``country``, "IN" Indiana or India; the writer names it by the
parameter and the reader maps the name back by the parameter (:func:`other_form`, which has
no parameter, accepts the name of any table the code is in). The person writing a request
says "Germany" where the tool takes "DE": an inference real requests ask of a model, which a
request stating every value verbatim never teaches.

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

__all__ = [
    "FORMS", "code_name", "find", "forms", "other_form", "param_words", "stated", "verbatim",
    "write",
]  # fmt: skip

#: every form a value may be written in (see the module docstring)
FORMS = (
    "verbatim", "date_long", "time_12h", "number_word", "thousands", "millions",
    "currency_name", "unit", "code_name",
)  # fmt: skip

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


def _pairs(text: str) -> dict[str, str]:
    """'AL Alabama|AK Alaska', over lines → {"AL": "Alabama", "AK": "Alaska"}."""
    return dict(p.strip().split(" ", 1) for p in re.split(r"[|\n]", text) if p.strip())


#: ISO 3166 codes (alpha-2/alpha-3) of countries people name often → the country
_COUNTRIES = {
    code: name
    for codes, name in _pairs("""
        US/USA the United States|GB/GBR the United Kingdom|CA/CAN Canada|MX/MEX Mexico
        BR/BRA Brazil|AR/ARG Argentina|CL/CHL Chile|CO/COL Colombia|PE/PER Peru|FR/FRA France
        DE/DEU Germany|IT/ITA Italy|ES/ESP Spain|PT/PRT Portugal|NL/NLD the Netherlands
        BE/BEL Belgium|CH/CHE Switzerland|AT/AUT Austria|SE/SWE Sweden|NO/NOR Norway
        DK/DNK Denmark|FI/FIN Finland|IE/IRL Ireland|PL/POL Poland|CZ/CZE the Czech Republic
        GR/GRC Greece|TR/TUR Turkey|RU/RUS Russia|UA/UKR Ukraine|IL/ISR Israel|EG/EGY Egypt
        ZA/ZAF South Africa|NG/NGA Nigeria|KE/KEN Kenya|MA/MAR Morocco|SA/SAU Saudi Arabia
        AE/ARE the United Arab Emirates|IN/IND India|PK/PAK Pakistan|CN/CHN China|JP/JPN Japan
        KR/KOR South Korea|TW/TWN Taiwan|SG/SGP Singapore|TH/THA Thailand|VN/VNM Vietnam
        ID/IDN Indonesia|MY/MYS Malaysia|PH/PHL the Philippines|AU/AUS Australia
        NZ/NZL New Zealand""").items()
    for code in codes.split("/")
}
#: US states (and DC) by their postal codes
_STATES = _pairs("""
    AL Alabama|AK Alaska|AZ Arizona|AR Arkansas|CA California|CO Colorado|CT Connecticut
    DE Delaware|FL Florida|GA Georgia|HI Hawaii|ID Idaho|IL Illinois|IN Indiana|IA Iowa
    KS Kansas|KY Kentucky|LA Louisiana|ME Maine|MD Maryland|MA Massachusetts|MI Michigan
    MN Minnesota|MS Mississippi|MO Missouri|MT Montana|NE Nebraska|NV Nevada|NH New Hampshire
    NJ New Jersey|NM New Mexico|NY New York|NC North Carolina|ND North Dakota|OH Ohio
    OK Oklahoma|OR Oregon|PA Pennsylvania|RI Rhode Island|SC South Carolina|SD South Dakota
    TN Tennessee|TX Texas|UT Utah|VT Vermont|VA Virginia|WA Washington|WV West Virginia
    WI Wisconsin|WY Wyoming|DC the District of Columbia""")
#: ISO 639-1 language codes → the language
_LANGUAGES = _pairs("""
    en English|fr French|de German|es Spanish|it Italian|pt Portuguese|nl Dutch|ru Russian
    zh Chinese|ja Japanese|ko Korean|ar Arabic|hi Hindi|sv Swedish|pl Polish|tr Turkish
    el Greek|he Hebrew|vi Vietnamese|th Thai|id Indonesian|uk Ukrainian|cs Czech|da Danish
    fi Finnish|no Norwegian|hu Hungarian|ro Romanian|bn Bengali|fa Persian""")
#: unit symbols a unit parameter takes → the unit's name
_UNITS = {
    "C": "Celsius", "F": "Fahrenheit", "K": "Kelvin", "km": "kilometers", "mi": "miles",
    "m": "meters", "cm": "centimeters", "mm": "millimeters", "ft": "feet", "kg": "kilograms",
    "g": "grams", "lb": "pounds", "lbs": "pounds", "oz": "ounces", "L": "liters",
    "ml": "milliliters", "mph": "miles per hour", "kph": "kilometers per hour",
}  # fmt: skip
#: what a parameter's words say its code is: the word → (table, how its codes are cased)
_CODE_KINDS: dict[str, tuple[dict[str, str], str]] = {
    "country": (_COUNTRIES, "upper"),
    "countries": (_COUNTRIES, "upper"),
    "nationality": (_COUNTRIES, "upper"),
    "state": (_STATES, "upper"),
    "states": (_STATES, "upper"),
    "language": (_LANGUAGES, "lower"),
    "languages": (_LANGUAGES, "lower"),
    "lang": (_LANGUAGES, "lower"),
    "unit": (_UNITS, "exact"),
    "units": (_UNITS, "exact"),
}

#: each table once, its codes casefolded (for :func:`other_form`, which reads casefolded text)
_FOLDED_CODES = tuple(
    {code.lower(): name for code, name in table.items()}
    for table in (_COUNTRIES, _STATES, _LANGUAGES, _UNITS)
)


def _code_table(param: str | None) -> tuple[dict[str, str], str] | None:
    """The code table a parameter's words name ("country_code": countries), or None."""
    if not param:
        return None
    words = param_words(param).lower().split()
    return next((_CODE_KINDS[w] for w in reversed(words) if w in _CODE_KINDS), None)


def _code_key(value: str, case: str) -> str:
    return value.upper() if case == "upper" else value.lower() if case == "lower" else value


def code_name(value: Any, param: str | None) -> str | None:
    """What the code ``value`` stands for, by what ``param`` says it codes ("DE" for
    ``country_code`` → "Germany", for ``state`` → "Delaware"), or None. A value that is not
    written as the table writes its codes ("de" for a country) has no name."""
    kind = _code_table(param)
    if kind is None or not isinstance(value, str):
        return None
    table, case = kind
    if _code_key(value, case) != value:
        return None
    return table.get(value)


def _name_in(name: str, text: str) -> bool:
    return _string_in(name.removeprefix("the "), text)


_MILLIONS = re.compile(r"(?<![\w.,])(\d+(?:\.\d+)?) million\b", re.I)


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


def forms(value: Any, param: str | None = None) -> list[tuple[str, str]]:
    """Every ``(form, text)`` of a scalar value (given to ``param``, whose words may say what
    a code stands for), verbatim first."""
    out = [("verbatim", verbatim(value))]
    if isinstance(value, str):
        name = code_name(value, param)
        if name is not None:
            out.append(("code_name", name))
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
        if abs(n) >= 1_000_000 and n % 100_000 == 0:
            out.append(("millions", f"{n / 1_000_000:g} million"))
    return out


def write(
    value: Any, rng: random.Random, *, transform_p: float = 0.4, param: str | None = None
) -> tuple[str, str]:
    """``(form, text)``: verbatim, or with probability ``transform_p`` another form of the
    value (given to ``param``) where it has one (drawn from ``rng``)."""
    options = forms(value, param)
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


def _millions_in(n: int, text: str) -> bool:
    return any(round(float(m.group(1)) * 1_000_000) == n for m in _MILLIONS.finditer(text))


def _scalar(value: Any, text: str, param: str | None = None) -> str | None:
    if isinstance(value, str):
        if _string_in(value, text):
            return "verbatim"
        name = code_name(value, param)
        if name is not None and _name_in(name, text):
            return "code_name"
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
        if abs(n) >= 1_000_000 and _millions_in(n, text):
            return "millions"
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
        for folded in _FOLDED_CODES:  # no parameter: any table the code is in, in any case
            name = folded.get(value.lower())
            if name is not None and _name_in(name, text):
                return "code_name"
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
    return _scalar(value, text, param)


def stated(value: Any, text: str, param: str | None = None) -> bool:
    """Whether ``text`` states ``value`` in one of its forms (see :func:`find`)."""
    return find(value, text, param) is not None
