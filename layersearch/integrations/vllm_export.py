"""A decoder spec as vLLM serves it: ``layersearch export-vllm SPEC DIR``.

vLLM verifies drafts with its own rejection sampler over continuous batches, so a spec travels
as what vLLM's ``speculative_config`` can say (:func:`vllm_draft` decides, or refuses naming the
part and why):

* prompt lookup -> ``method: ngram`` (our n-gram sizes, ``num_speculative_tokens`` = the
  spec's ``max_draft``);
* an independent draft model -> ``method: draft_model`` with that model's folder (in int8: a
  compressed-tensors W8A8 copy, run by vLLM's own int8 kernels);
* the model drafting for itself under a plan (skipped sub-layers, int8 sub-layers, the int8
  self-draft) -> ``method: draft_model`` with a draft folder built from the target's own
  weights: the sub-layers the plan keeps (whole skipped layers dropped), those in int8 as
  compressed-tensors W8A8. A plan that skips a layer's attention but keeps its MLP (or the
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec
from layersearch.masks.mask import SkipMask

__all__ = ["VllmDraft", "VllmExport", "check_export_folder", "export_vllm", "vllm_draft"]

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
    plan: SkipMask | None = None  # a self-draft's plan (skips and int8 parts)
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
        if spec.drafter.quant not in (None, "int8"):
            raise LayersearchError(f"drafter.quant {spec.drafter.quant!r}: the vLLM export writes int8 draft models only "
                                   f"(int4: see docs/vllm.md)", fields="drafter.quant")
        return VllmDraft("draft_model", k, draft_model=spec.drafter.model.ref, draft_quant=spec.drafter.quant)
    plan = _plan(spec, num_layers)
    if plan.int4_attention or plan.int4_mlp or plan.int4_head:
        raise LayersearchError("int4 sub-layers: the vLLM export does not write compressed-tensors' 4-bit format yet "
                               "(docs/vllm.md); export an int8 or full-precision plan", fields="drafter.quant")
    return VllmDraft("draft_model", k, plan=plan)


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
    parent = root.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide the folder from the user's vLLM service
    try:
        notes: list[str] = []
        _link_folder(target_dir, staging / "model")
        draft_bytes = 0
        if draft.method == "draft_model":
            draft_source = target_dir if draft.plan is not None else model_folder(draft.draft_model or "", progress)
            plan = draft.plan if draft.plan is not None else _whole_model_plan(draft_source, draft.draft_quant)
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


def _whole_model_plan(folder: Path, quant: str | None) -> SkipMask:
    layers = int(json.loads((folder / "config.json").read_text())["num_hidden_layers"])
    plan = SkipMask.none(layers)
    return plan.kept_in(quant, head=False) if quant else plan


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
    twins). Returns the bytes of its weights."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((source / "config.json").read_text())
    kept_layers = [i for i in range(plan.num_layers) if not (i in plan.attention and i in plan.mlp)]
    renumber = {old: new for new, old in enumerate(kept_layers)}
    weights: dict[str, torch.Tensor] = {}
    int8_names: list[str] = []
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    tied = bool(config.get("tie_word_embeddings", False))
    for name, tensor in _read_weights(source):
        if plan.int8_head and (name == "lm_head.weight" or (tied and name == "model.embed_tokens.weight")):
            # the head in int8: its own int8 copy (a tied head is untied from the embedding for it)
            weights["lm_head.weight"], weights["lm_head.weight_scale"] = _int8_per_channel(tensor)
            int8_names.append("lm_head")
            if name == "lm_head.weight":
                continue
        placed = _place(name, plan, renumber)
        if placed is None:
            continue
        layer, part = placed
        if layer is not None and tensor.dim() == 2 and _in_int8(plan, layer, part):
            qweight, scale = _int8_per_channel(tensor)
            weights[placed_name(name, renumber)] = qweight
            weights[placed_name(name, renumber)[: -len("weight")] + "weight_scale"] = scale
            int8_names.append(placed_name(name, renumber)[: -len(".weight")])
        else:
            weights[placed_name(name, renumber)] = tensor.to(torch_dtype) if tensor.is_floating_point() else tensor
    out.mkdir(parents=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    _copy_tokenizer(source, out)
    (out / "config.json").write_text(json.dumps(_draft_config(config, plan, kept_layers, renumber, int8_names, dtype), indent=2))
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


def _in_int8(plan: SkipMask, layer: int, part: str) -> bool:
    return (part == "attention" and layer in plan.int8_attention) or (part == "mlp" and layer in plan.int8_mlp)


def _int8_per_channel(weight: Any) -> tuple[Any, Any]:
    """Symmetric int8 per output channel, as our int8 twins quantize: ([out, in] int8, [out, 1] fp32)."""
    import torch

    w = weight.detach().float()  # [out, in]
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0  # [out, 1]
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def _draft_config(config: dict[str, Any], plan: SkipMask, kept: list[int], renumber: Mapping[int, int],
                  int8_names: list[str], dtype: str) -> dict[str, Any]:
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
    if int8_names:
        draft["quantization_config"] = _w8a8_config(int8_names)
    if "lm_head" in int8_names:
        draft["tie_word_embeddings"] = False
    return draft


def _w8a8_config(int8_names: list[str]) -> dict[str, Any]:
    """compressed-tensors' W8A8 int8 scheme over exactly the named Linear layers."""
    import re

    targets = [f"re:.*{re.escape(name)}$" for name in sorted(int8_names)]
    return {"quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": targets,
                                          "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                                                      "dynamic": False},
                                          "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                                                "strategy": "token", "dynamic": True}}},
            "ignore": []}


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

