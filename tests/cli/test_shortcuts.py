"""The one-stage shortcuts' options are made from their stage's config fields: each option's
default and help are the field's, declared once, and the command gets the values typed, by
field name (not ``KEY=VALUE`` text).

Run: python -m pytest tests/cli/test_shortcuts.py -q
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
import typer.main
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from trajsynth.cli import app
from trajsynth.cli._shortcuts import Shortcut, config_options
from trajsynth.stages.quality.balance import BalanceConfig
from trajsynth.stages.quality.dedup import DedupConfig
from trajsynth.stages.quality.filter import FilterConfig


class Toy(BaseModel):
    min_score: float = Field(0.25, description="Drop rows below this.")
    rounds: int = Field(3, description="How many rounds.")
    strict: bool = Field(True, description="Refuse rows without min_score.")
    loud: bool = Field(False, description="Say more.")
    size: int | None = Field(None, description="Rows wanted.")
    mix: tuple[float, float] = Field((0.5, 0.5), description="Two shares.")


def _toy_app(seen: list[dict[str, Any]]) -> typer.Typer:
    toy = typer.Typer()

    @toy.command()
    @config_options(
        Toy,
        Shortcut("min_score", "Thresholds"),
        Shortcut("rounds"),
        Shortcut("strict", flags="--strict/--lenient"),
        Shortcut("loud"),
        Shortcut("size"),
        Shortcut("mix", metavar="A,B", as_text=True),
    )
    def go(name: str, settings: dict[str, Any] = {}, force: bool = False) -> None:  # noqa: B006
        seen.append({"name": name, "force": force, **settings})

    return toy


def test_the_command_gets_the_fields_values_typed_with_the_configs_defaults() -> None:
    seen: list[dict[str, Any]] = []
    result = CliRunner().invoke(_toy_app(seen), ["x"])
    assert result.exit_code == 0, result.output
    assert seen == [
        {
            "name": "x",
            "force": False,
            "min_score": 0.25,
            "rounds": 3,
            "strict": True,
            "loud": False,
            "size": None,
            "mix": "0.5,0.5",  # as text: the config's validator parses it
        }
    ]
    args = ["y", "--min-score", "0.5", "--rounds", "7", "--lenient", "--loud", "--size", "9"]
    assert CliRunner().invoke(_toy_app(seen), [*args, "--force"]).exit_code == 0
    assert seen[-1] == {
        "name": "y",
        "force": True,
        "min_score": 0.5,
        "rounds": 7,
        "strict": False,
        "loud": True,
        "size": 9,
        "mix": "0.5,0.5",
    }
    assert type(seen[-1]["rounds"]) is int and type(seen[-1]["min_score"]) is float


def test_help_is_the_fields_description_naming_other_options_by_their_flags() -> None:
    command = typer.main.get_command(_toy_app([]))
    helps = {p.name: p.help for p in command.params}
    assert helps["min_score"] == "Drop rows below this."
    assert helps["strict"] == "Refuse rows without --min-score."
    assert {p.name: p.opts + p.secondary_opts for p in command.params}["strict"] == [
        "--strict",
        "--lenient",
    ]


@pytest.mark.parametrize(
    ("name", "config"),
    [("filter", FilterConfig), ("dedup", DedupConfig), ("balance", BalanceConfig)],
)
def test_each_shortcut_option_has_its_config_fields_default_and_description(
    name: str, config: type[BaseModel]
) -> None:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    offered = {p.name: p for p in command.params if p.name in config.model_fields}
    assert len(offered) >= 3
    for field, param in offered.items():
        info = config.model_fields[field]
        default = info.get_default(call_default_factory=True)
        if isinstance(default, tuple):
            default = ",".join(map(str, default))
        assert param.default == default, field
        words = [w for w in (info.description or "").split() if "_" not in w]
        assert all(w in (param.help or "") for w in words), (field, param.help)
