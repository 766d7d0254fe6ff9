"""Which CPU kernels a model's forwards run: ``stock`` (torch/transformers) or ``numba``.

``numba`` routes every CPU ``nn.Linear`` (q/k/v/o, gate/up/down, the LM head) of float32,
bfloat16 or float16 weights through :func:`~layersearch.kernels.rowwise_linear.rowwise_linear`,
the attention through :func:`~layersearch.kernels.rowwise_attention.rowwise_attention` and the
SiLU and tanh-GELU activations through :func:`~layersearch.kernels.activation.activation`: a
forward over k tokens then reads each weight row once for all of them, and every token's logits
are bitwise what a one-token forward at the same position gives. The switch is a ``with`` block
around both our plain loop and speculative decoding, so their greedy outputs stay identical
token by token.

Exactness in half precision. The kernels read bfloat16 and float16 tensors as they are,
accumulate in float32 in their fixed order and round each result once
(:mod:`layersearch.kernels.dtypes`). What they leave to torch is row-wise already: embedding,
residual adds and the rotary products (one rounding per element), RMSNorm (float32 per row,
as transformers computes it) and the final slicing. So in bfloat16 and float16 too, a token's
logits do not depend on how many tokens share the forward, and greedy speculative output equals
our plain loop's (``tests/kernels/`` checks both on tiny Llama and Qwen2 models). Stock kernels
do not: torch's half-precision GEMM and SDPA block by the number of rows.

Calls over more than :data:`MAX_TOKENS` tokens (a long prompt's prefill, the same in plain and
speculative decoding) keep the stock linear layers, which are faster there. Tree verification
hides keys inside a query's prefix and is exact up to the summation order of the zeros (its
outputs are checked against plain decoding as before).

Whether ``numba`` is used is decided from the latency profile
(:func:`choose_kernels`): only where it measured faster, never where the one-token forward got
slower; for a half-precision model only from a profile that timed the kernels in that dtype
(:data:`~layersearch.kernels.KERNEL_DTYPES`), not from one measured before they ran it.
numba is the ``kernels`` extra: without it ``auto`` runs ``stock`` (said once) and ``numba`` is
one error line naming the install.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Sequence, TypeGuard

import torch

from layersearch.common.errors import LayersearchError
from layersearch.common.extras import has_module, install_command, note_once, require_extra
from layersearch.kernels import KERNEL_NAMES

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Kernel sets, in the order a profile times them (one list: a profile file is checked against it).
KERNELS = KERNEL_NAMES
#: ``kernels=`` choices: a kernel set, or ``auto`` (the profile's choice).
CHOICES = ("auto", *KERNELS)


def __getattr__(name: str):
    """``MAX_TOKENS`` (the limit lives with the kernels, whose import loads numba: lazily)."""
    if name == "MAX_TOKENS":
        from layersearch.kernels.rowwise_linear import MAX_TOKENS

        return MAX_TOKENS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The model's own attribute naming the kernel set :func:`model_kernels` switched on it (absent:
#: stock); compiled forwards key by it (``vars(model).get(ROUTED_KERNELS)``).
ROUTED_KERNELS = "_layersearch_kernels"


def check_kernels(name: str) -> str:
    """``name`` if it is a kernel set, else one error line."""
    if name not in KERNELS:
        raise LayersearchError(f"unknown kernels {name!r}; choose from {', '.join(KERNELS)}")
    return name


@contextlib.contextmanager
def model_kernels(model: PreTrainedModel, kernels: str) -> Iterator[int]:
    """Run ``model``'s forwards with ``kernels`` inside the block; yields the Linear layers routed.

    ``stock`` changes nothing (yields 0). ``numba`` sets an instance ``forward`` on each
    supported Linear and activation module and switches the attention implementation; all are
    undone on exit. Nesting on one model is refused.
    """
    check_kernels(kernels)
    if kernels == "stock" or model.device.type != "cpu":  # the kernels are CPU kernels
        yield 0
        return
    require_extra("numba", "kernels")
    from layersearch.kernels import rowwise_attention

    if vars(model).get(ROUTED_KERNELS):
        raise LayersearchError("kernels are already switched on this model")
    linears = [m for m in model.modules() if _supported_linear(m)]
    activations = [(m, name) for m in model.modules() if (name := _activation_name(m)) is not None]
    warm_up(sorted({m.weight.dtype for m in linears}, key=str))
    rowwise_attention.register()
    attention = model.config._attn_implementation
    marks = vars(model)  # a plain attribute (compile keys read it), not a parameter, buffer or sub-module
    marks[ROUTED_KERNELS] = kernels
    try:
        for module in linears:
            vars(module)["forward"] = _routed_forward(module)  # an instance forward, as nn.Module.__setattr__ stores it
        for act, name in activations:
            vars(act)["forward"] = _routed_activation(act, name)
        model.set_attn_implementation(rowwise_attention.NAME)
        yield len(linears)
    finally:
        for routed in [*linears, *(m for m, _ in activations)]:
            vars(routed).pop("forward", None)
        model.set_attn_implementation(attention)
        del marks[ROUTED_KERNELS]


def choose_kernels(requested: str, profile=None, dtype: torch.dtype | str | None = None) -> str:
    """The kernel set to run: ``requested`` unless it is ``auto``; then the profile's choice
    (``stock`` without a profile: nothing was measured, so nothing is switched; ``stock`` also
    where the profile chose numba and numba is not installed here). ``dtype`` is the model's
    (default: the profile's): for a half-precision model ``auto`` takes ``numba`` only from a
    profile that timed the numba kernels in that dtype, and says so once where it does not."""
    if requested != "auto":
        return check_kernels(requested)
    chosen = profile.kernels if profile is not None else "stock"
    if chosen != "numba":
        return chosen
    if not numba_available():
        return "stock"
    name = profile.dtype if dtype is None else str(dtype).removeprefix("torch.")
    if not timed_in(profile, name):
        note_once(f"the profile did not time the numba kernels in {name}, so kernels 'auto' runs the stock kernels "
                  f"(a profile measured in {name} times them)")
        return "stock"
    return chosen


def timed_in(profile, dtype: str) -> bool:
    """Whether ``profile``'s numba timings ran ``dtype`` through the numba kernels: float32
    always; bfloat16 and float16 where the profile was measured in that dtype by a version that
    ran it (its ``kernel_dtypes``; files from before name none)."""
    if dtype == "float32":
        return True
    return profile.dtype == dtype and dtype in getattr(profile, "kernel_dtypes", ())


def numba_available() -> bool:
    """Whether the numba kernels can run here; says once that ``auto`` runs stock when they cannot."""
    if has_module("numba"):
        return True
    note_once(f"numba is not installed, so kernels 'auto' runs the stock kernels ({install_command('kernels')} adds them)")
    return False


def warm_up(dtypes: Sequence[torch.dtype] = (torch.float32,)) -> None:
    """Compile (or load from numba's cache) the kernels for weights of ``dtypes`` and match
    numba's threads to torch's, so no compile time lands in a timing."""
    import numba

    from layersearch.kernels.activation import PARALLEL_MIN_VALUES, activation
    from layersearch.kernels.rowwise_attention import rowwise_attention
    from layersearch.kernels.rowwise_linear import PARALLEL_MIN_WEIGHTS, rowwise_linear

    most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # numba.config defines its settings at import, unseen by mypy
    numba.set_num_threads(max(1, min(torch.get_num_threads(), most)))
    parallel = numba.get_num_threads() > 1  # then large calls run the parallel variants: compiled here too
    for dtype in {torch.float32, *dtypes}:
        for rows in (5, PARALLEL_MIN_WEIGHTS // 8) if parallel else (5,):
            rowwise_linear(torch.zeros(1, 8, dtype=dtype), torch.zeros(rows, 8, dtype=dtype))
        query = torch.zeros(1, 2, 1, 4, dtype=dtype)
        keys = torch.zeros(1, 1, 3, 4, dtype=dtype)
        rowwise_attention(None, query, keys, keys, None)
        rowwise_attention(None, query, keys, keys, torch.ones(1, 1, 1, 3, dtype=torch.bool))
        for name in ("silu", "gelu_tanh"):
            for values in (3, PARALLEL_MIN_VALUES) if parallel else (3,):
                activation(torch.zeros(values, dtype=dtype), name)


def _supported_linear(module: torch.nn.Module) -> TypeGuard[torch.nn.Linear]:
    from layersearch.kernels.dtypes import DTYPES

    if not isinstance(module, torch.nn.Linear) or "forward" in vars(module):
        return False
    weight = module.weight
    bias_ok = module.bias is None or module.bias.dtype == weight.dtype
    return weight.device.type == "cpu" and weight.dtype in DTYPES and weight.is_contiguous() and bias_ok


def _activation_name(module: torch.nn.Module) -> str | None:
    """The kernel computing ``module``'s activation (see :mod:`layersearch.kernels.activation`),
    or None where it has none (or already has an instance forward)."""
    import functools

    from transformers import activations

    if "forward" in vars(module):
        return None
    if isinstance(module, (torch.nn.SiLU, getattr(activations, "SiLUActivation", torch.nn.SiLU))):
        return "silu"
    act = getattr(module, "act", None)  # GELUTanh computes by torch's tanh GELU, or by its own formula
    if isinstance(module, getattr(activations, "GELUTanh", ())) and isinstance(act, functools.partial) \
            and act.keywords.get("approximate") == "tanh":
        return "gelu_tanh"
    return None


def _routed_forward(module: torch.nn.Linear):
    """A forward for ``module``: the row-wise kernel for up to MAX_TOKENS tokens in inference."""
    import numba

    from layersearch.kernels.rowwise_linear import MAX_TOKENS, prepared_linear

    stock = type(module).forward.__get__(module)
    kernel = prepared_linear(module.weight, module.bias, threads=numba.get_num_threads())

    def forward(x: torch.Tensor) -> torch.Tensor:
        tokens = x.numel() // max(1, x.shape[-1])
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or module.weight.requires_grad)
        if needs_grad or tokens > MAX_TOKENS or x.dtype != module.weight.dtype or x.device.type != "cpu":
            return stock(x)
        if torch.compiler.is_compiling():  # a captured forward: the same kernel as one traceable op
            return torch.ops.layersearch.rowwise_linear(x, module.weight, module.bias)
        return kernel(x)

    forward.traceable = True  # type: ignore[attr-defined]  # captured forwards may run it (see is_traceable)
    return forward


def _routed_activation(module: torch.nn.Module, name: str):
    """A forward for the activation ``module``: the kernel ``name`` for up to MAX_TOKENS tokens
    in inference (a longer prefill is the same in plain and speculative decoding)."""
    from layersearch.kernels.activation import activation
    from layersearch.kernels.dtypes import DTYPES
    from layersearch.kernels.rowwise_linear import MAX_TOKENS

    stock = type(module).forward.__get__(module)

    def forward(x: torch.Tensor) -> torch.Tensor:
        tokens = x.numel() // max(1, x.shape[-1])
        needs_grad = torch.is_grad_enabled() and x.requires_grad
        if needs_grad or tokens > MAX_TOKENS or x.dtype not in DTYPES or x.device.type != "cpu":
            return stock(x)
        if torch.compiler.is_compiling():  # a captured forward: the same kernel as one traceable op
            return torch.ops.layersearch.activation(x, name)
        return activation(x, name)

    forward.traceable = True  # type: ignore[attr-defined]  # captured forwards may run it (see is_traceable)
    return forward


def is_traceable(forward: object) -> bool:
    """Whether an instance ``forward`` set on a module can run inside a captured forward
    (the kernels' routed forwards can; a skip or a foreign override cannot)."""
    return getattr(forward, "traceable", False) is True
