"""The runner: executes a validated pipeline into a run folder, exactly once.

Run folder layout (:class:`~trajsynth.store.layout.RunFolder` says where each file is)::

    runs/tiny/
      manifest.json           # the truth: what is committed (see store/manifest.py)
      raw/part-00000.parquet  # one folder per stage (its main output)
      rollouts/failed/...     # a named side output of stage `rollouts`
      artifacts/<stage>/      # files a stage produces that are not rows (checkpoints)
      logs/run.log            # tracebacks of stage failures, the final output's warning

For each stage in topological order the runner:

1. computes the cache key = hash(stage name, config, input fingerprints, seed, LLM and env
   settings, shard size, trajsynth version);
2. skips the stage if the manifest says it finished with that key and its files are intact;
3. resumes it if it was interrupted with that key — map stages skip the units (input shards)
   already committed, sources restart from the committed row offset, global stages start over;
4. otherwise clears its outputs and runs it fresh (and, since its output fingerprint changes,
   every stage downstream reruns too).

Whenever a stage that ran before runs again, the runner says why: a shard or artifact of its
that changed on disk (which file, its recorded and its present size or content fingerprint),
a stage upstream whose output changed, a changed ``uses``/``from``/trajsynth version, other
settings or input files (a changed cache key), ``--force``, or the interruption or failure it
resumes from. The reason goes to ``logs/run.log``, to :attr:`RunResult.reasons` and, through the
reporter's ``note``, to the console (``trajsynth run`` prints it in its summary).

Every shard is committed by an atomic rename and then recorded in the manifest, which is itself
replaced atomically; files not recorded are debris of a crash and are removed on resume. So a
run killed at any moment and rerun writes each row exactly once.

The run folder may be on object storage (``--out s3://bucket/run``, ``gs://``; see
:mod:`trajsynth.core.location`): shards are write-once keys, the manifest a conditional
write, and whatever libraries must write as local files (artifacts such as checkpoints, the
log) is written in this machine's scratch folder for the run and copied to the bucket when the
stage ends (artifacts) or the run ends (``logs/run.log``); a stage that ``needs`` an artifact
gets a local copy on whichever machine it runs. With ``--executor ray`` every node reads and
writes the bucket itself, so no node needs a shared file system.

Endpoint failures are not data. A rollout (or row) whose LLM request failed for good because of
the endpoint (:class:`~trajsynth.core.errors.InfraError`: retries exhausted, circuit open) is
dropped by its stage and counted in the stage's metrics (``infra.lost`` of ``infra.units``, or
of the rows in). When a stage finishes, its share lost in this execution is compared with
``defaults.max_infra_error_rate`` (``trajsynth run --max-infra-error-rate``, default 0.05):

- at or below it, the stage is done; the lost rollouts are simply absent (counted, never in
  ``failed`` nor in ``rollouts_total``), and a rerun does not retry them;
- above it, the stage fails with one message naming it, the share and the last error; the
  units (input shards) that lost anything are un-committed — their shards deleted, their
  counters taken back — so the rerun plays exactly those again, their successful requests
  from the LLM response cache; units without losses stay committed. A source or global stage
  starts over. ``0`` makes every loss fail the stage.

When the run ends, its final output is checked (:mod:`trajsynth.pipeline.final_output`): the
rows of the last stage that makes rows, by verdict, go into the manifest (``final_output``),
and one that is mostly unverified (or left empty by the rows set aside as wrong) is written to
``logs/run.log`` as a warning.
After each stage that writes ``success``, its main output's rows by verdict go into its
metrics (``values.outcome``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..core.errors import InfraError, StageFailed, TrajsynthError
from ..core.ids import file_fingerprint, stable_hash
from ..core.location import (
    as_path,
    is_url,
    list_names,
    remove,
    remove_tree,
    size_of,
    upload_dir,
)
from ..core.schema import ARROW_SCHEMA
from ..stages import (
    Context,
    ContextSpec,
    Metrics,
    ShardSet,
    SourceStage,
    StageKind,
    StreamingGlobalStage,
    config_hash,
)
from ..store.integrity import ShardCheck, check_shard, fingerprint_of, shard_checks
from ..store.layout import RunFolder
from ..store.manifest import OutputState, RunManifest, ShardRecord, StageState
from ..store.shards import (
    LOOKUP,
    Check,
    ShardInfo,
    ShardReader,
    ShardWriter,
    clean_tmp,
    footer_rows,
    iter_shard,
    list_shards,
    write_shard,
)
from ..version import __version__
from .executors import Executor, LocalExecutor, UnitTask
from .final_output import check_final_output, stage_outcome, verdict_line, warning_lines
from .outputs import output_names, write_outputs
from .spec import InputRef, ResolvedPipeline, ResolvedStage

__all__ = ["Reporter", "RunResult", "Runner", "run_pipeline"]

log = logging.getLogger("trajsynth.runner")


class _RunLogHandler(logging.FileHandler):
    """The run's ``run.log``; ``_trajsynth`` marks it for whoever looks for it among the
    handlers (the next run, which replaces it; envs/mcp/server.py, which logs beside it)."""

    _trajsynth = True


class Reporter:
    """Receives progress events; the CLI draws progress bars from them. Default: silent."""

    def run_started(self, pipeline: ResolvedPipeline, run_dir: Path) -> None: ...

    def stage_started(
        self, stage_id: str, uses: str, kind: str, total_rows: int | None, note: str
    ) -> None: ...

    def advance(self, stage_id: str, rows: int) -> None: ...

    def stage_finished(self, stage_id: str, state: StageState, outcome: str) -> None: ...

    def run_finished(self, result: RunResult) -> None: ...


@dataclass
class RunResult:
    run_dir: Path
    manifest: RunManifest
    executed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    #: stage id → why it ran again in this run (stages that ran before; see the module docstring)
    reasons: dict[str, str] = field(default_factory=dict)
    layout: str = "pipeline"

    def output(self, stage_id: str, output: str = "main") -> Path:
        """Folder holding a stage's (named) output shards."""
        return RunFolder(self.run_dir, single=self.layout == "single").output(stage_id, output)

    @property
    def final_output(self) -> dict[str, Any]:
        """The check of the run's final output (:mod:`~trajsynth.pipeline.final_output`)."""
        return self.manifest.final_output


class Runner:
    """Runs a :class:`ResolvedPipeline` into ``run_dir`` (see the module docstring)."""

    def __init__(
        self,
        pipeline: ResolvedPipeline,
        *,
        run_dir: str | Path | None = None,
        force: bool = False,
        executor: Executor | None = None,
        reporter: Reporter | None = None,
        layout: str = "pipeline",
    ) -> None:
        self.pipeline = pipeline
        defaults = pipeline.spec.defaults
        if layout not in ("pipeline", "single"):
            raise ValueError(layout)
        #: where each of the run's files is
        self.folder = RunFolder.at(
            run_dir or defaults.output or f"runs/{pipeline.name}", single=layout == "single"
        )
        self.run_dir = self.folder.root
        #: a run folder on object storage; its local files live in ``self.folder.scratch``
        self.remote = self.folder.remote
        self.log_path = self.folder.log
        self.force = force
        self.executor = executor or _default_executor(defaults)
        self.reporter = reporter or Reporter()
        if layout == "single" and len(pipeline.stages) != 1:
            raise ValueError("the single-stage layout needs a one-stage pipeline")
        self.layout = layout
        self.manifest_path = self.folder.manifest
        #: input shard → what its bytes must be (see _input_shards)
        self._checks: dict[str, ShardCheck | None] = {}

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        if self.remote:
            list_names(self.run_dir)  # unreachable storage, no bucket, no credentials: say so now
        else:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self._setup_logging()
        try:
            return self._run()
        finally:
            if self.remote:
                from ..llm.cache import sync_remote_caches

                sync_remote_caches()
                upload_dir(self.log_path.parent, self.folder.logs)

    def _run(self) -> RunResult:
        manifest = self._load_manifest()
        result = RunResult(run_dir=self.run_dir, manifest=manifest, layout=self.layout)
        self.reporter.run_started(self.pipeline, self.run_dir)
        try:
            for sid in self.pipeline.order:
                outcome = self._run_stage(sid, manifest, result)
                if outcome == "skipped":
                    result.skipped.append(sid)
                else:
                    result.executed.append(sid)
                    if outcome == "resumed":
                        result.resumed.append(sid)
        finally:
            self.executor.close()
            from .executors import release_stages

            release_stages()
        if self.layout == "pipeline":
            manifest.final_output = check_final_output(self.pipeline, manifest, self.folder)
            manifest.save(self.manifest_path)
            lines = warning_lines(manifest.final_output)
            for line in [*lines, verdict_line(manifest.final_output)] if lines else []:
                log.warning("final output: %s", line)
        self.reporter.run_finished(result)
        return result

    def _setup_logging(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = _RunLogHandler(self.log_path, encoding="utf-8", errors="backslashreplace")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root = logging.getLogger("trajsynth")
        for h in list(root.handlers):
            if isinstance(h, logging.FileHandler) and getattr(h, "_trajsynth", False):
                root.removeHandler(h)
                h.close()
        root.addHandler(handler)
        root.setLevel(logging.INFO)

    def _load_manifest(self) -> RunManifest:
        spec = self.pipeline.spec
        old = RunManifest.load(self.manifest_path) if _exists(self.manifest_path) else None
        if old is not None and not self.force:
            manifest = old
        else:
            now = dt.datetime.now(dt.UTC)
            manifest = RunManifest(
                pipeline=spec.name,
                run_id=f"{spec.name}-{now:%Y%m%dT%H%M%S}-{stable_hash(now.isoformat())[:6]}",
            ).replaces(old)
            if old is not None:  # keep execution counters across --force
                for sid, st in old.stages.items():
                    manifest.stages[sid] = StageState(uses=st.uses, executions=st.executions)
        #: the version the stages were last run with (a reason to rerun them when it changed)
        self.previous_version = manifest.trajsynth_version
        manifest.pipeline = spec.name
        manifest.pipeline_path = str(self.pipeline.path) if self.pipeline.path else None
        manifest.config_hash = self.pipeline.config_hash()
        manifest.trajsynth_version = __version__
        stale = [sid for sid in manifest.stages if sid not in self.pipeline.stages]
        for sid in stale:
            log.info("stage %s is no longer in the pipeline; forgetting it (its files stay)", sid)
            del manifest.stages[sid]
        # keep stages in pipeline order in the file
        manifest.stages = {
            sid: manifest.stages[sid] for sid in self.pipeline.order if sid in manifest.stages
        } | {sid: st for sid, st in manifest.stages.items() if sid not in self.pipeline.order}
        manifest.save(self.manifest_path)
        return manifest

    # -- inputs ------------------------------------------------------------------------------
    def _input_shards(self, ref: InputRef, manifest: RunManifest) -> list[Path]:
        """The input's shards; what each one's bytes must be is noted in ``self._checks``
        (the records of this run's stages; for a path, those of the manifest beside it),
        which every reader of them is handed."""
        if ref.path is not None:
            paths = list_shards(ref.path)
            self._checks.update({str(p): c for p, c in shard_checks(paths).items()})
            return paths
        state = manifest.stages[ref.stage_id]
        folder = self.folder.output(ref.stage_id, ref.output)
        out = state.outputs.get(ref.output) or OutputState()
        records = sorted(out.shards, key=lambda s: s.file)
        self._checks.update({str(folder / s.file): ShardCheck.of(s) for s in records})
        return [folder / s.file for s in records]

    def _check_of(self, path: Path) -> Check:
        return self._checks.get(str(path), LOOKUP)

    def _input_fingerprint(self, ref: InputRef, manifest: RunManifest) -> str:
        if ref.path is not None:
            # the files are hashed for the cache key anyway: check them against the run that
            # wrote them now, before anything runs (a corrupt input is one clear error)
            fingerprints = []
            for p, check in shard_checks(list_shards(ref.path)).items():
                fingerprints.append((p.name, fingerprint_of(p)))
                check_shard(p, check, fingerprint=fingerprints[-1][1])
            return stable_hash(fingerprints)
        return manifest.stages[ref.stage_id].fingerprint(ref.output)

    def _cache_key(self, rs: ResolvedStage, manifest: RunManifest) -> str:
        defaults = self.pipeline.spec.defaults
        return stable_hash(
            {
                "uses": rs.step.uses,
                "config": rs.config.model_dump(mode="json"),
                "inputs": [(str(r), self._input_fingerprint(r, manifest)) for r in rs.inputs],
                "seed": defaults.seed,
                "llm": _without_secrets(defaults.llm),
                "env": defaults.env,
                "shard_rows": rs.shard_rows,
                "needs": [(n, manifest.stages[n].artifact_fingerprint) for n in rs.needs],
                "iteration": rs.iteration,
                "version": __version__,
            }
        )

    def _outputs_changed(self, sid: str, state: StageState) -> str | None:
        """What of the stage's committed files changed on disk since it finished (None when
        nothing did): a file missing, resized, or a shard overwritten with other content of
        the same size (its content fingerprint differs from the recorded one)."""
        art = self.folder.artifacts(sid, stored=True)
        for rel, size in state.artifact_files.items():
            p = art / rel
            found_size = _size(p)
            if found_size is None:
                return f"artifact {self.folder.relative(p)} is missing"
            if found_size != size:
                return (
                    f"artifact {self.folder.relative(p)} changed on disk "
                    f"({found_size:,} bytes, recorded {size:,})"
                )
        for name, out in state.outputs.items():
            folder = self.folder.output(sid, name)
            for shard in out.shards:
                p = folder / shard.file
                found_size = _size(p)
                if found_size is None:
                    return f"shard {self.folder.relative(p)} is missing"
                if found_size != shard.bytes:
                    return (
                        f"shard {self.folder.relative(p)} changed on disk "
                        f"({found_size:,} bytes, recorded {shard.bytes:,})"
                    )
                found = fingerprint_of(p)
                if found != shard.fingerprint:
                    return (
                        f"shard {self.folder.relative(p)} changed on disk (content fingerprint "
                        f"{found[:12]}, recorded {shard.fingerprint[:12]})"
                    )
        return None

    def _why_rerun(
        self,
        rs: ResolvedStage,
        state: StageState | None,
        key: str,
        result: RunResult,
    ) -> str | None:
        """Why a stage that ran before runs (again) now; None when it may be skipped, or
        when it never ran (a first run needs no reason)."""
        if state is None:
            return None
        if self.force:  # (--force keeps only the states of the stages that ran before)
            return "--force"
        if state.status == "pending":
            return None
        if state.cache_key == key:
            if state.status == "done":
                return self._outputs_changed(rs.id, state)
            what = "it was interrupted" if state.status == "running" else "it failed"
            if type(rs.stage).kind == StageKind.GLOBAL:
                return f"{what} (a global stage starts over: it cannot resume mid-way)"
            return what
        if state.uses != rs.step.uses:
            return f"uses changed ({state.uses} → {rs.step.uses})"
        inputs = [str(r) for r in rs.inputs]
        if state.inputs != inputs:
            return f"from changed ({', '.join(state.inputs) or '-'} → {', '.join(inputs)})"
        upstream = [
            r.stage for r in rs.inputs if r.stage is not None and r.stage in result.executed
        ] + [n for n in rs.needs if n in result.executed]
        if upstream:
            names = list(dict.fromkeys(map(repr, upstream)))
            stages = f"stage {names[0]}" if len(names) == 1 else f"stages {', '.join(names)}"
            return f"the output of {stages} changed (it ran again)"
        if self.previous_version and self.previous_version != __version__:
            return f"trajsynth {self.previous_version} → {__version__}"
        return (
            "its settings or input files changed "
            f"(cache key {key[:12]}, recorded {(state.cache_key or '-')[:12]})"
        )

    # -- one stage ---------------------------------------------------------------------------
    def _run_stage(self, sid: str, manifest: RunManifest, result: RunResult) -> str:
        rs = self.pipeline.stages[sid]
        cls = type(rs.stage)
        key = self._cache_key(rs, manifest)
        state = manifest.stages.get(sid)
        why = self._why_rerun(rs, state, key, result)
        if state is not None and state.status == "done" and why is None:
            self.reporter.stage_finished(sid, state, "skipped")
            return "skipped"
        if why is not None:
            log.info("stage %s runs again: %s", sid, why)
            result.reasons[sid] = why

        resume = (
            state is not None
            and not self.force
            and state.cache_key == key
            and state.status in ("running", "failed")
        )
        # a global stage cannot resume mid-way: it starts over, but keeps its artifacts
        # folder (a trainer resumes from its own checkpoints there)
        keep_artifacts = resume and cls.kind == StageKind.GLOBAL
        if keep_artifacts:
            resume = False
        executions = state.executions if state else 0
        if not resume:
            self._clear_outputs(sid, cls.outputs, keep_artifacts=keep_artifacts)
            state = StageState(
                uses=rs.step.uses,
                kind=cls.kind.value,
                inputs=[str(r) for r in rs.inputs],
                cache_key=key,
                executions=executions,
            )
            manifest.stages[sid] = state
        else:
            assert state is not None
            state.resumes += 1
            self._remove_uncommitted(sid, state, cls.outputs)
        state.status = "running"
        state.error = None
        state.executions += 1
        state.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        manifest.stages = {s: manifest.stages[s] for s in manifest.stages}  # keep order
        manifest.save(self.manifest_path)

        spec = ContextSpec(
            stage_id=sid,
            run_id=manifest.run_id,
            seed=self.pipeline.spec.defaults.seed,
            config_hash=config_hash(rs.step.uses, rs.config),
            llm=self.pipeline.spec.defaults.llm,
            env=self.pipeline.spec.defaults.env,
            cache_dir=self.pipeline.spec.defaults.cache_dir or str(self.folder.cache),
            artifacts_dir=str(self.folder.artifacts(sid)),
            run_dir=str(self.run_dir),
            artifacts_in={n: str(self.folder.artifacts(n, stored=True)) for n in rs.needs},
            iteration=rs.iteration,
        )
        started = time.perf_counter()
        counted_before = dict(state.metrics.get("counters", {}))
        metrics_before = state.metrics
        self._unit_metrics: dict[str, dict[str, Any]] = {}
        self._unit_rows: dict[str, int] = {}
        inputs = [(ref, self._input_shards(ref, manifest)) for ref in rs.inputs]
        total_in = sum(_rows_of(p) for _, paths in inputs for p in paths)
        state.rows_in = total_in
        expected = total_in if cls.kind != StageKind.SOURCE else rs.stage.expected_rows()
        self.reporter.stage_started(sid, rs.step.uses, cls.kind.value, expected, why or "")
        try:
            if cls.kind == StageKind.MAP:
                self._execute_map(rs, state, spec, inputs, manifest, key)
            else:
                self._execute_in_driver(rs, state, spec, inputs, manifest)
        except KeyboardInterrupt:
            state.seconds += time.perf_counter() - started
            manifest.save(self.manifest_path)
            raise
        except InfraError as exc:  # raised out of a stage that does not drop what it loses
            message = f"stage {sid!r} ({rs.step.uses}): an LLM endpoint failed for good: {exc}"
            self._fail(state, manifest, message, started)
            raise StageFailed(message, hint=_INFRA_HINT) from None
        except TrajsynthError as exc:
            self._fail(state, manifest, str(exc), started)
            raise
        except Exception as exc:
            log.error("stage %s failed:\n%s", sid, traceback.format_exc())
            message = f"stage {sid!r} ({rs.step.uses}) failed: {type(exc).__name__}: {exc}"
            self._fail(state, manifest, message, started)
            raise StageFailed(message, hint=f"traceback in {self.log_path}") from exc
        too_many = self._infra_check(rs, state, counted_before, total_in)
        if too_many is not None:
            self._uncommit_lost(rs, state, metrics_before)
            self._fail(state, manifest, too_many, started)
            raise StageFailed(too_many, hint=_INFRA_HINT)
        self._ensure_outputs(sid, state, cls.outputs)
        if "success" in cls.writes:  # a judging stage: its main output's rows by verdict
            main = state.outputs["main"]
            shards = [self.folder.stage(sid) / s.file for s in main.shards]
            state.metrics = Metrics.merge(
                state.metrics, {"values": {"outcome": stage_outcome(shards)}}
            )
        too_few = _too_few_rows(rs, cls.kind, state, counted_before)
        if too_few is not None:
            self._fail(state, manifest, too_few, started)
            raise StageFailed(too_few, hint=f"details in {self.log_path}")
        state.findings = rs.stage.findings(state.metrics)
        for line in state.findings:
            log.warning("stage %s: %s", sid, line)
        if cls.makes_artifact:
            state.artifact_files, state.artifact_fingerprint = _fingerprint_dir(
                self.folder.artifacts(sid)
            )
            if self.remote:  # the bucket keeps them; this machine's copy is a cache
                remove_tree(self.folder.artifacts(sid, stored=True))
                upload_dir(self.folder.artifacts(sid), self.folder.artifacts(sid, stored=True))
        if self.remote:
            from ..llm.cache import sync_remote_caches

            sync_remote_caches()
        state.status = "done"
        state.seconds += time.perf_counter() - started
        state.finished_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        for out in state.outputs.values():
            out.shards.sort(key=lambda s: s.file)
        manifest.save(self.manifest_path)
        self.reporter.stage_finished(sid, state, "resumed" if resume else "ran")
        return "resumed" if resume else "ran"

    def _infra_check(
        self,
        rs: ResolvedStage,
        state: StageState,
        counted_before: dict[str, float],
        total_in: int,
    ) -> str | None:
        """Why the stage may not count as done: it lost more than ``max_infra_error_rate`` of
        its rollouts (or rows) to endpoint failures in this execution (see the module
        docstring)."""
        counters = state.metrics.get("counters", {})
        lost = counters.get("infra.lost", 0) - counted_before.get("infra.lost", 0)
        if lost <= 0:
            return None
        units = counters.get("infra.units", 0) - counted_before.get("infra.units", 0)
        if units <= 0:  # the stage does not count its own units: rows in
            units = sum(self._unit_rows.values()) if self._unit_rows else total_in
        rate = lost / max(units, lost)
        limit = self.pipeline.spec.defaults.max_infra_error_rate
        if rate <= limit:
            return None
        values = state.metrics.get("values", {})
        unit = values.get("infra.unit", "rows")
        last = values.get("infra.last_error", "?")
        return (
            f"stage {rs.id!r} ({rs.step.uses}): {lost:,.0f} of {units:,.0f} {unit} lost to LLM "
            f"endpoint errors ({rate:.1%}), above max_infra_error_rate={limit:g}; "
            f"last error: {last}"
        )

    def _uncommit_lost(
        self, rs: ResolvedStage, state: StageState, metrics_before: dict[str, Any]
    ) -> None:
        """Un-commit what lost rows to the endpoint so that a rerun plays it again: a map
        stage's units with losses (shards deleted, counters taken back), or a whole source or
        global stage."""
        cls = type(rs.stage)
        if cls.kind != StageKind.MAP:
            self._clear_outputs(rs.id, cls.outputs, keep_artifacts=True)
            state.outputs = {}
            state.offset = 0
            state.next_shard = 0
            state.metrics = metrics_before
            return
        for unit_key, metrics in self._unit_metrics.items():
            if not metrics.get("counters", {}).get("infra.lost"):
                continue
            files = state.units.pop(unit_key, None) or {}
            for name, file in files.items():
                if file is None:
                    continue
                out = state.outputs.get(name)
                if out is not None:
                    out.shards = [s for s in out.shards if s.file != file]
                remove(self.folder.output(rs.id, name) / file)
            back = {k: -v for k, v in metrics.get("counters", {}).items()}
            state.metrics = Metrics.merge(state.metrics, {"counters": back})

    def _fail(self, state: StageState, manifest: RunManifest, message: str, started: float) -> None:
        state.status = "failed"
        state.error = message
        state.seconds += time.perf_counter() - started
        manifest.save(self.manifest_path)

    def _clear_outputs(
        self, sid: str, outputs: tuple[str, ...], *, keep_artifacts: bool = False
    ) -> None:
        """Remove a stage's previous shards (only files the store writes; nothing else)."""
        for name in output_names(outputs):
            folder = self.folder.output(sid, name)
            for file in list_names(folder, "part-*.parquet"):
                remove(folder / file)
            clean_tmp(folder)
        if not keep_artifacts:
            remove_tree(self.folder.artifacts(sid))
            if self.remote:
                remove_tree(self.folder.artifacts(sid, stored=True))

    def _ensure_outputs(self, sid: str, state: StageState, outputs: tuple[str, ...]) -> None:
        """Give every declared output that got no rows one empty shard, so an empty result
        reads as 0 rows (downstream, in `trajsynth stats`) instead of a missing folder."""
        for name in output_names(outputs):
            out = state.outputs.setdefault(name, OutputState())
            if not out.shards:
                path = self.folder.output(sid, name) / "part-00000.parquet"
                out.shards.append(ShardRecord.of(write_shard(ARROW_SCHEMA.empty_table(), path)))

    def _remove_uncommitted(self, sid: str, state: StageState, outputs: tuple[str, ...]) -> None:
        """Delete shards a crash left behind that the manifest does not record."""
        for name in output_names(outputs):
            folder = self.folder.output(sid, name)
            clean_tmp(folder)
            committed = {s.file for s in (state.outputs.get(name) or OutputState()).shards}
            for file in list_names(folder, "part-*.parquet"):
                if file not in committed:
                    remove(folder / file)

    # -- map stages: one unit per input shard, run by the executor ----------------------------
    def _execute_map(
        self,
        rs: ResolvedStage,
        state: StageState,
        spec: ContextSpec,
        inputs: list[tuple[InputRef, list[Path]]],
        manifest: RunManifest,
        key: str,
    ) -> None:
        cls = type(rs.stage)
        tasks = []
        index = 0
        for ref, paths in inputs:
            for p in paths:
                unit_key = f"{ref}/{p.name}"
                if unit_key not in state.units:
                    tasks.append(
                        UnitTask(
                            stage_id=rs.id,
                            uses=rs.step.uses,
                            config=rs.config.model_dump(mode="json"),
                            ctx_spec=spec.model_dump(mode="json"),
                            cache_key=key,
                            unit_key=unit_key,
                            unit_index=index,
                            input_path=str(p),
                            input_name=str(ref),
                            out_dir=str(self.folder.stage(rs.id)),
                            outputs=cls.outputs,
                            plugins=tuple(self.pipeline.spec.plugins),
                            rows=_rows_of(p),
                            input_check=self._check_of(p),
                        )
                    )
                index += 1
        done_rows = sum(_rows_of(p) for _, paths in inputs for p in paths) - sum(
            _rows_of(as_path(t.input_path)) for t in tasks
        )
        if done_rows:
            self.reporter.advance(rs.id, done_rows)
        live: dict[str, int] = {}

        def progress(unit_key: str, rows: int) -> None:
            live[unit_key] = live.get(unit_key, 0) + rows
            self.reporter.advance(rs.id, rows)

        for res in self.executor.run_units(tasks, io_bound=cls.io_bound, progress=progress):
            for name, info in res.shards.items():
                if info is not None:
                    state.outputs.setdefault(name, OutputState()).shards.append(
                        ShardRecord.of(info)
                    )
            state.units[res.unit_key] = {n: (i.file if i else None) for n, i in res.shards.items()}
            state.metrics = Metrics.merge(state.metrics, res.metrics)
            self._unit_metrics[res.unit_key] = res.metrics
            self._unit_rows[res.unit_key] = res.rows_in
            manifest.save(self.manifest_path)
            self.reporter.advance(rs.id, max(0, res.rows_in - live.pop(res.unit_key, 0)))

    # -- source and global stages: run in the driver, shards committed as they fill ---------
    def _execute_in_driver(
        self,
        rs: ResolvedStage,
        state: StageState,
        spec: ContextSpec,
        inputs: list[tuple[InputRef, list[Path]]],
        manifest: RunManifest,
    ) -> None:
        cls = type(rs.stage)
        ctx = Context(spec, progress=lambda n: self.reporter.advance(rs.id, n))
        stage = rs.stage
        stage.setup(ctx)
        is_source = cls.kind == StageKind.SOURCE

        def cut_shards(name: str, folder: Path) -> ShardWriter:
            out = state.outputs.setdefault(name, OutputState())

            def commit(info: ShardInfo) -> None:
                out.shards.append(ShardRecord.of(info))
                if is_source:
                    state.offset += info.rows
                    state.next_shard = w.next_index
                    self.reporter.advance(rs.id, info.rows)
                manifest.save(self.manifest_path)

            w = ShardWriter(
                folder,
                shard_rows=rs.shard_rows,
                start_index=state.next_shard if (is_source and name == "main") else 0,
                on_commit=commit,
                where=f"stage {rs.id!r}",
            )
            return w

        def all_batches() -> Iterator[pa.RecordBatch]:
            for _, paths in inputs:
                for p in paths:
                    for b in iter_shard(p, check=self._check_of(p)):
                        if not is_source:
                            self.reporter.advance(rs.id, b.num_rows)
                        yield b

        # spill files live in the run folder, which every worker (and Ray node) sees; a run
        # on object storage spills to this machine's scratch when no other machine reads them
        shared = not self.remote or self.executor.name == "ray"
        spill = self.folder.spill(rs.id, shared=shared)
        try:
            if isinstance(stage, StreamingGlobalStage):
                # passes over the shards, per-shard work through the executor
                remove_tree(spill)
                if not is_url(spill):
                    spill.mkdir(parents=True)
                paths = [p for _, ps in inputs for p in ps]
                shard_set = ShardSet(
                    shards=[ShardReader(str(p), self._check_of(p)) for p in paths],
                    rows=[_rows_of(p) for p in paths],
                    spill_dir=spill,
                    mapper=self.executor.map,
                    inputs=[str(ref) for ref, ps in inputs for _ in ps],
                )
                produced = stage.process_shards(shard_set, ctx)
            elif is_source:
                assert isinstance(stage, SourceStage), "a stage of kind source is a SourceStage"
                produced = stage.generate(ctx, state.offset)
            else:
                produced = stage.process(all_batches(), ctx)
            write_outputs(
                produced,
                stage_dir=self.folder.stage(rs.id),
                outputs=cls.outputs,
                writer=cut_shards,
                where=f"stage {rs.id!r}",
                side_outputs=not is_source,
            )
        finally:
            stage.teardown()
            ctx.close_envs()
            remove_tree(spill)
            if not is_url(spill) and spill.parent.is_dir() and not any(spill.parent.iterdir()):
                spill.parent.rmdir()
        state.metrics = Metrics.merge(state.metrics, ctx.metrics.snapshot())


_INFRA_HINT = (
    "check the endpoint (or raise --max-infra-error-rate), then run again: what was lost is "
    "played again, what was received comes from the LLM response cache"
)


def _too_few_rows(
    rs: ResolvedStage, kind: StageKind, state: StageState, counted_before: dict[str, float]
) -> str | None:
    """Why a finished stage may not count as done: it yielded fewer than ``min_rows`` rows
    (default 1 for a source stage), with the reasons its metrics counted in this execution
    (``dropped.*`` first)."""
    floor = rs.step.min_rows
    if floor is None:
        floor = 1 if kind == StageKind.SOURCE else 0
    rows = state.rows_out()
    if rows >= floor:
        return None
    counters = {
        k: v - counted_before.get(k, 0)
        for k, v in state.metrics.get("counters", {}).items()
        if v != counted_before.get(k, 0)
    }
    dropped = {k: v for k, v in counters.items() if k.startswith("dropped")}
    shown = sorted((dropped or counters).items(), key=lambda kv: (-kv[1], kv[0]))
    reasons = ", ".join(f"{k} {v:,.0f}" for k, v in shown[:8]) or "none counted"
    return (
        f"stage {rs.step.id!r} ({rs.step.uses}) yielded {rows:,} rows, fewer than "
        f"min_rows={floor}; it counted: {reasons}"
    )


def _default_executor(defaults: Any) -> Executor:
    if defaults.executor == "ray":
        from .executors import RayExecutor

        return RayExecutor(defaults.ray_address)
    return LocalExecutor(defaults.workers, defaults.io_concurrency, defaults.pool_min_rows)


def _fingerprint_dir(folder: Path) -> tuple[dict[str, int], str]:
    """(relative file → size, content fingerprint) of everything under ``folder``."""
    files: dict[str, int] = {}
    digests = []
    if folder.is_dir():
        for p in sorted(q for q in folder.rglob("*") if q.is_file()):
            rel = str(p.relative_to(folder))
            files[rel] = p.stat().st_size
            digests.append((rel, file_fingerprint(p)))
    return files, stable_hash(digests)


def _exists(path: Path) -> bool:
    return _size(path) is not None


def _size(path: Path) -> int | None:
    """The file's size, None when it does not exist (a local path or an object)."""
    try:
        return size_of(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _without_secrets(roles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """LLM role settings minus API keys (which must not reach the manifest, even hashed)."""
    return {
        role: {k: v for k, v in (cfg or {}).items() if k != "api_key"}
        for role, cfg in roles.items()
    }


def _rows_of(path: Path) -> int:
    try:
        return footer_rows(path)
    except Exception:  # unreadable files fail later with a clear DataError
        return 0


def run_pipeline(
    pipeline: str | Path | ResolvedPipeline,
    *,
    out: str | Path | None = None,
    overrides: list[str] | None = None,
    force: bool = False,
    reporter: Reporter | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Load (if given a path), validate and run a pipeline. Returns the :class:`RunResult`."""
    from .spec import load_pipeline

    resolved = (
        pipeline
        if isinstance(pipeline, ResolvedPipeline)
        else load_pipeline(pipeline, overrides, output=str(out) if out else None)
    )
    return Runner(
        resolved,
        run_dir=as_path(out) if out else None,
        force=force,
        reporter=reporter,
        executor=executor,
    ).run()
