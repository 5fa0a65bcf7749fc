"""Math and units: arithmetic, unit conversion, statistics, finance, and named memory slots.

State tables: ``memory`` (named values the user stores and recalls) and ``units`` (the unit
table: dimension and factor to the SI base). The seed pre-fills a few memory slots; the core
slot ``tax_rate`` is the same for every seed.

``calculate`` evaluates arithmetic with Python's ``ast`` (numbers, + - * / // % **, unary
minus, parentheses, a few functions and constants); nothing else is evaluated, so it is safe
without a sandbox (use the ``python_exec`` tool for real code).

Failure modes: a malformed expression, division by zero, an overflowing power or an
incompatible unit pair (``invalid_value``); an unknown unit or memory slot (``not_found``);
a quadratic with a = 0 (``invalid_value``).

Data flow: calculate.result / convert_units.result / statistics.results → store_value.value
→ recall_value.value → any number parameter; quadratic_roots.roots → statistics.numbers.
"""

from __future__ import annotations

import ast
import math
import operator
import statistics as stats_lib
from collections.abc import Callable
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, ROUND_UP, Decimal, InvalidOperation
from typing import Annotated, Literal, TypedDict

from ..domain import Domain
from ..state import State
from ..tasks import call, ref, task, turn
from ..tools import ToolError, tool
from ._common import get_or_fail, rng_for

# unit → (dimension, factor to the SI base unit); temperature is handled separately
UNITS = {
    "m": ("length", 1.0), "km": ("length", 1000.0), "cm": ("length", 0.01),
    "mm": ("length", 0.001), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
    "in": ("length", 0.0254), "yd": ("length", 0.9144),
    "kg": ("mass", 1.0), "g": ("mass", 0.001), "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "l": ("volume", 0.001), "ml": ("volume", 1e-6), "gal": ("volume", 0.003785411784),
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0), "day": ("time", 86400.0),
    "km/h": ("speed", 1 / 3.6), "m/s": ("speed", 1.0), "mph": ("speed", 0.44704),
    "c": ("temperature", 1.0), "f": ("temperature", 1.0), "k": ("temperature", 1.0),
}  # fmt: skip
_OPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}
_CONSTS = {"pi": math.pi, "e": math.e}


def build_state(seed: int) -> dict[str, dict]:
    rng = rng_for("math", seed)
    memory = {"tax_rate": {"name": "tax_rate", "value": 0.0825}}
    for name in rng.sample(["budget", "target", "last_total", "rent", "distance_km"], k=3):
        memory[name] = {"name": name, "value": float(rng.randrange(10, 5000))}
    units = {u: {"unit": u, "dimension": d, "factor": f} for u, (d, f) in UNITS.items()}
    return {"memory": memory, "units": units}


class CalcResult(TypedDict):
    expression: Annotated[str, "The expression evaluated."]
    result: Annotated[float, "Its value, rounded to the requested precision."]


class UnitResult(TypedDict):
    value: Annotated[float, "The input value."]
    from_unit: Annotated[str, "Unit converted from."]
    to_unit: Annotated[str, "Unit converted to."]
    result: Annotated[float, "The value in to_unit (6 significant decimals)."]
    dimension: Annotated[str, "What is measured (length, mass, ...)."]


class StatsResult(TypedDict):
    count: Annotated[int, "How many numbers."]
    results: Annotated[dict[str, float], "Each requested measure's value."]


class QuadraticResult(TypedDict):
    roots: Annotated[list[float], "Real roots, ascending (empty when complex)."]
    discriminant: Annotated[float, "b^2 - 4ac."]
    kind: Annotated[Literal["two_real", "one_real", "complex"], "Kind of roots."]


class StoredValue(TypedDict):
    name: Annotated[str, "Memory slot name; pass it to recall_value."]
    value: Annotated[float, "The stored value."]
    previous: Annotated[float | None, "The value it replaced, if any."]


class RecalledValue(TypedDict):
    name: Annotated[str, "Memory slot name."]
    value: Annotated[float, "The value stored there."]


class ValueList(TypedDict):
    values: Annotated[list[RecalledValue], "Every stored value, by name."]


class ChangeResult(TypedDict):
    old_value: Annotated[float, "Starting value."]
    new_value: Annotated[float, "Ending value."]
    change: Annotated[float, "new - old."]
    percent_change: Annotated[float, "Change as a percentage of old, 2 decimals."]


class RoundResult(TypedDict):
    value: Annotated[float, "The input."]
    result: Annotated[float, "The rounded number."]


class InterestResult(TypedDict):
    final_amount: Annotated[float, "Principal plus interest, 2 decimals."]
    interest: Annotated[float, "Interest earned, 2 decimals."]


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        assert isinstance(node.value, (int, float))  # for mypy: the test above, exactly
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTS:
        return _CONSTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ToolError("invalid_value", "exponent too large")
        return _OPS[type(node.op)](left, right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        return _FUNCS[node.func.id](*(_eval(a) for a in node.args))
    raise ToolError("invalid_value", f"unsupported expression part: {ast.unparse(node)!r}")


@tool()
def calculate(
    db: State,
    expression: Annotated[str, "Arithmetic, e.g. '(120 * 1.0825) / 3' or 'sqrt(2) * pi'."],
    precision: Annotated[int, "Decimal places in the result.", {"minimum": 0, "maximum": 12}] = 6,
) -> CalcResult:
    """Evaluate an arithmetic expression."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _eval(tree)
    except SyntaxError:
        raise ToolError("invalid_value", f"{expression!r} is not a valid expression") from None
    except ZeroDivisionError:
        raise ToolError("invalid_value", "division by zero") from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolError("invalid_value", f"cannot evaluate: {exc}") from None
    if isinstance(value, complex) or not math.isfinite(value):
        raise ToolError("invalid_value", "the result is not a finite real number")
    return {"expression": expression, "result": round(float(value), precision)}


def _temperature(value: float, src: str, dst: str) -> float:
    kelvin = {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[src]
    return {"c": kelvin - 273.15, "f": (kelvin - 273.15) * 9 / 5 + 32, "k": kelvin}[dst]


@tool()
def convert_units(
    db: State,
    value: Annotated[float, "The quantity."],
    from_unit: Annotated[str, "Unit of value, e.g. 'km', 'lb', 'F', 'mph'."],
    to_unit: Annotated[str, "Unit wanted, same dimension."],
) -> UnitResult:
    """Convert a quantity between units of the same dimension."""
    src = get_or_fail(db, "units", from_unit.strip().lower(), "unit")
    dst = get_or_fail(db, "units", to_unit.strip().lower(), "unit")
    if src["dimension"] != dst["dimension"]:
        raise ToolError(
            "invalid_value",
            f"cannot convert {src['dimension']} ({from_unit}) to {dst['dimension']} ({to_unit})",
        )
    if src["dimension"] == "temperature":
        result = _temperature(value, src["unit"], dst["unit"])
    else:
        result = value * src["factor"] / dst["factor"]
    return {
        "value": value,
        "from_unit": src["unit"],
        "to_unit": dst["unit"],
        "result": round(result, 6),
        "dimension": src["dimension"],
    }


Measure = Literal["mean", "median", "stdev", "min", "max", "sum", "count"]


@tool()
def statistics(
    db: State,
    numbers: Annotated[list[float], "The data.", {"minItems": 1}],
    measures: Annotated[list[Measure], "Which measures to compute."] = ["mean"],  # noqa: B006
) -> StatsResult:
    """Descriptive statistics of a list of numbers."""
    fns: dict[str, Callable[[list[float]], float]] = {
        "mean": stats_lib.fmean,
        "median": stats_lib.median,
        "stdev": lambda xs: stats_lib.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min,
        "max": max,
        "sum": math.fsum,
        "count": len,
    }
    return {
        "count": len(numbers),
        "results": {m: round(float(fns[m](numbers)), 6) for m in dict.fromkeys(measures)},
    }


@tool()
def quadratic_roots(
    db: State,
    a: Annotated[float, "Coefficient of x^2 (not 0)."],
    b: Annotated[float, "Coefficient of x."],
    c: Annotated[float, "Constant term."],
) -> QuadraticResult:
    """Solve a*x^2 + b*x + c = 0."""
    if a == 0:
        raise ToolError("invalid_value", "a must not be 0 (that is a linear equation)")
    d = b * b - 4 * a * c
    if d < 0:
        return {"roots": [], "discriminant": d, "kind": "complex"}
    if d == 0:
        return {"roots": [round(-b / (2 * a), 9)], "discriminant": d, "kind": "one_real"}
    r = math.sqrt(d)
    roots = sorted([round((-b - r) / (2 * a), 9), round((-b + r) / (2 * a), 9)])
    return {"roots": roots, "discriminant": d, "kind": "two_real"}


@tool(writes=True)
def store_value(
    db: State,
    name: Annotated[str, "Slot name, e.g. 'subtotal'.", {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}],
    value: Annotated[float, "Value to keep."],
) -> StoredValue:
    """Store a number under a name for later."""
    old = db.get("memory", name)
    db.put("memory", name, {"name": name, "value": float(value)})
    return {"name": name, "value": float(value), "previous": None if old is None else old["value"]}


@tool()
def recall_value(
    db: State, name: Annotated[str, "Slot name used with store_value."]
) -> RecalledValue:
    """Recall a stored number."""
    rec = get_or_fail(db, "memory", name, "memory slot")
    return {"name": name, "value": rec["value"]}


@tool()
def list_values(db: State) -> ValueList:
    """List every stored number."""
    return {"values": [{"name": k, "value": v["value"]} for k, v in sorted(db.rows("memory"))]}


@tool()
def percentage_change(
    db: State,
    old_value: Annotated[float, "Starting value (not 0)."],
    new_value: Annotated[float, "Ending value."],
) -> ChangeResult:
    """Change and percentage change between two values."""
    if old_value == 0:
        raise ToolError("invalid_value", "old_value must not be 0")
    change = new_value - old_value
    return {
        "old_value": old_value,
        "new_value": new_value,
        "change": round(change, 6),
        "percent_change": round(change / abs(old_value) * 100, 2),
    }


@tool()
def round_number(
    db: State,
    value: Annotated[float, "Number to round."],
    digits: Annotated[int, "Decimal places.", {"minimum": 0, "maximum": 12}] = 2,
    mode: Annotated[Literal["half_even", "half_up", "down", "up"], "Rounding rule."] = "half_even",
) -> RoundResult:
    """Round a number with an explicit rule."""
    rule = {
        "half_even": ROUND_HALF_EVEN,
        "half_up": ROUND_HALF_UP,
        "down": ROUND_DOWN,
        "up": ROUND_UP,
    }[mode]
    try:
        q = Decimal(str(value)).quantize(Decimal(1).scaleb(-digits), rounding=rule)
    except InvalidOperation:  # inf, nan, or more digits than a decimal holds (28)
        raise ToolError("invalid_value", f"cannot round {value!r} to {digits} places") from None
    return {"value": value, "result": float(q)}


@tool()
def compound_growth(
    db: State,
    principal: Annotated[float, "Starting amount.", {"minimum": 0}],
    annual_rate_percent: Annotated[float, "Yearly interest rate in percent, e.g. 4.5."],
    years: Annotated[float, "Duration in years.", {"minimum": 0}],
    compounds_per_year: Annotated[int, "Compounding periods per year.", {"minimum": 1}] = 12,
) -> InterestResult:
    """Compound interest on a principal."""
    n = compounds_per_year
    final = principal * (1 + annual_rate_percent / 100 / n) ** (n * years)
    return {"final_amount": round(final, 2), "interest": round(final - principal, 2)}


TOOLS = [
    calculate,
    convert_units,
    statistics,
    quadratic_roots,
    store_value,
    recall_value,
    list_values,
    percentage_change,
    round_number,
    compound_growth,
]


# fmt: off
def authored_tasks() -> list:
    return [
        task(
            "math-marathon-miles",
            ["single_call"],
            turn(
                "How many miles is 42.195 km?",
                call("convert_units", value=42.195, from_unit="km", to_unit="mi"),
            ),
            required_outputs=[ref("c0.result")],
        ),
        task(
            "math-taxed-total",
            ["dependent_calls", "multi_call"],
            turn(
                "Add sales tax (the stored tax_rate) to a 240 dollar subtotal and save the "
                "total as last_total.",
                call("recall_value", name="tax_rate"),
                call("calculate", expression="240 * (1 + {{c0.value}})", precision=2),
                call("store_value", name="last_total", value=ref("c1.result")),
            ),
            required_outputs=[ref("c1.result")],
        ),
        task(
            "math-parallel-conversions",
            ["parallel_calls"],
            turn(
                "Convert 72 F to Celsius and 5 lb to kg.",
                [
                    call("convert_units", value=72, from_unit="F", to_unit="C"),
                    call("convert_units", value=5, from_unit="lb", to_unit="kg"),
                ],
            ),
        ),
        task(
            "math-roots-stats",
            ["dependent_calls", "optional_params", "long_horizon"],
            turn(
                "Solve x^2 - 5x + 6 = 0, give the mean and standard deviation of the roots "
                "and of 10, 20, 30, round the second mean half-up to 1 place, and store it "
                "as target.",
                call("quadratic_roots", a=1, b=-5, c=6),
                call("statistics", numbers=ref("c0.roots"), measures=["mean", "stdev"]),
                call("statistics", numbers=[10, 20, 30], measures=["mean", "stdev"]),
                call("round_number", value=ref("c2.results.mean"), digits=1, mode="half_up"),
                call("store_value", name="target", value=ref("c3.result")),
            ),
            required_outputs=["2.5", "20"],
        ),
        task(
            "math-bad-unit-recovery",
            ["error_recovery"],
            turn(
                "Convert 10 stones to kilograms.",
                call(
                    "convert_units",
                    value=10,
                    from_unit="stone",
                    to_unit="kg",
                    expect_error="not_found",
                ),
                call("convert_units", value=140, from_unit="lb", to_unit="kg"),
            ),
            required_outputs=[ref("c1.result")],
            note="The unit table has no stone; 10 st = 140 lb.",
        ),
        task(
            "math-clarify-interest",
            ["needs_clarification", "optional_params"],
            turn(
                "How much will my savings grow at 4.5% a year?",
                call(
                    "compound_growth",
                    principal=10000,
                    annual_rate_percent=4.5,
                    years=5,
                    compounds_per_year=12,
                ),
                kind="clarify",
                answer="How much are you saving, and for how many years?",
                clarification="10,000 dollars for 5 years, compounded monthly.",
            ),
            required_outputs=[ref("c0.final_amount")],
        ),
        task(
            "math-definition",
            ["no_tool_needed"],
            turn(
                "What is a prime number?",
                kind="no_tool",
                answer="A whole number greater than 1 whose only divisors are 1 and itself.",
            ),
            required_outputs=["divisors"],
        ),
    ]
# fmt: on


DOMAIN = Domain(
    name="math",
    description="Arithmetic, units, statistics, interest and named memory slots.",
    tools=TOOLS,
    build_state=build_state,
    authored_tasks=authored_tasks,
    policy="Use the tools for every computation; report numbers with their units.",
)
