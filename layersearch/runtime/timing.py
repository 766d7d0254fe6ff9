"""Wall-clock timing that accounts for asynchronous accelerators.

:class:`Clock` reads the time after the device is idle: the decode loop reads it at step
boundaries only (start, draft -> verify, end of the step), so a CUDA step synchronizes about
three times however many forwards it runs. :class:`RegionTimer` sums the time spent inside
many small regions (every forward of the loop) without synchronizing per region: on CUDA each
region is a pair of CUDA events recorded on the stream and resolved once, at the end (as
gpt-fast times its loop); on CPU it is ``perf_counter`` around the region.
:class:`StepRecorder` wraps the decode step's phases with these marks, files each step's
outcome and sums the generation's statistics, so the step itself reads as the algorithm.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Mapping, Protocol

import torch

from layersearch.masks.mask import SkipMask
from layersearch.runtime.stats import DecodeStats
from layersearch.runtime.step import HostReads, Lookahead, Proposal, StepOutcome, Verdict, counting_reads


class Clock:
    """``now()`` in seconds, synchronizing CUDA first so kernel time lands in the right bucket."""

    def __init__(self, device: torch.device | str) -> None:
        self._sync = torch.device(device).type == "cuda"

    def now(self) -> float:
        """Seconds from an arbitrary origin, after the device is idle."""
        if self._sync:
            torch.cuda.synchronize()
        return time.perf_counter()


class RegionTimer:
    """Total seconds spent in :meth:`region` blocks, with no device sync per block."""

    def __init__(self, device: torch.device | str) -> None:
        self._cuda = torch.device(device).type == "cuda"
        self._seconds = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def region(self) -> Iterator[None]:
        """Time the block: device time between two CUDA events, or wall time on CPU."""
        if self._cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events.append((start, end))
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._seconds += time.perf_counter() - t0

    def total(self) -> float:
        """Seconds in all regions so far (on CUDA: one synchronize, then the events' times)."""
        if self._events:
            torch.cuda.synchronize()
            self._seconds += sum(start.elapsed_time(end) for start, end in self._events) / 1e3
            self._events.clear()
        return self._seconds


class Marks:
    """Points in the device's stream, and the seconds between two of them, with no sync to
    take a mark: CUDA events on CUDA (reading a span waits for its end event only), wall
    time on CPU. The decode loop marks each step's phases this way, so timing adds no host
    round trip to a step."""

    def __init__(self, device: torch.device | str) -> None:
        self._cuda = torch.device(device).type == "cuda"

    def mark(self) -> object:
        """A mark at the current point of the stream."""
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: object, end: object) -> float:
        """Seconds from mark ``start`` to mark ``end``."""
        if self._cuda:
            end.synchronize()  # type: ignore[attr-defined]
            return start.elapsed_time(end) / 1e3  # type: ignore[attr-defined]
        return end - start  # type: ignore[operator]


class CompileClock(Protocol):
    """What counts the seconds spent compiling (:class:`~layersearch.runtime.backend.CapturedForwards`)."""

    compile_seconds: float


class StepRecorder:
    """Everything a generation records, kept out of its step: the wall clock, the time inside
    forwards (:attr:`forwards`), each step's phase marks, the seconds a first call spent
    compiling and a draft model's prompt forward (each its own phase, not the step's), the host
    reads a step made, the prefill, the controller's selections and the
    :class:`~layersearch.runtime.step.StepOutcome` of every step. The loop runs the generation in
    :meth:`recording`, wraps its phases in :meth:`phase`, hands a step's values to :meth:`outcome`
    and reads the generation's :class:`~layersearch.runtime.stats.DecodeStats` from :meth:`stats`."""

    def __init__(self, device: torch.device | str, compiled: CompileClock) -> None:
        self.clock = Clock(device)  # synchronizes: read at the generation's start and end and around the prefill
        self.forwards = RegionTimer(device)  # every forward, no sync per forward
        self.marks = Marks(device)  # step phases, no sync to take a mark
        self.compiled = compiled
        self.outcomes: list[StepOutcome] = []
        self.selections: list[dict[str, Any]] = []
        self.prefill_seconds = self.draft_prefill_seconds = 0.0
        self._start, self._compiled_before = 0.0, compiled.compile_seconds
        self._spans: dict[str, tuple[object, object, float]] = {}  # phase -> (start mark, end mark, seconds of own phases)
        self.reads = HostReads()  # this generation's host reads, counted while it is recording
        self._reads_before = 0  # the count when the step's draft phase opened
        self._rules: dict[type, str] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """The generation runs in the block: its wall clock starts now, and :func:`~layersearch.runtime.step.to_host`
        counts the reads made in this thread as this generation's (another thread's generation keeps its own)."""
        self._start = self.clock.now()
        with counting_reads(self.reads):
            yield

    @contextlib.contextmanager
    def prefill(self) -> Iterator[None]:
        """Time the block as the prefill (the target's prompt forward and its first token)."""
        t0 = self.clock.now()
        yield
        self.prefill_seconds += self.clock.now() - t0

    @contextlib.contextmanager
    def draft_prefill(self) -> Iterator[None]:
        """Time the block as a draft model's forward over the prompt: the draft-side prefill, a
        phase of its own (in neither the step's draft phase nor the decode phase)."""
        t0 = self.clock.now()
        try:
            yield
        finally:
            self.draft_prefill_seconds += self.clock.now() - t0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark the block as phase ``name`` of the step ("draft" opens a step), compiling and a
        draft model's prompt forward excluded.
        Its span is read in :meth:`outcome`, after the verdict's host read, when the stream is
        idle: reading the draft's span here would make the verification wait for it on CUDA."""
        if name == "draft":
            self._reads_before = self.reads.count
        m0, own0 = self.marks.mark(), self._own_phases()
        yield
        self._spans[name] = (m0, self.marks.mark(), self._own_phases() - own0)

    def _own_phases(self) -> float:
        # Seconds of the phases kept out of a step's: compiling and the draft model's prompt forward.
        return self.compiled.compile_seconds + self.draft_prefill_seconds

    @contextlib.contextmanager
    def selecting(self, step: int, context: int) -> Iterator[list[Mapping[str, Any]]]:
        """Time a controller's choice; a record put in the yielded list is kept with its seconds."""
        t0 = self.marks.mark()
        records: list[Mapping[str, Any]] = []
        yield records
        for record in records:
            seconds = self.marks.seconds(t0, self.marks.mark())
            self.selections.append({"step": step, "context": context, **record, "seconds": seconds})

    def outcome(self, position: int, proposal: Proposal, verdict: Verdict, emitted: int, mask: SkipMask,
                lookahead: Lookahead) -> StepOutcome:
        """The step's :class:`StepOutcome`, filed with the generation's steps."""
        rule = self._rules.get(type(lookahead))
        if rule is None:
            rule = self._rules[type(lookahead)] = type(lookahead).__name__.removesuffix("Lookahead").lower()
        outcome = StepOutcome(
            step=len(self.outcomes), position=position, drafted=int(proposal.ids.shape[0]), accepted=verdict.num_accepted,
            emitted=emitted, drafter=proposal.drafter, mask=proposal.plan or mask,  # the plan the draft really ran
            lookahead=f"{rule}:{lookahead.max_draft}", draft_forwards=proposal.forwards,
            draft_seconds=self._seconds("draft"), verify_seconds=self._seconds("verify"),
            confidences=proposal.confidences, host_reads=self.reads.count - self._reads_before,
        )
        self.outcomes.append(outcome)
        return outcome

    def _seconds(self, phase: str) -> float:
        start, end, own = self._spans[phase]
        return max(self.marks.seconds(start, end) - own, 0.0)

    def stats(self, new_tokens: int, path: str, path_reason: str) -> DecodeStats:
        """The generation's statistics, its wall clock read now (from :meth:`recording`'s start); ``path``: the backend that ran it."""
        total = self.clock.now() - self._start
        steps = tuple(self.outcomes)
        return DecodeStats(
            new_tokens=new_tokens, target_forwards=len(steps), drafted=sum(s.drafted for s in steps),
            accepted=sum(s.accepted for s in steps), prefill_seconds=self.prefill_seconds,
            draft_seconds=sum(s.draft_seconds for s in steps), verify_seconds=sum(s.verify_seconds for s in steps),
            total_seconds=total, draft_forwards=sum(s.draft_forwards for s in steps),
            forward_seconds=self.forwards.total(), steps=steps, selections=tuple(self.selections),
            draft_prefill_seconds=self.draft_prefill_seconds, path=path, path_reason=path_reason,
            compile_seconds=self.compiled.compile_seconds - self._compiled_before,
        )
