"""The one error hierarchy of trajsynth.

Every error a user can cause or a backend can raise is one of these; third-party exceptions
(pyarrow, openai, httpx, docker, OS errors) are translated at the `store`, `llm` and `envs`
boundaries with ``raise ... from exc``. The CLI prints ``str(exc)`` and exits with
``exc.exit_code``; it never shows a traceback for these.

    TrajsynthError
    ├── UserError                 exit 2: the input, config or command is wrong; fix it
    │   ├── ConfigError           bad YAML, unknown/mistyped field, cycle, missing input
    │   ├── UnknownStageError     `uses:` names no registered stage
    │   ├── SpecError             a tool specification that cannot be used
    │   ├── DataError             a shard or file that cannot be read as trajectories
    │   │   └── SchemaVersionError   a shard written by another schema version
    │   ├── InputNotFoundError    a path that does not exist or holds no shards
    │   └── StorageError          object storage refused, unreachable, no bucket or credentials
    │       └── ConcurrentCommitError   another process committed to the same run folder
    ├── UnverifiedOutput          exit 1: a run's final output is mostly unverified
    └── BackendError              exit 1: something outside the input failed
        ├── EndpointError         an LLM endpoint failed (unreachable, 4xx/5xx after retries)
        │   └── InfraError        the endpoint, not the model, failed a request for good
        │       ├── RateLimited   429 after every retry
        │       └── CircuitOpen   the role's circuit breaker is open: failed fast, not sent
        ├── SandboxError          the sandbox could not run or a limit was hit
        └── StageFailed           a stage raised; names the stage and the unit

Example::

    try:
        run_pipeline("pipelines/tiny.yaml")
    except TrajsynthError as exc:
        print(exc)          # one clear line (plus a hint line where there is one)
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "CircuitOpen",
    "ConcurrentCommitError",
    "ConfigError",
    "DataError",
    "EndpointError",
    "InfraError",
    "InputNotFoundError",
    "RateLimited",
    "SandboxError",
    "SchemaVersionError",
    "SpecError",
    "StageFailed",
    "StorageError",
    "TrajsynthError",
    "UnknownStageError",
    "UnverifiedOutput",
    "UserError",
]


class TrajsynthError(Exception):
    """Base of every error trajsynth raises on purpose.

    ``hint`` is an optional second line telling the user how to fix the problem.
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UserError(TrajsynthError):
    """The user's input, configuration or command is wrong."""

    exit_code = 2


class ConfigError(UserError):
    """A pipeline or stage configuration is invalid (bad YAML, field, type, cycle, input)."""


class UnknownStageError(ConfigError):
    """A pipeline names a stage (`uses:`) that is not registered."""


class SpecError(UserError):
    """A tool specification cannot be parsed or converted."""


class DataError(UserError):
    """A file cannot be read as trajectory shards (corrupt, foreign or truncated Parquet)."""


class SchemaVersionError(DataError):
    """A shard was written with a schema version this trajsynth cannot read or migrate."""


class InputNotFoundError(UserError):
    """A path does not exist or contains no Parquet shards."""


class StorageError(UserError):
    """Object storage cannot be used as asked: no credentials, access refused, no such
    bucket, or an endpoint that does not answer (``trajsynth.core.location``)."""


class ConcurrentCommitError(StorageError):
    """A commit found the file changed since it was read (or a write-once key taken):
    another process writes the same run folder."""


class UnverifiedOutput(TrajsynthError):
    """A pipeline ran to the end, but its final output is mostly rows that did not pass
    verification, or nothing is left of it once they were set aside
    (``trajsynth.pipeline.final_output``); ``--allow-unverified`` accepts it."""


class BackendError(TrajsynthError):
    """Something outside the user's input failed: an endpoint, a sandbox, a stage."""


class EndpointError(BackendError):
    """An LLM endpoint failed after retries, or answered with a client error."""

    #: HTTP requests the failure took, where the backend sets it (the results count it)
    attempts: int = 0


class InfraError(EndpointError):
    """A request failed for good because of the endpoint, not the model: retries exhausted on
    5xx, connection errors, timeouts or unreadable bodies, 429s after every retry, or an open
    circuit breaker. Rollout stages drop the rollout and count it (``infra.lost``) instead of
    recording it as the model's failure; a 4xx answer (the request itself was refused) is a
    plain :class:`EndpointError`."""


class RateLimited(InfraError):
    """The endpoint kept answering 429 after every retry."""


class CircuitOpen(InfraError):
    """The role's circuit breaker is open (the endpoint kept failing): failed without sending."""


class SandboxError(BackendError):
    """The sandbox could not start, or the code it ran broke a limit."""


class StageFailed(BackendError):
    """A stage raised an unexpected exception; the message names the stage and the unit."""
