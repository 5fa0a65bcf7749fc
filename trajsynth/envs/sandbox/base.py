"""Sandbox configuration, resource limits and the result of one execution."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core.config import StrictModel

__all__ = ["Isolation", "Limits", "SandboxConfig", "SandboxResult"]

Isolation = Literal["namespace", "bwrap", "docker", "rlimit"]


class Limits(StrictModel):
    """Per-execution resource limits (rlimits in the process sandboxes, cgroup settings in
    Docker)."""

    cpu_seconds: float = Field(10.0, gt=0, description="CPU time (RLIMIT_CPU).")
    memory_mb: int = Field(
        512,
        ge=32,
        description="Memory of the whole execution (every process it starts): a cgroup limit "
        "where one can be made, else a watchdog; also each process's address space "
        "(RLIMIT_AS). Without namespaces: per process only.",
    )
    file_size_mb: int = Field(16, ge=1, description="Largest file written (RLIMIT_FSIZE).")
    max_processes: int = Field(
        64, ge=1, description="Processes of the execution's user (RLIMIT_NPROC) / pids limit."
    )
    max_open_files: int = Field(256, ge=8, description="Open file descriptors (RLIMIT_NOFILE).")
    output_bytes: int = Field(
        1_000_000, ge=1, description="Bytes kept per stream (stdout, stderr); the rest dropped."
    )


class SandboxConfig(StrictModel):
    """How code runs (the ``sandbox`` section of the ``env`` config).

    Examples::

        SandboxConfig()                                  # auto: namespace, else bwrap, else rlimit
        SandboxConfig(kind="docker", image="python:3.11-slim", pool_size=4)
        SandboxConfig(limits=Limits(memory_mb=256), timeout_s=2)
    """

    kind: Literal["auto", "namespace", "bwrap", "docker", "rlimit"] = Field(
        "auto",
        description="auto picks Linux namespaces, else bwrap when installed, else rlimits "
        "only (with a warning); docker must be asked for.",
    )
    pool_size: int = Field(
        2, ge=0, description="Warm workers kept (0: a fresh worker per execution)."
    )
    timeout_s: float = Field(10.0, gt=0, description="Default wall-clock timeout.")
    limits: Limits = Field(default_factory=Limits)
    tmpfs_mb: int = Field(64, ge=1, description="Size of the private writable folder.")
    site_packages: bool = Field(
        False, description="Let sandboxed Python import installed packages (slower start)."
    )
    python: str | None = Field(
        None,
        description="Interpreter (3.9+) that runs the workers and the sandboxed code; default: "
        "the one running trajsynth.",
    )
    mounts: list[str] = Field(
        default_factory=list,
        description="Host files or folders shown read-only at the same path (namespace and "
        "bwrap kinds). Nothing else of the host is visible but the system folders (/usr, "
        "/lib, /etc without its secrets) and the Python installation.",
    )
    image: str = Field("python:3.11-slim", description="Docker image (kind=docker).")

    @field_validator("mounts")
    @classmethod
    def _mounts_outside_tmp(cls, value: list[str]) -> list[str]:
        for path in value:
            norm = os.path.normpath(os.path.abspath(path))
            if norm == "/tmp" or norm.startswith("/tmp/"):
                raise ValueError(
                    f"cannot mount {path!r}: /tmp inside the sandbox is its own (mount a "
                    "folder outside /tmp)"
                )
        return value


class SandboxResult(BaseModel):
    """What one execution did."""

    model_config = ConfigDict(extra="forbid")

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = Field(
        default=None, description="Exit status; -N when killed by signal N; None if unknown."
    )
    signal: int | None = None
    timed_out: bool = False
    killed_by: Literal["timeout", "cpu", "memory", "file_size", "signal", "worker_died"] | None = (
        Field(default=None, description="Which limit stopped the execution, if any.")
    )
    duration_s: float = 0.0
    cpu_s: float | None = None
    max_rss_kb: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
