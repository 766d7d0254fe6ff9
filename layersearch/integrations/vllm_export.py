"""A decoder spec as vLLM serves it: ``layersearch export-vllm SPEC DIR``.

vLLM verifies drafts with its own rejection sampler over continuous batches, so a spec travels
as what vLLM's ``speculative_config`` can say (:func:`vllm_draft` decides, or refuses naming the
part and why):

* prompt lookup -> ``method: ngram`` (our n-gram sizes, ``num_speculative_tokens`` = the
  spec's ``max_draft``);
* an independent draft model -> ``method: draft_model`` with that model's folder (in int8: a
  compressed-tensors W8A8 copy, run by vLLM's own int8 kernels; in int4: a W4A16 copy);
* the model drafting for itself under a plan (skipped sub-layers, int8 or int4 sub-layers, the
  int8 or int4 self-draft) -> ``method: draft_model`` with a draft folder built from the
  target's own weights: the sub-layers the plan keeps (whole skipped layers dropped), those in
  int8 as compressed-tensors W8A8, those in int4 as compressed-tensors' ``pack-quantized`` W4A16
  (asymmetric, grouped: :func:`int4_groups` says how it differs from our int4 twins). A plan that skips a layer's attention but keeps its MLP (or the
  reverse) names one of our architectures (:mod:`layersearch.integrations.vllm`), which vLLM
  loads through the ``vllm.general_plugins`` entry point that layersearch installs.

Why a draft folder and not a ``custom_class`` proposer: vLLM runs a draft model with its own
layers, paged KV cache, batching and kernels, in every request of a batch at once; a proposer
class gets token lists and would draft request by request in Python. The cost is memory: vLLM's
``draft_model`` loads its own copy of the kept weights (shared with the target in our runtime)
and its own KV cache; :class:`VllmExport` reports both. A draft keeping its own KV cache also
drafts from its own keys and values, where our self-draft reads the target's: docs/vllm.md
measures what that does to acceptance.

The folder (written whole or not at all; an existing, non-empty ``DIR`` is refused)::

    DIR/README.md               the exact server command and the Python call
    DIR/vllm.json               {"model", "dtype", "speculative_config", "sampling"}: what vLLM takes
    DIR/layersearch-spec.json   the spec it came from
    DIR/model/                  the target as an HF folder (GGUF and embedded models: their
                                converted folder, hard-linked where the file system allows)
    DIR/draft/                  the draft model (draft_model only)
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec
from layersearch.masks.mask import SkipMask

__all__ = ["VllmDraft", "VllmExport", "check_export_folder", "export_vllm", "int4_groups", "vllm_draft"]

#: Lookahead rules vLLM can express: it drafts a fixed ``num_speculative_tokens`` each step.
STATIC_RULES = ("static",)
#: Architectures whose sub-layers our vLLM plugin can skip one by one (whole layers: any).
PLAN_ARCHITECTURES = {"LlamaForCausalLM": "LayersearchLlamaDraftForCausalLM",
                      "Qwen2ForCausalLM": "LayersearchQwen2DraftForCausalLM"}
_ATTENTION_PARTS = (".self_attn.", ".input_layernorm.")
_MLP_PARTS = (".mlp.", ".post_attention_layernorm.")


@dataclass(frozen=True)
class VllmDraft:
    """What a spec's draft is in vLLM's terms."""

    method: str  # "ngram" | "draft_model"
    num_speculative_tokens: int
    ngram: tuple[int, int] | None = None  # (prompt_lookup_min, prompt_lookup_max)
    plan: SkipMask | None = None  # a self-draft's plan (skips, int8 and int4 parts)
    draft_model: str | None = None  # an independent draft model's reference
    draft_quant: str | None = None  # the independent draft model's quantization


@dataclass(frozen=True)
class VllmExport:
    """What :func:`export_vllm` wrote, and the draft's memory beside the target's."""

    folder: Path
    draft: VllmDraft
    config: Mapping[str, Any]  # vllm.json
    target_bytes: int  # the target's weights as served (its dtype)
    draft_bytes: int  # the draft folder's weights as vLLM holds them (0: ngram)
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """A few lines for the user: the method, the memory, and where the command is."""
        lines = [f"vLLM {self.draft.method}, {self.draft.num_speculative_tokens} draft tokens per step"]
        if self.draft_bytes:
            lines.append(f"draft weights {self.draft_bytes / 2**20:.0f} MiB beside the target's {self.target_bytes / 2**20:.0f} MiB "
                         f"({self.draft_bytes / self.target_bytes:.2f}x), plus the draft's own KV cache")
        lines.extend(self.notes)
        lines.append(f"serve it: see {self.folder / 'README.md'}")
        return "\n".join(lines)


def vllm_draft(spec: DecoderSpec, num_layers: int) -> VllmDraft:
    """The spec's draft as vLLM can run it, or one LayersearchError naming the part vLLM cannot
    express and why (``num_layers``: the target's, for a ratio mask)."""
    if spec.plain:
        raise LayersearchError("the spec decodes plainly (plain): vLLM serves that without a speculative_config", fields="plain")
    if spec.verifier != "chain":
        raise LayersearchError(f"verifier {spec.verifier!r}: vLLM verifies one chain of drafts per request, not a token tree",
                               fields="verifier")
    if spec.steering:
        raise LayersearchError("steering: SD² steers the drafter's hidden states inside our loop; vLLM's draft model has no such hook",
                               fields="steering")
    from layersearch.runtime.drafters import drafter_entry

    entry = drafter_entry(spec.drafter.name)  # what the drafter declares, never its name
    reads_rule = entry.runs_model  # a lookup's draft has no confidence: any rule drafts its cap
    if spec.lookahead.name not in STATIC_RULES and (reads_rule or spec.lookahead.name != "confidence"):
        raise LayersearchError(f"lookahead {spec.lookahead.name!r}: vLLM drafts a fixed number of tokens each step; "
                               f"use lookahead 'static' with max_draft k", fields="lookahead")
    if spec.drafter.vocab:
        raise LayersearchError("drafter.vocab: FR-Spec's reduced draft head is not a vLLM draft option", fields="drafter.vocab")
    if entry.mixes:
        raise LayersearchError(f"drafter {spec.drafter.name!r} chooses its source step by step; "
                               f"vLLM takes one draft source per engine, n-grams or a draft model", fields="drafter")
    k = spec.lookahead.max_draft
    if not entry.runs_model:
        from layersearch.runtime.drafters import DrafterParts
        from layersearch.runtime.drafters.prompt_lookup import PromptLookupDrafter

        lookup = entry.make(DrafterParts())
        if not isinstance(lookup, PromptLookupDrafter):
            raise LayersearchError(f"drafter {spec.drafter.name!r}: vLLM's only draft without a model is its n-gram lookup",
                                   fields="drafter")
        return VllmDraft("ngram", k, ngram=(lookup.min_ngram, lookup.max_ngram))
    if spec.drafter.model is not None:
        return VllmDraft("draft_model", k, draft_model=spec.drafter.model.ref, draft_quant=spec.drafter.quant)
    return VllmDraft("draft_model", k, plan=_plan(spec, num_layers))


def _plan(spec: DecoderSpec, num_layers: int) -> SkipMask:
    """The self-draft's plan, as the builder resolves it (decoder/build.py), without a model."""
    from layersearch.decoder.sources import DEFAULT_SKIP_RATIO

    source = spec.mask_source
    if source.kind == "mask":
        assert source.mask is not None
        if source.mask.num_layers != num_layers:
            raise LayersearchError(f"mask_source.mask has {source.mask.num_layers} layers, the model {num_layers}",
                                   fields="mask_source")
        plan = source.mask
    elif source.kind == "uniform":
        assert source.skip_ratio is not None
        plan = SkipMask.uniform(num_layers, source.skip_ratio)
    elif source.kind == "default":
        plan = SkipMask.none(num_layers) if spec.drafter.quant else SkipMask.uniform(num_layers, DEFAULT_SKIP_RATIO)
    else:
        raise LayersearchError(f"mask_source {source.kind!r} chooses the mask while decoding (per step or prompt); "
                               f"a vLLM draft model is one fixed plan: export a fixed mask", fields="mask_source")
    if spec.drafter.quant is not None:
        if not plan.is_skip_only:
            raise LayersearchError("drafter.quant and a plan with its own int8/int4 parts: give one of them",
                                   fields=("drafter.quant", "mask_source"))
        plan = plan.kept_in(spec.drafter.quant)
    if len(plan.attention) == num_layers and len(plan.mlp) == num_layers:
        raise LayersearchError("the plan skips every sub-layer: its draft would compute nothing", fields="mask_source")
    return plan


def model_folder(ref: str, progress: Callable[[str], None] | None = None) -> Path:
    """The HF folder (config.json, safetensors, tokenizer) of the model ``ref`` names: the
    embedded model's and a GGUF file's converted folders, or a local folder as it is."""
    from layersearch.models.gguf import is_gguf_path
    from layersearch.models.loading import EMBEDDED_MODEL, embedded_model_dir, gguf_model_dir

    if ref == EMBEDDED_MODEL:
        return embedded_model_dir(progress)
    path = Path(os.path.expanduser(ref))
    if is_gguf_path(ref):
        return gguf_model_dir(path, progress)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise LayersearchError(f"model {ref!r}: the vLLM export needs the model's files here "
                           f"(the embedded model, a .gguf file or a local model folder)", fields="model.ref")


def export_vllm(spec_or_path: DecoderSpec | str | os.PathLike, folder: str | os.PathLike,
                progress: Callable[[str], None] | None = None) -> VllmExport:
    """Write the vLLM folder of a decoder spec (see the module docstring) and return what it holds."""
    spec = spec_or_path if isinstance(spec_or_path, DecoderSpec) else _load_spec(spec_or_path)
    root = check_export_folder(os.fspath(folder))
    target_dir = model_folder(spec.model.ref.ref, progress)
    config = json.loads((target_dir / "config.json").read_text())
    draft = vllm_draft(spec, int(config["num_hidden_layers"]))
    dtype = spec.model.dtype or "float32"
    if draft.plan is not None:
        _check_architecture(config, draft.plan)
        # the int4 self-draft runs groups of 128 or what the model's widths take, as our drafter does;
        # a plan's own group size is kept (and refused where it does not fit)
        draft = replace(draft, plan=_fit_int4(target_dir, draft.plan, fit=spec.drafter.quant == "int4"))
    if draft.plan is not None and draft.plan.has_int4:
        _check_int4_dtype(dtype)
    parent = root.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide the folder from the user's vLLM service
    try:
        notes: list[str] = []
        _link_folder(target_dir, staging / "model")
        int4 = (draft.plan is not None and draft.plan.has_int4) or draft.draft_quant == "int4"
        if int4 and not _has_avx512():
            notes.append("int4 draft: vLLM's CPU build runs 4-bit weights (cpu_gemm_wna16) on AVX-512 CPUs only, "
                         "and this one has none; serve it on an AVX-512 CPU (on a GPU: not tested)")
        draft_bytes = 0
        if draft.method == "draft_model":
            draft_source = target_dir if draft.plan is not None else model_folder(draft.draft_model or "", progress)
            plan = draft.plan if draft.plan is not None else _whole_model_plan(draft_source, draft.draft_quant, dtype)
            draft_bytes = write_draft(draft_source, staging / "draft", plan, dtype)
        served = _vllm_config(root, draft, dtype, spec)
        (staging / "vllm.json").write_text(json.dumps(served, indent=2) + "\n")
        (staging / "layersearch-spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
        (staging / "README.md").write_text(_readme(root, served, draft))
        if root.exists():
            root.rmdir()  # empty, checked above: the staged folder takes its place
        os.rename(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    target_bytes = _weights_bytes(target_dir, dtype)
    return VllmExport(root, draft, served, target_bytes, draft_bytes, tuple(notes))


def _has_avx512() -> bool:
    """True where this CPU runs vLLM's AVX-512 CPU build, the one holding its W4A16 GEMM (its AVX2
    build, ``vllm/_C_AVX2.abi3.so``, loaded by ``vllm/platforms/cpu.py`` ``import_kernels`` when
    torch sees no AVX-512, lacks ``cpu_gemm_wna16``)."""
    import torch

    return torch.cpu._is_avx512_supported()


def _load_spec(path: str | os.PathLike) -> DecoderSpec:
    if not isinstance(path, (str, os.PathLike)):
        raise LayersearchError(f"export_vllm takes a DecoderSpec or a spec file, got {type(path).__name__}")
    return DecoderSpec.load(Path(path))


def check_export_folder(folder: str | Path, what: str = "folder") -> Path:
    """``folder`` if the export can become it: checked as any output folder is (not a file, not
    under one, writable), and new or empty (the export never writes into one that holds anything)."""
    from layersearch.common.outputs import check_output_folder

    real = check_output_folder(folder, what)
    try:
        holds = real.is_dir() and any(real.iterdir())
    except OSError as exc:
        raise LayersearchError(f"cannot read {what} {os.fspath(folder)}: {exc.strerror or exc}", fields=what) from None
    if holds:
        raise LayersearchError(f"{what} {os.fspath(folder)} is not empty: the export writes a new folder whole, "
                               "never into one that holds anything; give a new or empty folder", fields=what)
    return Path(folder).expanduser().absolute()


def _check_architecture(config: Mapping[str, Any], plan: SkipMask) -> None:
    """A plan skipping half a layer needs one of our plugin architectures for the model's."""
    if _partial_layers(plan):
        arch = (config.get("architectures") or ["?"])[0]
        if arch not in PLAN_ARCHITECTURES:
            raise LayersearchError(f"the plan skips single sub-layers of {arch}; the vLLM plugin does so for "
                                   f"{', '.join(PLAN_ARCHITECTURES)} only (whole layers: any model)", fields="mask_source")


def _partial_layers(plan: SkipMask) -> list[int]:
    """Layers whose attention or MLP alone is skipped."""
    return sorted(set(plan.attention) ^ set(plan.mlp))


def _whole_model_plan(folder: Path, quant: str | None, dtype: str) -> SkipMask:
    layers = int(json.loads((folder / "config.json").read_text())["num_hidden_layers"])
    plan = SkipMask.none(layers)
    if quant == "int4":
        _check_int4_dtype(dtype)
        return _fit_int4(folder, plan.kept_in(quant, head=False), fit=True)
    return plan.kept_in(quant, head=False) if quant else plan


def _check_int4_dtype(dtype: str) -> None:
    """int4 drafts are refused in float16, as our int4 twins refuse it (they emulate bf16 kernels)."""
    if dtype == "float16":
        raise LayersearchError("int4 parts in float16: our int4 drafts run from float32 or bfloat16 weights; "
                               "export with model.dtype float32 or bfloat16", fields="model.dtype")


def _fit_int4(folder: Path, plan: SkipMask, fit: bool) -> SkipMask:
    """``plan`` with the int4 group size its draft runs with over the Linears in ``folder``: where
    ``fit`` (the int4 self-draft), 128 or the largest accepted size below that divides every
    Linear's in-features (:func:`layersearch.models.int4.model_group_size`'s rule); otherwise the
    plan's own, refused in one line where it does not divide them."""
    if not plan.has_int4:
        return plan
    from layersearch.models.int4 import GROUP_SIZES, _fitting_words

    widths = _linear_widths(folder)
    group = plan.int4_group_size
    if fit:
        fitting = [g for g in GROUP_SIZES if g <= group and all(w % g == 0 for w in widths)]
        group = max(fitting, default=group)
    if any(w % group for w in widths):
        raise LayersearchError(f"int4 group_size {group} does not divide the in-features {sorted(widths)} of "
                               f"{folder.name}'s Linears: {_fitting_words(widths)}", fields="mask_source")
    return plan if group == plan.int4_group_size else replace(plan, int4_group_size=group)


def _linear_widths(folder: Path) -> set[int]:
    """The in-features of the model's Linears: every 2-D weight of its layers and head."""
    from safetensors import safe_open

    widths = set()
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                shape = handle.get_slice(name).get_shape()
                if len(shape) == 2 and name.endswith(".weight") and "embed_tokens" not in name:
                    widths.add(int(shape[1]))
    return widths


def _vllm_config(root: Path, draft: VllmDraft, dtype: str, spec: DecoderSpec) -> dict[str, Any]:
    speculative: dict[str, Any] = {"method": draft.method, "num_speculative_tokens": draft.num_speculative_tokens}
    if draft.ngram is not None:
        speculative["prompt_lookup_min"], speculative["prompt_lookup_max"] = draft.ngram
    else:
        speculative["model"] = str(root / "draft")
    sampling = spec.sampling
    params: dict[str, Any] = {"temperature": sampling.temperature if sampling.do_sample else 0.0, "top_p": sampling.top_p}
    if sampling.do_sample and sampling.top_k:  # absent: vLLM keeps every token, as top_k 0 does
        params["top_k"] = sampling.top_k
    if sampling.do_sample and sampling.seed is not None:
        params["seed"] = sampling.seed
    return {"model": str(root / "model"), "dtype": dtype, "speculative_config": speculative, "sampling": params,
            "max_tokens": spec.max_new_tokens}


def _readme(root: Path, served: Mapping[str, Any], draft: VllmDraft) -> str:
    speculative = json.dumps(served["speculative_config"])
    plugin = ""
    if draft.plan is not None and _partial_layers(draft.plan):
        plugin = ("\nThe draft skips single sub-layers: vLLM's environment needs layersearch installed beside it\n"
                  "(its `vllm.general_plugins` entry point registers the draft architecture; `pip install --no-deps layersearch`).\n")
    return f"""# A layersearch decoder served by vLLM

Written by `layersearch export-vllm`. Greedy output is vLLM's plain output token for token in
float32; in bfloat16 the model's own distribution, with near-ties broken as any change of
batch shape breaks them. Sampling goes through vLLM's rejection sampler.
{plugin}
Server (OpenAI-compatible, on this machine):

```bash
python -m vllm.entrypoints.openai.api_server --model {served['model']} --dtype {served['dtype']} \\
    --speculative-config '{speculative}'
```

Python:

```python
from vllm import LLM, SamplingParams

llm = LLM(model="{served['model']}", dtype="{served['dtype']}",
          speculative_config={speculative})
outputs = llm.generate(["def quicksort(xs):"], SamplingParams(max_tokens={served['max_tokens']}, **{json.dumps(served['sampling'])}))
```

`vllm.json` holds the same values; `layersearch-spec.json` the spec they came from.
"""


# --- the draft folder --------------------------------------------------------------------


def write_draft(source: Path, out: Path, plan: SkipMask, dtype: str) -> int:
    """Write the draft model of ``plan`` over the weights in ``source`` to ``out``: the kept
    sub-layers (whole skipped layers dropped and the rest renumbered), int8 parts as
    compressed-tensors W8A8 (per-channel weights, per-token dynamic activations, as our int8
    twins), int4 parts as compressed-tensors W4A16 ``pack-quantized`` (:func:`int4_groups`).
    Returns the bytes of its weights as vLLM holds them (4-bit codes packed eight an int32)."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((source / "config.json").read_text())
    kept_layers = [i for i in range(plan.num_layers) if not (i in plan.attention and i in plan.mlp)]
    renumber = {old: new for new, old in enumerate(kept_layers)}
    weights: dict[str, torch.Tensor] = {}
    quantized: dict[str, list[str]] = {"int8": [], "int4": []}
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    tied = bool(config.get("tie_word_embeddings", False))

    def write_quantized(quant: str, module: str, tensor: torch.Tensor) -> None:
        if quant == "int8":
            weights[f"{module}.weight"], weights[f"{module}.weight_scale"] = _int8_per_channel(tensor)
        else:
            packed, scale, zero_point, shape = int4_groups(tensor, plan.int4_group_size)
            weights.update({f"{module}.weight_packed": packed, f"{module}.weight_scale": scale.to(torch_dtype),
                            f"{module}.weight_zero_point": zero_point, f"{module}.weight_shape": shape})
        quantized[quant].append(module)

    head_quant = "int8" if plan.int8_head else "int4" if plan.int4_head else None
    for name, tensor in _read_weights(source):
        if head_quant and (name == "lm_head.weight" or (tied and name == "model.embed_tokens.weight")):
            # the head in int8 / int4: its own copy (a tied head is untied from the embedding for it)
            write_quantized(head_quant, "lm_head", tensor)
            if name == "lm_head.weight":
                continue
        placed = _place(name, plan, renumber)
        if placed is None:
            continue
        layer, part = placed
        quant = _quant_of(plan, layer, part) if layer is not None and tensor.dim() == 2 else None
        if quant is not None:
            write_quantized(quant, placed_name(name, renumber)[: -len(".weight")], tensor)
        else:
            weights[placed_name(name, renumber)] = tensor.to(torch_dtype) if tensor.is_floating_point() else tensor
    out.mkdir(parents=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    _copy_tokenizer(source, out)
    draft_config = _draft_config(config, plan, kept_layers, renumber, quantized, dtype)
    (out / "config.json").write_text(json.dumps(draft_config, indent=2))
    return sum(t.numel() * t.element_size() for t in weights.values())


def placed_name(name: str, renumber: Mapping[int, int]) -> str:
    """``name`` with its layer number moved to the draft's numbering."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "model" and parts[1] == "layers":
        parts[2] = str(renumber[int(parts[2])])
    return ".".join(parts)


def _place(name: str, plan: SkipMask, renumber: Mapping[int, int]) -> tuple[int | None, str] | None:
    """(layer, "attention" | "mlp") of a kept weight, (None, "") outside the layers, None if skipped."""
    parts = name.split(".")
    if not (len(parts) > 2 and parts[0] == "model" and parts[1] == "layers"):
        return None, ""
    layer = int(parts[2])
    if layer not in renumber:
        return None
    dotted = "." + ".".join(parts[3:])
    if any(dotted.startswith(p) for p in _ATTENTION_PARTS):
        return None if layer in plan.attention else (layer, "attention")
    if any(dotted.startswith(p) for p in _MLP_PARTS):
        return None if layer in plan.mlp else (layer, "mlp")
    return layer, ""  # another per-layer weight (kept with its layer)


def _quant_of(plan: SkipMask, layer: int, part: str) -> str | None:
    """"int8" / "int4" where the plan runs that sub-layer so, None at full precision."""
    for quant in ("int8", "int4"):
        if part in ("attention", "mlp") and layer in getattr(plan, f"{quant}_{part}"):
            return quant
    return None


def _int8_per_channel(weight: Any) -> tuple[Any, Any]:
    """Symmetric int8 per output channel, as our int8 twins quantize: ([out, in] int8, [out, 1] fp32)."""
    import torch

    w = weight.detach().float()  # [out, in]
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0  # [out, 1]
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def int4_groups(weight: Any, group_size: int) -> tuple[Any, Any, Any, Any]:
    """``weight`` [out, in] in compressed-tensors' asymmetric 4-bit groups, as its ``pack-quantized``
    format stores them: ``weight_packed`` [out, in / 8] int32 (eight codes an int32, input
    column ``8j + i`` in bits ``4i..4i+3``), ``weight_scale`` [out, groups] float32,
    ``weight_zero_point`` [out / 8, groups] int32 (packed along the output rows) and
    ``weight_shape`` [2] int64. vLLM's W4A16 kernels (``CompressedTensorsWNA16``, type uint4
    with zero points) compute ``w = (q - zp) * s`` from the nibbles ``q`` and ``zp`` (0..15).

    Our int4 twins (:mod:`layersearch.models.int4`, tinygemm's convention) compute
    ``w = (q - 8) * s + z`` with a bf16 *real* zero ``z``; compressed-tensors' zero point is an
    integer, so our weights are not exactly expressible. What is written: our bf16 scale ``s``
    (the same ``(max - min) / 15``; a group all of one sign stretches its range to include 0, as
    compressed-tensors' observer does), the zero point ``zp = round(-min / s)`` (ours is
    ``8 - z / s``, a real number: rounded) and the codes rounded against it,
    ``q = clamp(round(w / s) + zp, 0, 15)``: compressed-tensors' own quantizer with our scales.
    Each weight then lies within half a step ``s / 2`` of the float weight, as ours does, and
    within one step of ours; most codes equal ours. Keeping our codes and rounding only the zero
    point would shift every weight of a group by the same up-to-half step, a bias ours has not."""
    import torch

    from layersearch.models.int4 import quantize_groups

    w = weight.detach().to(torch.float32)  # [out, in]
    out_features, in_features = w.shape
    groups = w.reshape(out_features, in_features // group_size, group_size)  # [out, g, size]
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # [out, g]
    _, ours, _ = quantize_groups(w, group_size)  # our bf16 scales [out, g]
    one_sign = (low > 0) | (high < 0)
    stretched = ((high.clamp_min(0) - low.clamp_max(0)).clamp_min(1e-6) / 15).to(torch.bfloat16)
    scale = torch.where(one_sign, stretched, ours).float()  # [out, g], bf16 values
    zero_point = torch.round(-low.clamp_max(0) / scale).clamp(0, 15)  # [out, g]
    codes = (torch.round(groups / scale[..., None]) + zero_point[..., None]).clamp(0, 15)  # [out, g, size]
    packed = _pack_nibbles(codes.reshape(out_features, in_features).to(torch.int32))  # [out, in / 8]
    zero_packed = _pack_nibbles(zero_point.to(torch.int32).t().contiguous()).t().contiguous()  # [out / 8, g]
    return packed, scale, zero_packed, torch.tensor([out_features, in_features], dtype=torch.int64)


def _pack_nibbles(values: Any) -> Any:
    """[rows, cols] int32 in 0..15 -> [rows, cols / 8] int32, column ``8j + i`` in bits ``4i``
    (compressed-tensors' ``pack_to_int32``; the top nibble's bit 31 makes the int32 negative)."""
    import torch

    rows, cols = values.shape
    if cols % 8:
        raise LayersearchError(f"int4 packing needs widths in multiples of 8, got {cols}")
    nibbles = values.reshape(rows, cols // 8, 8).to(torch.int64) << (4 * torch.arange(8, dtype=torch.int64))
    packed = nibbles.sum(dim=-1)  # [rows, cols / 8] in 0 .. 2**32 - 1
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def _draft_config(config: dict[str, Any], plan: SkipMask, kept: list[int], renumber: Mapping[int, int],
                  quantized: Mapping[str, list[str]], dtype: str) -> dict[str, Any]:
    from layersearch.integrations.vllm import PLAN_KEY

    draft = dict(config)
    draft["num_hidden_layers"] = len(kept)
    draft["dtype"] = dtype
    draft.pop("torch_dtype", None)
    if isinstance(config.get("layer_types"), list):
        draft["layer_types"] = [config["layer_types"][i] for i in kept]
    if "max_window_layers" in config:
        draft["max_window_layers"] = min(int(config["max_window_layers"]), len(kept))
    partial = _partial_layers(plan)
    if partial:
        arch = config["architectures"][0]
        draft["architectures"] = [PLAN_ARCHITECTURES[arch]]
        draft[PLAN_KEY] = {"skip_attention": sorted(renumber[i] for i in plan.attention if i in renumber),
                           "skip_mlp": sorted(renumber[i] for i in plan.mlp if i in renumber)}
    if any(quantized.values()):
        draft["quantization_config"] = _quantization_config(quantized, plan.int4_group_size)
    if "lm_head" in (*quantized["int8"], *quantized["int4"]):
        draft["tie_word_embeddings"] = False
    return draft


def _quantization_config(quantized: Mapping[str, list[str]], group_size: int) -> dict[str, Any]:
    """compressed-tensors' schemes over exactly the named Linear layers: W8A8 int8 (format
    ``int-quantized``) for the int8 ones, W4A16 asymmetric groups (``pack-quantized``) for the
    int4 ones; one config group each, each with its own format (the checkpoint's is then
    ``mixed-precision``, which vLLM reads group by group)."""
    import re

    groups: dict[str, Any] = {}
    formats = []
    for quant, names in quantized.items():
        if not names:
            continue
        targets = [f"re:.*{re.escape(name)}$" for name in sorted(names)]
        if quant == "int8":
            group = {"targets": targets, "format": "int-quantized",
                     "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
                     "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                                           "dynamic": True}}
        else:
            group = {"targets": targets, "format": "pack-quantized",
                     "weights": {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                                 "group_size": group_size, "dynamic": False}}
        groups[f"group_{len(groups)}"] = group
        formats.append(group["format"])
    return {"quant_method": "compressed-tensors", "format": formats[0] if len(formats) == 1 else "mixed-precision",
            "quantization_status": "compressed", "config_groups": groups, "ignore": []}


def _read_weights(folder: Path) -> Any:
    """(name, tensor) of every weight in the folder's safetensors files."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise LayersearchError(f"{folder}: no .safetensors weights to build the draft from")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)


def _copy_tokenizer(source: Path, out: Path) -> None:
    for entry in source.iterdir():
        if entry.is_file() and entry.suffix != ".safetensors" and entry.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy2(entry, out / entry.name)


def _link_folder(source: Path, out: Path) -> None:
    """``source``'s files under ``out``: hard links where the file system allows (no second copy on disk)."""
    out.mkdir()
    for entry in source.iterdir():
        if entry.is_file():
            try:
                os.link(entry, out / entry.name)
            except OSError:
                shutil.copy2(entry, out / entry.name)


def _weights_bytes(folder: Path, dtype: str) -> int:
    """The bytes the folder's weights take in ``dtype``."""
    from safetensors import safe_open

    size = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                total += math.prod(handle.get_slice(name).get_shape()) * size
    return total

