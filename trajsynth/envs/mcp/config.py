"""How an MCP server is started and treated: :class:`MCPConfig` (the ``mcp`` mapping of a
toolset in ``defaults.env.toolsets``)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import StrictModel
from ...core.errors import ConfigError

__all__ = ["DETERMINISTIC_ENV", "MCPConfig", "parse_target"]

#: the environment a stdio server gets unless its config sets the variable (``deterministic``):
#: a fixed time zone and locale, a fixed clock for git's commits, stable hashing in Python
DETERMINISTIC_ENV = {
    "TZ": "UTC",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "SOURCE_DATE_EPOCH": "1735689600",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_AUTHOR_NAME": "trajsynth",
    "GIT_AUTHOR_EMAIL": "trajsynth@example.com",
    "GIT_COMMITTER_NAME": "trajsynth",
    "GIT_COMMITTER_EMAIL": "trajsynth@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class MCPConfig(StrictModel):
    """Where the server is, where it keeps its state, and how episodes get their own copy."""

    command: list[str] | str | None = Field(
        default=None,
        description="Start the server with this command and talk over stdio. It runs as "
        "written, found on PATH; `{python}` stands for trajsynth's own interpreter.",
    )
    url: str | None = Field(default=None, description="A streamable HTTP endpoint (…/mcp).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment (stdio).")
    cwd: str | None = Field(
        default=None, description="Working folder of a stdio server (default: the current one)."
    )
    state: list[str] | None = Field(
        default=None,
        description="Files or folders where the server keeps its state (a database, a "
        "repository, a folder it edits). Each episode runs the server on its own copy and "
        "nothing the user owns is written. Default: found in the command and `env` (existing "
        "paths among the arguments, paths in env values); [] for none.",
    )
    isolate: Literal["auto", "namespace", "copy", "off"] = Field(
        default="auto",
        description="namespace: the server sees its private copies at the original paths "
        "and everything else read-only (Linux mount namespaces); copy: the server is given "
        "the copies' paths (paths are translated in arguments and results), the rest of the "
        "host stays writable; off: the server works on the user's own files; auto: "
        "namespace where it works, else copy.",
    )
    reset: Literal["auto", "tool", "state", "restart", "none"] = Field(
        default="auto",
        description="How an episode gets the server's initial state back: tool (the "
        "`reset_tool`), state (restore the copies; the process stays warm), restart (a new "
        "process, on restored copies), none (the server holds no state). auto: the tool when "
        "the server has it, else state when it has on-disk state, else none when every tool "
        "is read-only, else restart.",
    )
    reset_tool: str | None = Field(
        default="reset", description="Tool that returns the server to its initial state."
    )
    state_tool: str | None = Field(
        default="state", description="Read-only tool that returns the whole state as JSON."
    )
    read_only: list[str] = Field(
        default_factory=list,
        description="Tools to treat as read-only besides those the server annotates "
        "(readOnlyHint): they never enter the state log.",
    )
    error_text: bool = Field(
        default=True,
        description="Results shaped like errors (text starting 'Error:', '... error:', a "
        'traceback, an errno code; {"error": ...}) are failures of the call, as isError is.',
    )
    error_patterns: list[str] = Field(
        default_factory=list,
        description="More regular expressions that mark a text result as an error.",
    )
    deterministic: bool = Field(
        default=True,
        description="Give a stdio server a fixed time zone (UTC), locale, git clock and "
        "hash seed unless `env` sets them, so replays give the same results.",
    )
    stderr_log: str | None = Field(
        default=None,
        description="File the server's stderr goes to (default: logs/mcp-<toolset>.log in "
        "the run folder, else in the temporary folder).",
    )
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest wait for one request; a call that takes longer stops the server "
        "(the next call starts it again).",
    )
    start_timeout_s: float = Field(
        default=120.0, gt=0, description="Longest wait for the server to start and answer."
    )
    snapshots: int = Field(
        default=64, ge=1, description="States kept as copies for restoring (besides the first)."
    )

    @field_validator("error_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for p in value:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"{p!r} is not a regular expression ({exc})") from None
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> MCPConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of `command` (stdio) or `url`")
        if self.command is not None and not self.words():
            raise ValueError("`command` is empty")
        return self

    def words(self) -> list[str]:
        """The command as written, split like a shell would."""
        if isinstance(self.command, list):
            return [str(c) for c in self.command]
        return shlex.split(self.command or "")

    def argv(self) -> list[str]:
        """The command with ``{python}`` replaced and the program found on PATH (the one the
        server gets: ``env``'s PATH when it sets one)."""
        words = [w.replace("{python}", sys.executable) for w in self.words()]
        path = self.env.get("PATH", os.environ.get("PATH", ""))
        program = words[0]
        if os.sep not in program:
            found = shutil.which(program, path=path)
            if found is None:
                raise ConfigError(
                    f"cannot start the MCP server: {program!r} is not on PATH",
                    hint="give the full path, or `{python}` for trajsynth's own interpreter",
                )
            program = found
        elif not os.path.isabs(program):
            program = os.path.abspath(os.path.join(self.cwd or os.getcwd(), program))
        return [program, *words[1:]]

    def where(self) -> str:
        """The server, as the user wrote it (for messages)."""
        return self.url or " ".join(self.words())


def parse_target(target: str) -> MCPConfig:
    """``mcp:<command>`` or ``mcp:<URL>`` (as ``trajsynth tools list`` takes it) → a config."""
    text = target.removeprefix("mcp:").strip()
    if not text:
        raise ConfigError("an MCP target is `mcp:<command>` or `mcp:<URL>`")
    if text.startswith(("http://", "https://")):
        return MCPConfig(url=text)
    return MCPConfig(command=text)
