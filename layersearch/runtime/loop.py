"""The speculative decode loop: a short fixed core with four plug-in points.

One step (:meth:`_Run._step`, read top to bottom), with ``pos`` = number of positions in the
cache and ``last`` the newest token (not yet in the cache)::

    control  controller.select(view)             maybe a new mask / draft-length cap (before the step)
    draft    drafter.propose(request)             d1..dk (the lookahead rule decides k)
             backend.rollback(pos)                a layer-skip draft's entries are not the target's
    verify   verifier.verify(request, proposal)   one target forward over [last, d1..dk] -> a, next
    commit   backend.rollback(pos + a + 1)        keep last and the a accepted tokens
    emit     the a accepted tokens and next
    feed     lookahead.update / drafter.observe / controller.observe with the StepOutcome

The drafter and the verifier read one :class:`~layersearch.runtime.step.StepRequest`;
four values cross per step (request, Proposal, Verdict, StepOutcome), and each plug-in subclasses
its base there (:mod:`layersearch.runtime.step`), which declares what the loop may read of it. What does not change
within a generation is worked out once, not per step: which cache layers slide (the cut),
the layers' kinds (the attention mask's sizing), the draft plan and its view of the model
(once per mask).

A step whose drafter proposes nothing (an empty mask, no n-gram match, no room left) is a
plain decoding step: the verification forward over ``[last]`` is exactly the target's forward.
Every plug-in only reads the target's cache or appends draft entries that are cut away, so the
output is the target's own, whatever they decide. The plug-in points:

* drafter    :mod:`layersearch.runtime.drafters`   (layer skip, prompt lookup, hybrid, model)
* lookahead  :mod:`layersearch.runtime.lookahead`  (static, confidence, adaptive, heuristic)
* verifier   :mod:`layersearch.runtime.verification` (chain greedy / speculative sampling),
             :mod:`layersearch.runtime.tree` (SWIFT's top-k token tree)
* controller :mod:`layersearch.runtime.control`    (fixed mask; KnapSpec in knapspec/)

Where the forwards run is the backend's business (:mod:`layersearch.runtime.backend`), chosen
once per generation, so the step has no captured/eager branch: eager, a dynamic cache that a
rollback cuts; captured (``compile=True``), a static KV cache, each shape compiled once
(:mod:`layersearch.runtime.backend`; a CUDA graph on CUDA), where a rollback moves nothing:
every forward writes from its first position and the causal mask hides what lies beyond. The
step's timing, compile seconds, host reads and outcomes are recorded by a
:class:`~layersearch.runtime.timing.StepRecorder` around its phases. Tokens stay on the device
from draft to verdict, so a step whose lookahead reads no confidence makes one host read: the
verdict (:func:`~layersearch.runtime.verification.verify_chain`).
A part that cannot run captured (a token tree's per-step mask, a drafter reading hidden
states, a sliding-window cache, a module forward replaced by untraceable code) makes the generation run
eagerly, with the same output; ``stats.path`` and ``stats.path_reason`` say which ran and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

import torch
from transformers import PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import decoder_layers, skipping
from layersearch.runtime.backend import capacity, capture_blocker
from layersearch.runtime.backend import captured_forwards, choose_backend
from layersearch.runtime.compiling import CaptureStats
from layersearch.runtime.control import FixedMask
from layersearch.runtime.draft_policy import DraftPolicy
from layersearch.runtime.drafters.layer_skip import LayerSkipDrafter
from layersearch.runtime.sampling import SamplingConfig, next_token_probs
from layersearch.runtime.stats import DecodeStats
from layersearch.runtime.step import (
    Controller, DecodeView, DeviceIds, Drafter, HostIds, HostInt, Lookahead, Proposal, StepOutcome, StepRequest,
    Verdict, Verifier, to_host,
)
from layersearch.runtime.timing import StepRecorder
from layersearch.runtime.verification import ChainVerifier


Part = TypeVar("Part")


@dataclass(frozen=True)
class GenerationResult:
    """Generated token ids (prompt excluded) and the run's statistics."""

    token_ids: tuple[int, ...]
    stats: DecodeStats


def eos_ids(model: PreTrainedModel) -> frozenset[int]:
    """End-of-sequence ids from the model's generation config (may be empty)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


class SpeculativeDecoder:
    """Lossless speculative generation for one model, assembled from plug-ins.

    ``SpeculativeDecoder(model, mask)`` is Self-SD: a fixed mask, the layer-skip drafter, the
    policy's confidence rule and chain verification. Pass ``drafter``, ``lookahead``,
    ``verifier`` or ``controller`` to change one part (each an instance of its base in
    :mod:`layersearch.runtime.step`); ``mask`` and ``controller`` exclude each other (a
    controller chooses the mask). ``compile=True`` runs the target's forwards captured (see the
    module docstring) wherever every part allows it.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        mask: SkipMask | None = None,
        *,
        policy: DraftPolicy = DraftPolicy(),
        sampling: SamplingConfig = SamplingConfig(),
        drafter: Drafter | None = None,
        lookahead: Lookahead | None = None,
        verifier: Verifier | None = None,
        controller: Controller | None = None,
        compile: bool = False,
    ) -> None:
        if mask is not None and controller is not None:
            raise LayersearchError("give either a mask or a controller (the controller chooses the mask)")
        self.model = model
        self.num_layers = len(decoder_layers(model))
        self.sampling = sampling
        self.drafter = _plug_in("drafter", drafter or LayerSkipDrafter(), Drafter)
        self.lookahead = _plug_in("lookahead", lookahead or policy.lookahead(), Lookahead)
        self.verifier = _plug_in("verifier", verifier or ChainVerifier(), Verifier)
        self.controller = _plug_in(
            "controller", controller or FixedMask(mask if mask is not None else SkipMask.none(self.num_layers)), Controller)
        if mask is not None:
            with skipping(model, mask):  # validates the mask against the model's layers up front
                pass
        self.drafter.check_target(model)
        self.verifier.check_target(model)
        if not isinstance(compile, bool):
            raise LayersearchError(f"compile must be True or False, got {compile!r}")
        self.compile = compile
        self.compiled = captured_forwards(model)  # shared by every decoder of this model
        self.view = self.compiled.view
        self.static_cache = self.compiled.static_cache

    def capture_blocker(self) -> str:
        """Why this decoder's forwards cannot run captured ("" when they can)."""
        return capture_blocker(self.model, self.drafter, self.verifier)

    def capture_stats(self) -> CaptureStats:
        """The compiled-forward table's size, hit rate and compile seconds so far."""
        return self.compiled.stats()

    @torch.inference_mode()
    def generate(
        self, input_ids: torch.Tensor | Iterable[int], max_new_tokens: int, *, eos_token_ids: Iterable[int] | None = None,
        sampling: SamplingConfig | None = None, on_tokens: Callable[[Sequence[int]], None] | None = None,
        stop_when: Callable[[Sequence[int]], bool] | None = None,
    ) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``input_ids`` (batch size 1).

        ``sampling`` overrides the decoder's settings for this call; ``on_tokens`` is called with
        the new tokens each time the loop commits some (the prefill's token, then each step's
        accepted tokens and the verifier's own), for streaming; it cannot change the loop.
        ``stop_when`` (the new tokens so far -> True to stop) is asked after each new token, as
        an end-of-sequence id is: generation ends right after the token it stops at (stop strings)."""
        prompt = _as_prompt(input_ids, self.model.device)
        stop = eos_ids(self.model) if eos_token_ids is None else frozenset(eos_token_ids)
        tokens = _Tokens(prompt, max_new_tokens, stop, stop_when, on_tokens)
        return _Run(self, prompt, tokens, sampling).execute()


class _Tokens:
    """The generation's tokens on the host: the prompt and every emitted token, and when to stop."""

    def __init__(self, prompt: torch.Tensor, max_new: int, stop: frozenset[int],
                 stop_when: Callable[[Sequence[int]], bool] | None, on_tokens: Callable[[Sequence[int]], None] | None):
        if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
            raise LayersearchError(f"max new tokens must be an integer >= 1, got {max_new!r}")
        self.prompt_length: HostInt = prompt.shape[1]
        self.max_new = max_new
        # Prompt and emitted ids on the CPU; views of it are what drafters and controllers read.
        self.ids = HostIds(torch.zeros(self.prompt_length + max_new + 1, dtype=torch.long))  # [capacity]
        self.ids[: self.prompt_length] = prompt[0].cpu()
        self.new: list[int] = []
        self.stop, self.stop_when, self.on_tokens = stop, stop_when, on_tokens
        self.stopped = False

    @property
    def position(self) -> HostInt:
        """Positions in the cache: every token so far but the newest."""
        return self.prompt_length + len(self.new) - 1

    @property
    def finished(self) -> bool:
        """An end-of-sequence token, a stop, or max_new tokens emitted."""
        return self.stopped or len(self.new) >= self.max_new

    def emit(self, tokens: Sequence[int]) -> int:
        """Append ``tokens`` up to the first that stops the generation, as generate() does; how many."""
        emitted = 0
        for token in tokens:
            self.ids[self.prompt_length + len(self.new)] = token
            self.new.append(token)
            emitted += 1
            if token in self.stop or (self.stop_when is not None and self.stop_when(self.new)):
                self.stopped = True
                break
        if self.on_tokens is not None:
            kept = max(0, min(emitted, self.max_new - (len(self.new) - emitted)))  # what the result keeps
            if kept:
                self.on_tokens(tuple(self.new[len(self.new) - emitted : len(self.new) - emitted + kept]))
        return emitted


class _Run:
    """State of one generation; ``execute`` is the loop of the module docstring."""

    def __init__(self, decoder: SpeculativeDecoder, prompt: torch.Tensor, tokens: _Tokens,
                 sampling: SamplingConfig | None = None):
        self.decoder, self.model, self.prompt, self.tokens = decoder, decoder.model, prompt, tokens
        self.drafter, self.verifier, self.controller = decoder.drafter, decoder.verifier, decoder.controller
        self.sampling = decoder.sampling if sampling is None else sampling
        self.generator = self.sampling.generator(self.model.device)
        self.lookahead, self.mask = decoder.lookahead, SkipMask.none(decoder.num_layers)  # until the controller chooses
        self.recorder = StepRecorder(self.model.device, decoder.compiled)  # times, compiling, host reads, outcomes
        blocker = decoder.capture_blocker() if decoder.compile else ""
        longest = max(self.lookahead.max_draft, self.lookahead.ceiling)
        self.backend = choose_backend(
            self.model, decoder.compiled, decoder.compile, blocker, self.recorder.forwards.region,
            capacity(tokens.prompt_length, tokens.max_new, longest), lambda: self.lookahead.max_draft + 2,
        )
        self.last_ids: DeviceIds | None = None  # [1] the newest token, on the device
        self.prompt_hidden: torch.Tensor | None = None  # [n, hidden] for a controller that wants it

    def execute(self) -> GenerationResult:
        with self.recorder.recording(), self.backend.claim():  # this generation's clock and host reads
            self.drafter.begin(self.prompt[0])
            self._prefill()
            while not self.tokens.finished:
                self._consult_controller(step=len(self.recorder.outcomes))
                self._step()
        stats = self.recorder.stats(min(len(self.tokens.new), self.tokens.max_new), self.backend.path, self.backend.reason)
        return GenerationResult(tuple(self.tokens.new[: self.tokens.max_new]), stats)

    # ----- the step ---------------------------------------------------------------------
    def _step(self) -> None:
        """One step: draft -> verify -> commit -> emit (the recorder times the phases and files the outcome)."""
        request = self._request()
        with self.recorder.phase("draft"):
            proposal = self.drafter.propose(request)  # d1..dk, ids [k] on the device (k <= request.limit)
            self.backend.rollback(request.position)  # a layer-skip draft's entries are not the target's
        with self.recorder.phase("verify"):
            verdict = self._verify(request, proposal)  # one target forward over [last, d1..dk]: a accepted, next
            self.backend.rollback(request.position + verdict.num_accepted + 1)  # commit: last and the a accepted
            self.last_ids = verdict.next_ids  # [1] on the device: the next draft starts there, no host read
        accepted = verdict.path if verdict.path is not None else proposal.tokens[: verdict.num_accepted]
        emitted = self.tokens.emit([*accepted, verdict.next_token])  # a tree's branch or the draft's prefix, and next
        self._feed_back(self.recorder.outcome(request.position, proposal, verdict, emitted, self.mask, self.lookahead))

    def _request(self) -> StepRequest:
        # One request for the whole step: the drafter and the verifier read the same value.
        position = self.tokens.position
        room = self.tokens.max_new - len(self.tokens.new) - 1  # never draft past max_new: verification adds a token
        return StepRequest(
            model=self.model, cache=self.backend.cache, position=position,
            sequence=HostIds(self.tokens.ids[: position + 1]),  # [position + 1] on the CPU, the newest not cached
            limit=max(0, min(self.lookahead.max_draft, room)), mask=self.mask, lookahead=self.lookahead,
            sampling=self.sampling, generator=self.generator, forward=self.backend.forward,
            timed=self.recorder.forwards.region, draft_prefill=self.recorder.draft_prefill,
            last_ids=self.last_ids,  # [1] the newest token, on the device
        )

    def _verify(self, request: StepRequest, proposal: Proposal) -> Verdict:
        layers = self.drafter.hidden_layers
        if not layers:
            return self.verifier.verify(request, proposal)
        with self.backend.capturing(layers):  # SD²: the states from the verification forward itself
            verdict = self.verifier.verify(request, proposal)
        if self.backend.hidden is not None:  # the states at the input whose output gave the token
            self.drafter.observe_hidden(self.backend.hidden[verdict.source_node])  # [len(layers), hidden]
        return verdict

    def _feed_back(self, outcome: StepOutcome) -> None:
        # One StepOutcome to the lookahead rule, the drafter and the controller.
        self.lookahead = self.lookahead.update(outcome)
        self.drafter.observe(outcome)
        self.controller.observe(outcome)

    def _consult_controller(self, step: int) -> None:
        position = self.tokens.position
        with self.recorder.selecting(step, position) as records:
            view = DecodeView(
                self.model, self.backend.cache, self.tokens.ids[: position + 1].unsqueeze(0), position, step,
                self.tokens.prompt_length, self.mask, self.lookahead.max_draft, self.prompt_hidden,
            )
            chosen = self.controller.select(view)
            if chosen is None:
                return
            self.mask = chosen.mask
            if chosen.max_draft is not None:
                self.lookahead = self.lookahead.with_max_draft(chosen.max_draft)
            if chosen.record:
                records.append(chosen.record)

    # ----- the prefill ------------------------------------------------------------------
    def _prefill(self) -> None:
        with self.recorder.prefill():
            hidden_layers = self.drafter.hidden_layers
            wants_prompt = self.controller.wants_prompt_hidden
            layers = hidden_layers + ((self.decoder.num_layers - 1,) if wants_prompt else ())
            if layers:
                logits, hidden = self.backend.forward(self.prompt[0], 0, keep=1, hidden_layers=layers)  # hidden [n, layers, d]
                if wants_prompt:
                    self.prompt_hidden = hidden[:, -1]  # [n, d]: the last decoder layer's output
                if hidden_layers:
                    self.drafter.observe_hidden(hidden[-1, : len(hidden_layers)])
            else:
                logits = self.backend.forward(self.prompt[0], 0, keep=1)
            self.last_ids = self._choose(logits[-1])
            self.tokens.emit(to_host(self.last_ids))

    def _choose(self, logits: torch.Tensor) -> DeviceIds:
        # The next token as a [1] device tensor: the argmax, or a draw from the warped law.
        if self.sampling.greedy:
            return DeviceIds(logits.argmax(-1, keepdim=True))
        return DeviceIds(torch.multinomial(next_token_probs(logits, self.sampling), 1, generator=self.generator))


def _plug_in(point: str, part: Part, base: type) -> Part:
    # A plug-in subclasses its base: the base declares every capability the loop reads, with its default.
    if not isinstance(part, base):
        raise LayersearchError(
            f"{point} must subclass layersearch.runtime.step.{base.__name__} (it declares the optional capabilities "
            f"the loop reads, with defaults); got {type(part).__name__}"
        )
    return part


def _as_prompt(input_ids: torch.Tensor | Iterable[int], device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids if isinstance(input_ids, torch.Tensor) else list(input_ids))
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise LayersearchError(f"batch size must be 1, got input of shape {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise LayersearchError("the prompt is empty")
    return ids.to(device)
