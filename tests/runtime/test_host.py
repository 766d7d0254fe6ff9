"""Every device-to-host read a step makes goes through :func:`~layersearch.runtime.step.to_host`,
so ``StepOutcome.host_reads`` is every read there is: a ``TorchFunctionMode`` sees each
``.item()``, ``.tolist()``, ``.cpu()``, ``bool(tensor)``, ``int(tensor)`` ... made by
layersearch code during a step (the model's own code, which a captured forward compiles away,
is not the loop's)."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

import layersearch
import layersearch.runtime.loop as loop
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model
from layersearch.runtime.backend import _forward, compile_with, dynamo_compiler
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.lookahead import ConfidenceLookahead, StaticLookahead
from layersearch.runtime.loop import SpeculativeDecoder
from layersearch.runtime.sampling import SamplingConfig
from layersearch.runtime.step import StepRequest, to_host

PACKAGE = layersearch.__file__.rsplit("/", 1)[0] + "/"
#: Tensor methods that read a value to the host (a sync on an accelerator).
READS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"})


class HostReads(TorchFunctionMode):
    """Counts host reads by the file that made them: ``to_host``'s, and any other layersearch file's."""

    def __init__(self) -> None:
        super().__init__()
        self.sanctioned = 0
        self.elsewhere: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            caller = sys._getframe(1)
            path = caller.f_code.co_filename
            if caller.f_code is to_host.__code__:
                self.sanctioned += 1
            elif path.startswith(PACKAGE):
                self.elsewhere[(path[len(PACKAGE):], caller.f_lineno, func.__name__)] += 1
        return func(*args, **(kwargs or {}))


def _counted_steps(decoder: SpeculativeDecoder, prompt: torch.Tensor, new: int) -> list[HostReads]:
    counted: list[HostReads] = []
    step = loop._Run._step

    def counting(run) -> None:
        with HostReads() as reads:
            step(run)
        counted.append(reads)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop._Run, "_step", counting)
        result = decoder.generate(prompt, new)
    assert len(counted) == len(result.stats.steps) > 0
    for reads, outcome in zip(counted, result.stats.steps):
        assert not reads.elsewhere, reads.elsewhere  # a read that bypasses to_host
        assert reads.sanctioned == outcome.host_reads  # the outcome's count is every read
    return counted


def _model(seed: int) -> torch.nn.Module:
    model = build_tiny_model("llama", num_layers=4, seed=seed)
    model.generation_config.eos_token_id = None
    compile_with(model, lambda device: _forward)  # the eager forward stands in for a compiled one
    return model


@pytest.mark.parametrize("compile", [False, True])
def test_every_host_read_of_a_static_greedy_step_goes_through_to_host(compile):
    decoder = SpeculativeDecoder(_model(30), SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3), compile=compile)
    counted = _counted_steps(decoder, torch.tensor([[1, 2, 3, 4, 5]]), 16)
    assert all(reads.sanctioned == 1 for reads in counted)  # the verdict, once per step


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.8, seed=0)])
def test_every_host_read_of_a_confidence_step_goes_through_to_host(sampling):
    """A confidence rule reads each draft position's confidence: more reads, all counted."""
    decoder = SpeculativeDecoder(_model(31), SkipMask.uniform(4, 0.5), lookahead=ConfidenceLookahead(4, 0.5),
                                 sampling=sampling)
    _counted_steps(decoder, torch.tensor([[1, 2, 3, 4, 5]]), 12)


def test_a_read_that_bypasses_to_host_is_caught(monkeypatch):
    """The counter is not blind: an added ``bool(tensor)`` in the step fails the check above."""
    feed_back = loop._Run._feed_back

    def reading(run, outcome) -> None:
        if bool(run.last_ids.sum() >= 0):  # a sync on an accelerator, outside to_host
            feed_back(run, outcome)

    monkeypatch.setattr(loop._Run, "_feed_back", reading)
    root = PACKAGE.rsplit("/", 2)[0] + "/"  # the repository: layersearch's files and this one, not transformers'
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", root)
    decoder = SpeculativeDecoder(_model(32), SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3))
    with pytest.raises(AssertionError, match="__bool__"):
        _counted_steps(decoder, torch.tensor([[1, 2, 3, 4, 5]]), 8)


class _Meeting(LayerSkipDrafter):
    """The layer-skip drafter that, for its first ``steps`` drafts, meets the other generation's
    drafter at ``barrier``, reads one value to the host and meets it again: each generation's
    read then falls inside the other's draft phase (a process-wide count would take in both)."""

    def __init__(self, barrier: threading.Barrier, steps: int = 3) -> None:
        super().__init__()
        self.barrier, self.left = barrier, steps

    def propose(self, request: StepRequest):
        proposal = super().propose(request)
        if self.left:
            self.left -= 1
            self.barrier.wait(timeout=120)
            to_host(request.last_on_device)
            self.barrier.wait(timeout=120)
        return proposal


def test_two_generations_in_threads_each_count_their_own_host_reads():
    models = [_model(34), _model(35)]
    prompts = [torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[9, 8, 7, 6, 5, 4]])]

    def decoder(model, barrier):
        return SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), drafter=_Meeting(barrier),
                                  lookahead=ConfidenceLookahead(4, 0.5))  # a read per drafted token, and the verdict

    alone = [decoder(model, threading.Barrier(1)).generate(prompt, 16) for model, prompt in zip(models, prompts)]
    meeting = threading.Barrier(2)
    side_by_side: dict[int, object] = {}

    def run(index: int) -> None:
        try:
            side_by_side[index] = decoder(models[index], meeting).generate(prompts[index], 16)
        except BaseException as error:  # re-raised below, in the test's thread
            meeting.abort()
            side_by_side[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for index, (model, prompt) in enumerate(zip(models, prompts)):
        result = side_by_side[index]
        if isinstance(result, BaseException):
            raise result
        reads = [s.host_reads for s in result.stats.steps]
        assert reads == [s.host_reads for s in alone[index].stats.steps]
        assert reads[0] >= 2 and all(r >= 1 for r in reads)  # the meeting's read and the verdict, then the verdict
        plain = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, min_new_tokens=16,
                               do_sample=False)[0, prompt.shape[1]:].tolist()
        assert list(result.token_ids) == list(alone[index].token_ids) == plain


def _sanctioned(function):
    """``function`` run with CUDA's sync check off: the reads the step is allowed to make."""

    def allowed(*args, **kwargs):
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    return allowed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")
def test_a_captured_cuda_step_synchronizes_only_where_it_reads_through_to_host(monkeypatch):
    """On CUDA every captured step runs under ``torch.cuda.set_sync_debug_mode("error")``: a
    synchronizing call anywhere but :func:`to_host` (and the recorder's span reads, after the
    verdict) raises. (Eagerly, transformers' own mask code may synchronize: not the loop's.)"""
    from layersearch.runtime.timing import StepRecorder

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("layersearch.") and getattr(module, "to_host", None) is to_host:
            monkeypatch.setattr(module, "to_host", _sanctioned(to_host))
    monkeypatch.setattr(StepRecorder, "outcome", _sanctioned(StepRecorder.outcome))
    model = build_tiny_model("llama", num_layers=4, seed=33).to("cuda")
    model.generation_config.eos_token_id = None
    compile_with(model, dynamo_compiler("eager"))
    decoder = SpeculativeDecoder(model, SkipMask.uniform(4, 0.5), lookahead=StaticLookahead(3), compile=True)
    prompt = torch.tensor([[1, 2, 3, 4, 5]], device="cuda")
    expected = decoder.generate(prompt, 16).token_ids  # compiles outside the check
    step = loop._Run._step

    def checked(run) -> None:
        torch.cuda.set_sync_debug_mode("error")
        try:
            step(run)
        finally:
            torch.cuda.set_sync_debug_mode(0)

    monkeypatch.setattr(loop._Run, "_step", checked)
    result = decoder.generate(prompt, 16)
    assert result.token_ids == expected and result.stats.path == "captured"
    assert all(outcome.host_reads == 1 for outcome in result.stats.steps)
