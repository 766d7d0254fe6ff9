"""Training SD²'s steering: KL(π_V ‖ π_D(· | g_{t−δ})) on text the frozen verifier samples.

Data (:func:`collect`): for each training prompt the verifier samples a continuation at
T = 1; one more verifier forward over prompt + continuation gives, at every input position,
its next-token log-probabilities (the targets), its outputs of the steering layers (for g) and
its keys / values (the self-drafter's context).

A step (:func:`kl_loss`) takes one example. Each query position ``q`` (the continuation's
inputs) gets ``δ ~ U[1, k]`` and the steering vector of position ``max(q − δ, prompt end)``:
at inference the j-th draft token of a stage is steered by the states of the input ``j``
positions back, and the first stage by the prefill's. Then the drafter runs as it drafts:

* self-drafter: the verifier with the mask, teacher-forced over the continuation in ONE
  forward whose cache holds the verifier's own keys / values for the whole sequence; a 4-D
  attention mask gives query ``q`` the verifier's entries before ``q`` plus only its own new
  entry, exactly the context a first draft token sees (a later draft token would also see the
  draft entries of the same stage; those are the verifier's here, an approximation);
* independent drafter: its own causal forward over the sequence, each position steered by its
  own g (at inference its cache entries were computed under the g of their stage).

Only W_hml and W_s are trained (AdamW, gradient clipping 0.5 as in the paper); the verifier
stays frozen. With ``settings.drafter_lr`` an independent drafter is fine-tuned jointly on the
same loss (its own, smaller learning rate): every weight but the input embeddings and the LM
head, which stay frozen (tied in SmolLM2; they hold most of a small model's weights, and
freezing them keeps the drafter's token space the verifier's and AdamW's state small).
``progress(step, loss)`` is called after every optimiser step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence, cast

import torch
from transformers import Cache, PreTrainedModel

from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import SkipMask
from layersearch.models.skipping import skipping
from layersearch.runtime.cache import new_cache
from layersearch.runtime.forward import forward_tokens
from layersearch.steer.hooks import steered
from layersearch.steer.params import SteeringParams


@dataclass(frozen=True)
class TrainSettings:
    """How steering is trained (stored in the steering file)."""

    steps: int = 120
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_offset: int = 8  # k: δ is uniform in [1, k]
    new_tokens: int = 32  # sampled continuation length per prompt
    max_prompt_tokens: int = 192  # longer prompts keep their last tokens (short sequences train fast)
    clip: float = 0.5
    seed: int = 0
    drafter_lr: float | None = None  # fine-tune the independent drafter too, at this rate

    def __post_init__(self) -> None:
        for name in ("steps", "max_offset", "new_tokens", "max_prompt_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayersearchError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
        span = self.new_tokens + self.max_prompt_tokens
        if self.max_offset > span:  # larger offsets only ever reach back past the sample (and overflow randint)
            raise LayersearchError(
                f"max-offset must be at most new-tokens + max-prompt-tokens ({span}), got {self.max_offset}"
            )
        if not self.lr > 0:
            raise LayersearchError(f"lr must be > 0, got {self.lr}")
        if self.drafter_lr is not None and not self.drafter_lr > 0:
            raise LayersearchError(f"drafter-lr must be > 0, got {self.drafter_lr}")

    def to_dict(self) -> dict:
        """Plain dict for the file's metadata."""
        return asdict(self)


@dataclass(frozen=True)
class Example:
    """One verifier-sampled sequence and the frozen verifier's view of it."""

    ids: torch.Tensor  # [n] prompt + continuation
    start: int  # prompt length: queries are the inputs start-1 .. n-2
    targets: torch.Tensor  # [m, vocab] verifier log-probs at the queries (m = n - start)
    states: torch.Tensor  # [n, layers, d] verifier outputs of the steering layers
    keys: tuple[torch.Tensor, ...]  # per layer [1, kv_heads, n, head_dim]
    values: tuple[torch.Tensor, ...]


@torch.no_grad()
def collect(
    verifier: PreTrainedModel, prompts: Sequence[torch.Tensor], layers: tuple[int, ...], settings: TrainSettings,
    generator: torch.Generator, progress: Callable[[int], None] | None = None,
) -> list[Example]:
    """Sample a T = 1 continuation per prompt ([n] ids each) and record the verifier's view."""
    examples = []
    for index, prompt in enumerate(prompts):
        prompt = prompt[-settings.max_prompt_tokens:]
        ids = _sample(verifier, prompt, settings.new_tokens, generator)
        if ids.shape[0] > prompt.shape[0]:
            examples.append(_view(verifier, ids, prompt.shape[0], layers))
        if progress is not None:
            progress(index + 1)
    if not examples:
        raise LayersearchError("the verifier ended every sample at once; no training data")
    return examples


def _sample(model: PreTrainedModel, prompt: torch.Tensor, new: int, generator: torch.Generator) -> torch.Tensor:
    """prompt + up to ``new`` tokens sampled at T = 1 (stops after an end-of-sequence token)."""
    from layersearch.runtime.loop import eos_ids

    stop = eos_ids(model)
    cache = new_cache(model)
    ids = prompt.tolist()
    logits = forward_tokens(model, ids, 0, cache, keep=1)[-1]
    for _ in range(new):
        token = int(torch.multinomial(torch.softmax(logits.float(), -1).cpu(), 1, generator=generator))
        ids.append(token)
        if token in stop:
            break
        logits = forward_tokens(model, [token], len(ids) - 1, cache, keep=1)[-1]
    return torch.tensor(ids)


def _view(model: PreTrainedModel, ids: torch.Tensor, start: int, layers: tuple[int, ...]) -> Example:
    cache = new_cache(model)
    logits, states = forward_tokens(model, ids.tolist(), 0, cache, hidden_layers=layers)  # [n, vocab], [n, L, d]
    targets = torch.log_softmax(logits[start - 1 : -1].float(), -1)  # [m, vocab]
    keys, values = _entries(cache)
    return Example(ids.cpu(), start, targets, states.detach(), keys, values)


def _entries(cache: Cache) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """Every layer's keys and values ``[1, heads, n, head_dim]``, detached."""
    keys, values = [], []
    for layer in cache.layers:
        k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise LayersearchError(f"steering reads the verifier's keys and values; a {type(layer).__name__} cache layer holds none")
        keys.append(k.detach())
        values.append(v.detach())
    return tuple(keys), tuple(values)


def sources(example: Example, max_offset: int, generator: torch.Generator, positions: torch.Tensor) -> torch.Tensor:
    """For input ``positions`` [p], the positions whose states steer them: ``max(q − δ, start − 1)``."""
    offsets = torch.randint(1, max_offset + 1, positions.shape, generator=generator)
    return torch.clamp(positions - offsets, min=example.start - 1)


def kl_loss(
    params: SteeringParams, verifier: PreTrainedModel, example: Example, mask: SkipMask | None,
    drafter: PreTrainedModel | None, max_offset: int, generator: torch.Generator,
) -> torch.Tensor:
    """Mean KL(π_V ‖ π_D) over the example's queries, the drafter steered by g_{q−δ}."""
    n = example.ids.shape[0]
    if drafter is None:
        if mask is None:
            raise LayersearchError("kl_loss: the self-drafter (drafter=None) needs a mask")
        queries = torch.arange(example.start - 1, n - 1)  # [m]
        bias = params.bias(example.states[sources(example, max_offset, generator, queries)])  # [m, intermediate]
        logits = _self_draft_logits(verifier, example, mask, queries, bias)
    else:
        inputs = torch.arange(0, n - 1)  # the drafter reads the whole sequence
        bias = params.bias(example.states[sources(example, max_offset, generator, inputs)])  # [n-1, intermediate]
        with steered(drafter, bias.to(drafter.device)):
            out = drafter(input_ids=example.ids[None, :-1].to(drafter.device), logits_to_keep=n - example.start)
        logits = out.logits[0]  # [m, vocab]
    log_q = torch.log_softmax(logits.float(), -1).cpu()
    p = example.targets.exp()
    return (p * (example.targets - log_q)).sum(-1).mean()


def _self_draft_logits(verifier, example: Example, mask: SkipMask, queries: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The masked verifier over the queries, each seeing the verifier's cache before it plus its own entry."""
    n, m = example.ids.shape[0], queries.shape[0]
    cache = new_cache(verifier)
    for index, (k, v) in enumerate(zip(example.keys, example.values)):
        cache.update(k, v, index)
    dtype = verifier.dtype
    allowed = torch.zeros(m, n + m, dtype=torch.bool)
    allowed[:, :n] = torch.arange(n)[None, :] < queries[:, None]  # the verifier's entries before q
    allowed[:, n:] = torch.eye(m, dtype=torch.bool)  # and the query's own new entry
    attention = torch.zeros(m, n + m, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min).view(1, 1, m, n + m)
    with skipping(verifier, mask), steered(verifier, bias.to(verifier.device)):
        # Without hidden_layers forward_tokens returns the logits alone, not a (logits, states) pair.
        return cast(torch.Tensor, forward_tokens(
            verifier, example.ids[queries].tolist(), 0, cache, positions=queries, attention_mask=attention
        ))  # [m, vocab]


def train(
    params: SteeringParams, verifier: PreTrainedModel, examples: Sequence[Example], settings: TrainSettings, *,
    mask: SkipMask | None = None, drafter: PreTrainedModel | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``params`` in place (and, with ``settings.drafter_lr``, the drafter's
    :func:`tunable` weights); returns the loss of every step."""
    if (mask is None) == (drafter is None):
        raise LayersearchError("train steering for the self-drafter (a mask) or a draft model, not both")
    if settings.drafter_lr is not None and drafter is None:
        raise LayersearchError("only an independent draft model can be fine-tuned (the self-drafter is the verifier)")
    generator = torch.Generator().manual_seed(settings.seed)
    params.train().requires_grad_(True)
    groups = [{"params": list(params.parameters()), "lr": settings.lr}]
    tuned = tunable(drafter) if settings.drafter_lr is not None and drafter is not None else []
    if tuned:
        for weight in tuned:
            weight.requires_grad_(True)
        groups.append({"params": tuned, "lr": settings.drafter_lr})
    optimiser = torch.optim.AdamW(groups, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: _cosine(step, settings.steps))
    try:
        return _steps(params, verifier, examples, settings, mask, drafter, optimiser, schedule, generator, progress)
    finally:
        params.eval().requires_grad_(False)
        for weight in tuned:
            weight.requires_grad_(False)


def _cosine(step: int, steps: int) -> float:
    """Cosine decay of every group's learning rate to a tenth of its start."""
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(step, steps) / steps))


def tunable(drafter: PreTrainedModel) -> list[torch.nn.Parameter]:
    """The drafter's weights fine-tuning trains: all but the input embeddings and the LM head."""
    frozen = {id(w) for w in drafter.get_input_embeddings().parameters()}
    frozen |= {id(w) for w in drafter.get_output_embeddings().parameters()}
    return [w for w in drafter.parameters() if id(w) not in frozen]


def _steps(params, verifier, examples, settings, mask, drafter, optimiser, schedule, generator, progress) -> list[float]:
    losses = []
    for step in range(settings.steps):
        example = examples[int(torch.randint(len(examples), (1,), generator=generator))]
        loss = kl_loss(params, verifier, example, mask, drafter, settings.max_offset, generator)
        optimiser.zero_grad()
        loss.backward()
        for group in optimiser.param_groups:  # clipped apart: the drafter's gradients must not drown W_s's
            torch.nn.utils.clip_grad_norm_(group["params"], settings.clip)
        optimiser.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, losses[-1])
    return losses


@torch.no_grad()
def mean_kl(params, verifier, examples, *, mask=None, drafter=None, max_offset: int = 8, seed: int = 0) -> float:
    """Mean KL over ``examples`` (held-out check; steering at its current values)."""
    generator = torch.Generator().manual_seed(seed)
    return sum(float(kl_loss(params, verifier, e, mask, drafter, max_offset, generator)) for e in examples) / len(examples)
