"""Collect greedy generations from one endpoint into a resumable run directory."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from .._version import __version__
from ..errors import ParameterRejected, QuantcheckError, RunMismatch
from ..store.engines import ROUTING_STREAM_END, UNKNOWN, EngineProfile, profile_of
from ..store.files import StorageError
from ..store.folders.folder_kinds import RUN, claim
from ..store.folders.run_dir import (
    COMPLETIONS,
    MANIFEST,
    CacheControl,
    Cell,
    Manifest,
    Parameters,
    PromptFile,
    RecordNotStorable,
    RunCounts,
    RunWriter,
    completed_keys,
    lock_run,
    read_manifest,
    set_aside,
    write_manifest,
    write_prompts,
)
from ..store.folders.shards import shard_prompts
from ..store.inputs.prompt_sets import file_sha256, load_prompts
from ..store.labels import check_label
from ..store.records.preflight_records import Preflight
from ..store.records.run_records import Completion, Prompt
from ..store.redaction import public_url
from ..store.runtimes import choose_model
from ..triage.cells import cell_from_server, cell_key
from ..wire.client import (
    EndpointClient,
    RequestFailed,
    RetryableError,
    context_overflow,
    sleep_backoff,
)
from ..wire.dialects import Generation, chosen_as_top
from ..wire.requests import generation_body, rejection_advice
from ..wire.routing import RoutingUnusable, generated_routing
from .clients import api_key_from_env
from .preflight import PreflightFailed, ProbeShape, run_preflight
from .replicas import (
    SPREAD_MODES,
    SPREADS,
    Spread,
    check_distinct,
    check_replicas,
    split_endpoints,
)
from .replicas import EndpointDown as EndpointDown  # raised here too, re-exported
from .server_info import describe_server
from .template_check import rendering_cell_value

REPEAT_MODES = ("pool", "sequential", "burst", "loaded")
# A dead endpoint: this many connection failures in a row, over at least this long
# since anything answered, stop the run (a restart blip of a few seconds does not).
GIVE_UP_AFTER_FAILURES = 10
GIVE_UP_AFTER_SECONDS = 5.0
# A rejection (HTTP 400) given for this many prompts in a row, the same each time, is
# taken for a parameter the server refuses whatever the prompt: the run stops.
SAME_REJECTION_STOPS_AFTER = 3


class CollectSettings(Parameters, kw_only=True):
    """A run's parameters (what is requested, and how), and where: the endpoint, the
    run's label and what the user says about its serving cell (`--cell`). `replicas`:
    more URLs serving the endpoint's configuration (an endpoint given as `URL1,URL2`
    is split into them), and `replica_spread` how requests are spread over them
    (fetch/replicas.py)."""

    endpoint: str
    label: str
    cell: Cell = {}
    replicas: list[str] = []
    replica_spread: str = "prompt"

    def __post_init__(self) -> None:
        urls = split_endpoints(self.endpoint)
        if len(urls) > 1:
            self.endpoint, self.replicas = urls[0], [*urls[1:], *self.replicas]
        if self.replica_spread not in SPREADS:
            raise QuantcheckError(f"replica spread {self.replica_spread!r}: one of "
                                  f"{', '.join(SPREADS)}")

    @property
    def urls(self) -> list[str]:
        """Every URL the side's requests may go to: the endpoint, then its replicas."""
        return [self.endpoint, *self.replicas]

    def parameters(self) -> Parameters:
        return Parameters(**{name: getattr(self, name) for name in Parameters.__struct_fields__})


class Reporter(Protocol):
    """Receives progress; the library never prints."""

    def checking(self, endpoint: str) -> None: ...
    def checked(self, report: Preflight) -> None: ...
    def started(self, total: int, already_done: int) -> None: ...
    def completed(self, record: Completion) -> None: ...
    def warn(self, message: str) -> None: ...


class SilentReporter:
    def checking(self, endpoint: str) -> None:
        pass

    def checked(self, report: Preflight) -> None:
        pass

    def started(self, total: int, already_done: int) -> None:
        pass

    def completed(self, record: Completion) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


@dataclass
class CollectResult:
    run_dir: Path
    requested: int
    skipped: int
    collected: int
    failed: int


def collect_body(prompt: Prompt, model: str, parameters: Parameters, runtime: str | None
                 ) -> dict[str, object]:
    """The exact JSON body collect sends for `prompt` with a run's parameters (the client
    adds the streaming fields): wire.requests' `generation_body`, with MoE routing and
    the prefix cache as the run asks (`cache_control` says how)."""
    return generation_body(prompt.request, prompt.api, model, parameters.top_logprobs,
                           profile_of(runtime), parameters.routed_experts,
                           parameters.cache_off)


def cache_control(runtime: str | None, prompts: Sequence[Prompt], cache_off: bool
                  ) -> CacheControl:
    """How a run's requests (`collect_body`'s) meet the engine's prefix cache."""
    profile = profile_of(runtime)
    field = profile.cache_off_field if profile else None
    if profile is not None and field is not None:
        asked = {msgspec.json.encode(p.request[field]).decode() for p in prompts
                 if field in p.request}
        if asked:  # the requests set it themselves (a prompt's fields, --extra-body)
            unset = any(field not in p.request for p in prompts)
            off = asked == {"false"} and (cache_off or not unset)
            return CacheControl(off=off, how=f"{profile.label}: {field} "
                                f"{', '.join(sorted(asked))}, as the requests themselves ask"
                                + (" (false in the others)" if unset and cache_off else ""))
        if cache_off:
            return CacheControl(off=True, how=f"{profile.label}: {field} false in every "
                                "request")
    if not cache_off:
        return CacheControl(off=False, how="left as the server keeps it")
    if profile is None:
        return CacheControl(off=False, how="left on: the server does not say what it is, so "
                            "no way to turn a prefix cache off per request is known")
    flush = (f" (it can only be emptied as a whole: POST {profile.cache_flush_path})"
             if profile.cache_flush_path else "")
    return CacheControl(off=False, how=f"left on: {profile.label} cannot turn its prefix "
                        f"cache off per request{flush}")


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Fewer garbage-collector passes while responses are parsed.

    A top-20 response parses into ~10,000 containers; with the default thresholds the
    collector runs full passes over every response in flight and everything imported,
    which took more than half of a collection's CPU time (bench/collect_throughput.py).
    """
    previous = gc.get_threshold()
    gc.freeze()  # what is alive now (imports, prompts) is never garbage
    gc.set_threshold(200_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()


async def collect_async(prompt_files: Sequence[str | Path], out: str | Path,
                        settings: CollectSettings, reporter: Reporter | None = None,
                        force: bool = False) -> CollectResult:
    """Collect a run (resumed where one was left); `quantcheck.collect` runs it in an
    event loop of its own."""
    check_label(settings.label, "--label")
    reporter = reporter or SilentReporter()
    everything = load_prompts(prompt_files, settings.request)
    # the preflight's probes are shaped like the set's requests, also for a shard that
    # holds none of them (it still makes a run, which merge takes)
    shape = ProbeShape.like(everything[0]) if everything else ProbeShape()
    prompts = shard_prompts(everything, settings.shard) if settings.shard else everything
    run_dir = Path(out)
    claim(run_dir, RUN)
    _check_replica_settings(settings)
    async with AsyncExitStack() as clients:
        client, *others = [await clients.enter_async_context(EndpointClient(
            url, api_key_from_env(settings.api_key_env), settings.timeout,
            max(settings.concurrency * 2, 16), settings.max_response_mb))
            for url in settings.urls]
        models = await client.list_models()
        model = choose_model(models, settings.model, public_url(settings.endpoint))
        server = await describe_server(client, models)
        settings = _streaming_for_routing(settings, server.runtime, reporter)
        manifest = _manifest(settings, model, prompts, prompt_files)
        manifest.server = server
        manifest.cache = cache_control(server.runtime, prompts, settings.cache_off)
        if others:  # before any prompt is sent: one configuration, or refused
            manifest.replication = await check_replicas(
                [client, *others], settings.label, model, server, settings.concurrency,
                shape, settings.replica_spread)
        with lock_run(run_dir):
            return await _collect_locked(client, run_dir, manifest, settings, model, models,
                                         prompts, reporter, force, shape, others)


def _check_replica_settings(settings: CollectSettings) -> None:
    """Replicas are named once each, and spread only in the repeat modes that keep
    their meaning over several servers (burst and loaded shape one server's load)."""
    if not settings.replicas:
        return
    check_distinct(settings.urls)
    if settings.repeat_mode not in SPREAD_MODES:
        raise QuantcheckError(
            f"--repeat-mode {settings.repeat_mode} shapes the load of one server: with "
            f"replicas ({len(settings.urls)} URLs for {settings.label}) use "
            f"{' or '.join(SPREAD_MODES)}, or collect one replica at a time")


def _streaming_for_routing(settings: CollectSettings, runtime: str, reporter: Reporter
                           ) -> CollectSettings:
    """--routed-experts on a stream: SGLang sends routing in a stream's last chunk; vLLM
    (and a server that does not say what it is) only in whole answers, so those are
    collected whole."""
    profile = profile_of(runtime)
    if not settings.routed_experts or not settings.stream or (
            profile is not None and profile.routing == ROUTING_STREAM_END):
        return settings
    reporter.warn("--routed-experts collects without streaming (vLLM sends routing only in "
                  "whole answers): time to first token is not measured")
    return msgspec.structs.replace(settings, stream=False)


async def _collect_locked(client: EndpointClient, run_dir: Path, manifest: Manifest,
                          settings: CollectSettings, model: str,
                          models: list[dict[str, object]],
                          prompts: list[Prompt], reporter: Reporter, force: bool,
                          shape: ProbeShape, others: Sequence[EndpointClient] = ()
                          ) -> CollectResult:
    """The collection, holding the run directory's lock; with `others`, spread over
    them and `client` (replicas)."""
    done = await _start_run(client, run_dir, manifest, settings, model, models, prompts,
                            reporter, force, shape)
    total = len(prompts) * settings.repeats
    jobs = [(p, r) for p in prompts for r in range(settings.repeats) if (p.id, r) not in done]
    reporter.started(total, total - len(jobs))
    first = _Session(client, settings, model, reporter, RunWriter(run_dir),
                     manifest.server.runtime, answered_before=bool(done))
    session = _spread(first, others, settings, reporter, bool(done)) if others else first
    try:
        with rare_full_collections():
            await session.run(jobs, prompts)
    except EndpointDown as exc:
        manifest.stop_reason = str(exc)
        _end_run(run_dir, manifest, session, len(done), total, failing=True)
        raise EndpointDown(
            f"stopped: {exc}. {len(done) + session.collected} of {total} requests are "
            f"collected and kept in {run_dir}; rerun the same command when the server "
            "answers again to collect the rest") from None
    except BaseException as exc:
        manifest.stop_reason = str(exc) if isinstance(exc, QuantcheckError) else None
        _end_run(run_dir, manifest, session, len(done), total, failing=True)
        raise
    _end_run(run_dir, manifest, session, len(done), total, failing=False)
    return CollectResult(run_dir, total, total - len(jobs), session.collected, session.failed)


async def _start_run(client: EndpointClient, run_dir: Path, manifest: Manifest,
                     settings: CollectSettings, model: str, models: list[dict[str, object]],
                     prompts: list[Prompt], reporter: Reporter, force: bool,
                     shape: ProbeShape) -> set[tuple[str, int]]:
    """Prepare the run directory, run the preflight (probes shaped like `shape`), set
    the serving cell, write the prompts and the manifest; the keys already collected."""
    _prepare_run_dir(run_dir, manifest, force)
    done = completed_keys(run_dir)
    manifest.cell = {**cell_from_server(manifest.server, model, settings.concurrency),
                     **settings.cell}
    manifest.cell_key = cell_key(manifest.cell)
    if not done:  # a resumed run keeps the preflight it started with
        manifest.preflight = await _preflight(client, settings, model, models,
                                              manifest, shape, reporter)
    rendered = rendering_cell_value(manifest.preflight.template if manifest.preflight
                                    else None)
    if rendered and "chat_template" not in settings.cell:
        manifest.cell["chat_template"] = rendered
    profile = profile_of(manifest.server.runtime)
    if settings.routed_experts and profile is not None and profile.routing is None:
        reporter.warn(f"{manifest.server.runtime} does not return MoE routing: "
                      "--routed-experts will record none")
    if profile is not None and profile.one_at_a_time and settings.concurrency > 1:
        reporter.warn(profile.one_at_a_time)
    missing = profile.missing_logprobs({p.api for p in prompts}, settings.stream) \
        if profile is not None and settings.top_logprobs > 0 else None
    if missing:
        reporter.warn(missing)
    write_prompts(run_dir, prompts)
    write_manifest(run_dir, manifest)
    return done


def _spread(first: _Session, others: Sequence[EndpointClient], settings: CollectSettings,
            reporter: Reporter, answered_before: bool) -> Spread:
    """One session per replica (each records its URL on what it answers), spread."""
    sessions = [first] + [_Session(other, settings, first.model, reporter, first.writer,
                                   first.runtime, answered_before) for other in others]
    for session in sessions:
        session.replica = public_url(session.client.endpoint)
    width = 1 if settings.repeat_mode == "sequential" else settings.concurrency
    return Spread(sessions, settings.replica_spread, width, first.writer, reporter.warn,
                  settings.label)


def _end_run(run_dir: Path, manifest: Manifest, session: _Session | Spread,
             done_before: int, total: int, failing: bool) -> None:
    """The manifest at the end of a pass. When even that cannot be written while the
    run is failing already (the disk is still full), the one written at the start
    stays, whole: its status `running` with no collector holding the lock reads as
    interrupted (Run.status), and the first error is the one reported."""
    manifest.finished_at = _now()
    manifest.status = ("interrupted" if not session.finished
                       else "incomplete" if session.failed else "complete")
    manifest.counts = RunCounts(requests=total, ok=done_before + session.collected,
                                failed=session.failed)
    if isinstance(session, Spread) and manifest.replication is not None:
        dropped = session.dropped()
        for replica in manifest.replication.replicas:
            replica.dropped = dropped.get(replica.endpoint)
    try:
        write_manifest(run_dir, manifest)
    except StorageError:
        if not failing:
            raise


class _Session:
    """One collection pass: a bounded pool of workers over the pending jobs."""

    def __init__(self, client: EndpointClient, settings: CollectSettings, model: str,
                 reporter: Reporter, writer: RunWriter, runtime: str = UNKNOWN,
                 answered_before: bool = False) -> None:
        self.client, self.settings, self.model = client, settings, model
        self.reporter, self.writer, self.runtime = reporter, writer, runtime
        self.collected = self.failed = 0
        self.finished = False
        self.replica: str | None = None  # its URL, on a side spread over replicas
        self._rejections = _Rejections(answered_before, profile_of(runtime))
        self._warned_no_logprobs = False
        self._warned_routing: set[str] = set()
        self._unreachable = 0
        self._last_answer = time.monotonic()

    async def run(self, jobs: list[tuple[Prompt, int]], fillers: list[Prompt]) -> None:
        mode = self.settings.repeat_mode
        self.writer.open()
        try:
            if mode == "pool":
                await self._pool(jobs, self.settings.concurrency)
            elif mode == "sequential":
                await self._pool(jobs, 1)
            elif mode == "burst":
                for prompt_id in dict.fromkeys(p.id for p, _ in jobs):
                    await self._pool([j for j in jobs if j[0].id == prompt_id], len(jobs))
            else:
                for job in jobs:
                    await self._under_load(job, fillers)
        except* QuantcheckError as errors:
            raise errors.exceptions[0] from None
        finally:
            self.writer.close()
        self.finished = True

    async def _pool(self, jobs: list[tuple[Prompt, int]], width: int) -> None:
        queue: asyncio.Queue[tuple[Prompt, int]] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)
        async with asyncio.TaskGroup() as group:
            for _ in range(min(width, len(jobs))):
                group.create_task(self._worker(queue))

    async def _worker(self, queue: asyncio.Queue[tuple[Prompt, int]]) -> None:
        while not queue.empty():
            await self._complete(*queue.get_nowait())

    async def _complete(self, prompt: Prompt, repeat: int) -> None:
        self.keep(await self._request(prompt, repeat))

    async def send(self, prompt: Prompt, repeat: int) -> Completion:
        """One request with its retries, not yet stored (a spread over replicas may
        send a failed one again elsewhere); EndpointDown when the endpoint is gone."""
        return await self._request(prompt, repeat)

    def keep(self, record: Completion) -> None:
        """The record stored, counted and reported."""
        record = self._stored(record)
        if record.error:
            self.failed += 1
        else:
            self.collected += 1
        self.reporter.completed(record)

    @property
    def unreachable(self) -> bool:
        """Whether the last failure got no answer at all (nothing answered since)."""
        return self._unreachable > 0

    def _stored(self, record: Completion) -> Completion:
        """`record` appended to the run; an answer holding a value the run's lines cannot
        keep is stored as a failed record with the reason (a rerun asks again). A
        reason is stored without credentials (a server may quote what it was sent)."""
        if record.error:
            record.error = self.client.redact(record.error)
        try:
            self.writer.append(record)
        except RecordNotStorable as exc:
            record = Completion(prompt_id=record.prompt_id, prompt_hash=record.prompt_hash,
                                repeat=record.repeat, started_at=record.started_at,
                                error=f"the answer cannot be stored: {exc}",
                                replica=record.replica)
            self.writer.append(record)
        return record

    async def _under_load(self, job: tuple[Prompt, int], fillers: list[Prompt]) -> None:
        """Send one repeat while filler requests (other prompts) keep the server busy."""
        others = [p for p in fillers if p is not job[0]] or fillers
        stop = asyncio.Event()
        tasks = [asyncio.create_task(self._filler(others[n % len(others):] + others, stop))
                 for n in range(max(self.settings.concurrency - 1, 1))]
        await asyncio.sleep(0.02)  # the fillers' requests reach the server first
        try:
            await self._complete(*job)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _filler(self, prompts: list[Prompt], stop: asyncio.Event) -> None:
        while not stop.is_set():
            for prompt in prompts:
                body = collect_body(prompt, self.model, self.settings, self.runtime)
                try:
                    await self.client.generate(prompt.api, body, self.settings.stream,
                                               self.settings.top_logprobs)
                except (RetryableError, QuantcheckError):
                    await asyncio.sleep(0.05)
                if stop.is_set():
                    return

    async def _request(self, prompt: Prompt, repeat: int) -> Completion:
        body = collect_body(prompt, self.model, self.settings, self.runtime)
        profile = profile_of(self.runtime)
        record = Completion(prompt_id=prompt.id, prompt_hash=prompt.hash, repeat=repeat,
                            started_at=_now(), replica=self.replica)
        for attempt in range(self.settings.retries + 1):
            try:
                generation, timing = await self.client.generate(
                    prompt.api, body, self.settings.stream, self.settings.top_logprobs)
            except RetryableError as exc:
                self._count_failure(exc)
                record.error = f"{exc} (after {attempt + 1} attempts)"
                if attempt < self.settings.retries:
                    await sleep_backoff(attempt, exc.retry_after)
                continue
            except ParameterRejected as exc:
                self._answered()
                record.error = self._rejections.of(prompt.id, exc.reason, body)
                break
            except RequestFailed as exc:
                self._answered()
                record.error = str(exc)
                break
            except QuantcheckError:
                raise
            except Exception as exc:  # an answer no parser foresaw: that request fails
                self._answered()
                record.error = f"unreadable answer ({type(exc).__name__}: {exc})"
                break
            self._answered()
            self._rejections.answered()
            self._check_logprobs(generation.has_logprobs, generation.text)
            record.error = None
            record.text, record.reasoning = generation.text, generation.reasoning
            record.tool_calls = generation.tool_calls or None
            record.tokens = generation.tokens if generation.has_logprobs else None
            if record.tokens is not None and profile is not None \
                    and profile.entry_is_an_alternative:
                chosen_as_top(record.tokens)
            if self.settings.routed_experts:
                self._keep_routing(record, generation)
            record.finish_reason, record.usage = generation.finish_reason, generation.usage
            record.model, record.system_fingerprint = (generation.model,
                                                       generation.system_fingerprint)
            record.weight_version = generation.weight_version
            record.ttft_s, record.e2e_s = timing.ttft_s, timing.e2e_s
            break
        return record

    def _keep_routing(self, record: Completion, generation: Generation) -> None:
        """The routing of the generated tokens onto the record's tokens. Routing that
        cannot be right is not kept: the record says why (the answer is kept), and a
        warning says it once."""
        endpoint = public_url(self.settings.endpoint)
        if generation.routing_problem is None and (generation.routing is None
                                                   or record.tokens is None):
            self._warn_routing("none", f"{endpoint} returned no MoE routing (vLLM and "
                               "SGLang: start it with --enable-return-routed-experts; a "
                               "dense model has none; routing is kept with the logprobs, "
                               "so --top-logprobs must be above 0)")
            return
        problem, shape = generation.routing_problem, self.settings.routed_experts_shape
        if problem is None and generation.routing is not None and record.tokens is not None:
            try:
                record.tokens.routing = generated_routing(
                    generation.routing, len(record.tokens), generation.usage,
                    (shape[0], shape[1]) if shape else None)
            except RoutingUnusable as exc:
                problem = str(exc)
        if problem is not None:
            record.routing_unusable = problem
            self._warn_routing("unusable", f"{endpoint}: routing unusable, not kept (each "
                               f"record says why; the answers are kept): {problem}")

    def _warn_routing(self, kind: str, message: str) -> None:
        if kind not in self._warned_routing:
            self._warned_routing.add(kind)
            self.reporter.warn(message)

    def _answered(self) -> None:
        self._unreachable = 0
        self._last_answer = time.monotonic()

    def _count_failure(self, exc: RetryableError) -> None:
        """Stop the run once nothing has answered for a while (see GIVE_UP_AFTER_*)."""
        if not exc.unreachable:
            self._answered()  # the server is there, only unhappy
            return
        self._unreachable += 1
        silent_for = time.monotonic() - self._last_answer
        if self._unreachable >= GIVE_UP_AFTER_FAILURES and silent_for >= GIVE_UP_AFTER_SECONDS:
            raise EndpointDown(
                f"{self.replica or public_url(self.settings.endpoint)} stopped answering "
                f"({self._unreachable} connection failures in a row over {silent_for:.0f} s; "
                f"last: {exc})")

    def _check_logprobs(self, has_logprobs: bool, text: str) -> None:
        if has_logprobs or not text or self.settings.top_logprobs == 0:
            return
        if not self._warned_no_logprobs:
            self._warned_no_logprobs = True
            self.reporter.warn(
                f"{public_url(self.settings.endpoint)} returns no logprobs; collecting text only "
                "(token-level triage will be empty for this side)")


class _Rejections:
    """Which rejections (HTTP 400) stop the run. A prompt that does not fit the server's
    context, or one refused once other prompts were answered, is a failed record with
    the server's reason (a rerun asks again); a rejection before anything was answered,
    or the same one for SAME_REJECTION_STOPS_AFTER prompts in a row, is a parameter the
    server refuses whatever the prompt: the run stops with the fix."""

    def __init__(self, answered_before: bool, profile: EngineProfile | None) -> None:
        self.answered_once = answered_before
        self.profile = profile
        self._last: str | None = None
        self._prompts: set[str] = set()  # refused with `_last` since the last answer

    def answered(self) -> None:
        self.answered_once = True
        self._last, self._prompts = None, set()

    def of(self, prompt_id: str, reason: str, body: dict[str, object]) -> str:
        """The failed record's error, or ParameterRejected naming the fix."""
        if context_overflow(reason):
            return f"the server refused this prompt: {reason}"
        if reason != self._last:
            self._last, self._prompts = reason, set()
        self._prompts.add(prompt_id)
        if not self.answered_once or len(self._prompts) >= SAME_REJECTION_STOPS_AFTER:
            raise rejection_advice(reason, body, self.profile) from None
        return f"the server refused this prompt (HTTP 400): {reason}"


async def _preflight(client: EndpointClient, settings: CollectSettings, model: str,
                     models: list[dict[str, object]], manifest: Manifest,
                     shape: ProbeShape, reporter: Reporter) -> Preflight | None:
    """The preflight report for the manifest. A hard failure stops here, before any
    prompt is sent."""
    if not settings.preflight:
        return None
    reporter.checking(public_url(settings.endpoint))
    report = await run_preflight(client, model, models, manifest.server, shape,
                                 settings.top_logprobs, settings.context_tokens)
    reporter.checked(report)
    if report.failures():
        raise PreflightFailed(report.explanation())
    return report


def _manifest(settings: CollectSettings, model: str, prompts: list[Prompt],
              prompt_files: Sequence[str | Path]) -> Manifest:
    return Manifest(
        quantcheck_version=__version__, label=settings.label,
        endpoint=public_url(settings.endpoint), model=model,
        parameters=settings.parameters(),
        prompt_files=[PromptFile(str(p), file_sha256(Path(p))) for p in prompt_files],
        prompt_hashes={p.id: p.hash for p in prompts}, started_at=_now())


def _prepare_run_dir(run_dir: Path, manifest: Manifest, force: bool) -> None:
    collected = run_dir / COMPLETIONS
    if not (run_dir / MANIFEST).exists() or not collected.exists() \
            or not collected.stat().st_size:
        return  # nothing collected yet: nothing to protect
    previous = read_manifest(run_dir)
    old, new = previous.identity(), manifest.identity()
    if set(previous.served_by()) & set(manifest.served_by()):
        new["endpoint"] = old["endpoint"]  # a replica of the run: the others may change
    held, asked = previous.parameters.repeats, manifest.parameters.repeats
    if old == new and asked >= held:
        manifest.started_at = previous.started_at
        manifest.preflight = previous.preflight
        return
    if force:
        set_aside(run_dir)
        return
    if old == new:
        raise RunMismatch(
            f"{run_dir} holds {held} repeats per prompt; --repeats {asked} would leave the "
            f"others in the comparison but not in the manifest. Rerun with --repeats {held} "
            "(or more, to extend it), use another --out, or --force to set the old run "
            "aside and start over.")
    differences = [_describe_difference(key, old.get(key), new.get(key))
                   for key in {**old, **new} if old.get(key) != new.get(key)]
    raise RunMismatch(
        f"{run_dir} holds a run made with other {'; '.join(differences)}. "
        "Use another --out, or --force to set the old run aside and start over.")


def _describe_difference(key: str, old: object, new: object) -> str:
    if key != "prompt_hashes" or not isinstance(new, dict):
        return f"{key} ({old!r}, now {new!r})"
    old = old if isinstance(old, dict) else {}
    added = len(set(new) - set(old))
    removed = len(set(old) - set(new))
    changed = sum(1 for k in set(old) & set(new) if old[k] != new[k])
    return (f"prompts ({added} added, {removed} removed, {changed} asked otherwise: an "
            "edited prompt, or another --max-tokens or --extra-body)")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
