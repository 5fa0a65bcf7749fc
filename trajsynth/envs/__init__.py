"""Tool environments: specs and importers, executable domains, verifiers, sandboxes.

The layer ``envs`` imports only ``core``. What stages use:

- :class:`EnvFactory` (``ctx.envs``): ``domains()``, ``toolset(domain)``,
  ``make(domain, seed=, initial_state=)``, ``example_tasks(domain)``;
- environments for imported tools: :class:`SimulatedEnvironment` (a stateful simulator,
  the default), :class:`CodeEnvironment` (Python classes that implement them),
  :class:`MCPEnvironment` (a Model Context Protocol server), replay, and
  :class:`MixedEnvironment` (several of them, chosen per tool);
- :class:`Environment`: ``reset`` / ``step`` / ``format_observation``, cheap ``snapshot`` /
  ``restore``, ``state_hash`` and ``diff``;
- :class:`ToolSpec` / :class:`Toolset` and :func:`import_tools` for specs written by others;
- :mod:`trajsynth.envs.verifiers` (schema, BFCL call matching, tau-bench final state);
- :class:`Sandbox` for untrusted code, and the ``python_exec`` tool built on it.
"""

from .base import Environment, EnvSnapshot, Observation, StepResult, ToolResult, parse_action
from .code import CodeEnvironment
from .domain import Domain, DomainEnvironment
from .domains import BUILTIN_DOMAINS, example_tasks, get_domain
from .factory import EnvConfig, EnvFactory, ToolsetConfig
from .importers import FORMATS, import_tools
from .mcp import MCPConfig, MCPEnvironment
from .mixed import MixedEnvironment
from .recording import Recorder, RecordingEnvironment, ReplayEnvironment
from .sandbox import Limits, Sandbox, SandboxConfig, SandboxResult
from .simulated import SimulatedEnvironment
from .spec import ImportIssue, Toolset, ToolSpec
from .state import Snapshot, State, StateDiff, diff
from .tasks import ExampleTask
from .tools import ToolError, ToolImpl, tool

__all__ = [
    "BUILTIN_DOMAINS",
    "FORMATS",
    "CodeEnvironment",
    "Domain",
    "DomainEnvironment",
    "EnvConfig",
    "EnvFactory",
    "EnvSnapshot",
    "Environment",
    "ExampleTask",
    "ImportIssue",
    "Limits",
    "MCPConfig",
    "MCPEnvironment",
    "MixedEnvironment",
    "Observation",
    "Recorder",
    "RecordingEnvironment",
    "ReplayEnvironment",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "SimulatedEnvironment",
    "Snapshot",
    "State",
    "StateDiff",
    "StepResult",
    "ToolError",
    "ToolImpl",
    "ToolResult",
    "ToolSpec",
    "Toolset",
    "ToolsetConfig",
    "diff",
    "example_tasks",
    "get_domain",
    "import_tools",
    "parse_action",
    "tool",
]
