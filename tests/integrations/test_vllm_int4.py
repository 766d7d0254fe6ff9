"""int4 drafts in the vLLM export: compressed-tensors' ``pack-quantized`` W4A16 (asymmetric groups).

Fast (no vLLM): the tensors written dequantize, by compressed-tensors' rule ``(q - zp) * s``, to
within one step of our Int4Linear's weight and within half a step (plus the ends' clamp) of the
float weight; the folder and its ``quantization_config``. With vLLM's environment
(``LAYERSEARCH_VLLM_PYTHON``): compressed-tensors' own decompressor reads what we wrote, and a
real vLLM engine serves the embedded model's int4 self-draft and a mixed int8 + int4 plan,
greedy tokens equal to vLLM plain and our own plain decoding, batched and single, float32.

vLLM's CPU build has its W4A16 GEMM (``cpu_gemm_wna16``) in its AVX-512 libraries only; on an
AVX2-only CPU the serving tests run with tests/integrations/vllm_worker.py's reference of that
one op (its docstring), and say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.vllm_export import export_vllm, int4_groups
from layersearch.masks.mask import SkipMask
from layersearch.models.int4 import Int4Linear, quantize_groups
from layersearch.models.tiny import build_tiny_model, char_tokenizer

VLLM_PYTHON = os.environ.get("LAYERSEARCH_VLLM_PYTHON", "")
HAS_VLLM = bool(VLLM_PYTHON) and Path(VLLM_PYTHON).exists()
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM's environment not given: layersearch vllm-env DIR, "
                                                     "then LAYERSEARCH_VLLM_PYTHON=DIR/bin/python")
WORKER = Path(__file__).with_name("vllm_worker.py")
LAYERS = 6


def unpack(packed: torch.Tensor, rows: int, cols: int, along_rows: bool = False) -> torch.Tensor:
    """compressed-tensors' ``unpack_from_int32`` for 4 bits: the nibbles 0..15 as int64."""
    if along_rows:
        return unpack(packed.t().contiguous(), cols, rows).t()
    shifts = 4 * torch.arange(8, dtype=torch.int64)
    return ((packed.to(torch.int64)[..., None] >> shifts) & 15).reshape(rows, cols)


def dequantize(packed, scale, zero_point, shape, group_size) -> torch.Tensor:
    """compressed-tensors' (and vLLM's W4A16 kernels') weight: ``(q - zp) * s`` per group."""
    rows, cols = (int(v) for v in shape)
    q = unpack(packed, rows, cols).double()
    zp = unpack(zero_point, rows, cols // group_size, along_rows=True).double()
    return (q - zp.repeat_interleave(group_size, 1)) * scale.double().repeat_interleave(group_size, 1)


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_the_written_groups_dequantize_near_our_int4_linear(group_size):
    torch.manual_seed(group_size)
    linear = torch.nn.Linear(256, 96, bias=False)
    linear.weight.data[3, :group_size] = linear.weight.data[3, :group_size].abs() + 0.01  # a group of one sign
    packed, scale, zero_point, shape = int4_groups(linear.weight, group_size)
    assert (packed.dtype, zero_point.dtype, shape.dtype) == (torch.int32, torch.int32, torch.int64)
    assert packed.shape == (96, 256 // 8) and scale.shape == (96, 256 // group_size)
    assert zero_point.shape == (96 // 8, 256 // group_size) and shape.tolist() == [96, 256]
    ours = Int4Linear(linear, group_size).weight.double()  # our twin's dequantized weight (bf16)
    theirs = dequantize(packed, scale, zero_point, shape, group_size)
    step = scale.double().repeat_interleave(group_size, 1)
    w = linear.weight.detach().double()
    # the stated difference: within one step of ours; within half a step of the weight but at the clamped ends
    assert ((theirs - ours).abs() <= step * 1.001).all()
    assert ((theirs - w).abs() <= step * 0.55).all()
    assert (theirs - w).pow(2).mean() < 1.1 * (ours - w).pow(2).mean()  # as faithful to the weight as ours
    # our bf16 scales where the group holds both signs; zero points ours rounded; most codes ours
    _, our_scales, our_zeros = quantize_groups(linear.weight, group_size)
    straddles = torch.ones_like(scale, dtype=torch.bool)
    straddles[3, 0] = False
    assert torch.equal(scale[straddles], our_scales.float()[straddles])
    our_zero_point = 8 - our_zeros.double() / our_scales.double()  # ours: w = (q - that) * s, a real number
    zp = unpack(zero_point, 96, 256 // group_size, along_rows=True).double()
    assert ((zp - our_zero_point).abs()[straddles] <= 0.5 + 1e-3).all()
    codes = unpack(packed, 96, 256)
    ours_codes = Int4Linear(linear, group_size).codes().to(torch.int64)
    assert (codes == ours_codes).float().mean() > 0.5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "llama"
    build_tiny_model("llama", num_layers=LAYERS, seed=3).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


def local(folder: Path, **fields) -> DecoderSpec:
    fields.setdefault("lookahead", LookaheadSpec("static", 3))
    return DecoderSpec(ModelSpec(ModelRef(str(folder), path=True)), **fields)


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "draft" / "model.safetensors"), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def test_the_int4_self_draft_is_pack_quantized_with_the_group_size_the_model_takes(model_dir, tmp_path):
    export = export_vllm(local(model_dir, drafter=DrafterSpec(quant="int4")), tmp_path / "out")
    plan = export.draft.plan
    assert plan is not None and plan.int4_head and plan.int4_attention == tuple(range(LAYERS))
    assert plan.int4_group_size == 64  # widths 64 and 128: 128 does not divide 64, as our drafter fits it
    config = json.loads((tmp_path / "out" / "draft" / "config.json").read_text())
    quant = config["quantization_config"]
    assert quant["format"] == "pack-quantized" and list(quant["config_groups"]) == ["group_0"]
    group = quant["config_groups"]["group_0"]
    assert group["weights"] == {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64,
                                "dynamic": False}
    assert "input_activations" not in group and "re:.*lm_head$" in group["targets"]
    written = tensors(tmp_path / "out")
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as handle:
        source = {name: handle.get_tensor(name) for name in handle.keys()}
    for module in ("model.layers.2.self_attn.k_proj", "model.layers.5.mlp.down_proj", "lm_head"):
        assert f"{module}.weight" not in written
        got = dequantize(written[f"{module}.weight_packed"], written[f"{module}.weight_scale"],
                         written[f"{module}.weight_zero_point"], written[f"{module}.weight_shape"], 64)
        linear = torch.nn.Linear(*reversed(source[f"{module}.weight"].shape), bias=False)
        linear.weight.data = source[f"{module}.weight"].float()
        ours = Int4Linear(linear, 64).weight.double()
        step = written[f"{module}.weight_scale"].double().repeat_interleave(64, 1)
        assert ((got - ours).abs() <= step * 1.001).all(), module
    # memory: the 4-bit layers and head at about an eighth of fp32 (codes, plus a scale and zero point a group)
    embedding = source["model.embed_tokens.weight"].numel() * 4
    norms = sum(t.numel() * 4 for n, t in source.items() if n.endswith("norm.weight"))
    linears = sum(t.numel() for n, t in source.items() if t.dim() == 2 and "embed_tokens" not in n)
    assert export.draft_bytes == sum(t.numel() * t.element_size() for t in written.values())
    assert linears / 2 < export.draft_bytes - embedding - norms < linears / 2 * 1.2


def test_a_plan_with_int8_and_int4_parts_writes_a_config_group_each(model_dir, tmp_path):
    plan = SkipMask(LAYERS, attention=(1, 3), mlp=(1,), int8_attention=(0, 2), int4_mlp=(0, 2, 3), int4_attention=(4,),
                    int4_group_size=32)
    export_vllm(local(model_dir, drafter=DrafterSpec("layer-skip"), mask_source=MaskSourceSpec("mask", mask=plan)),
                tmp_path / "out")
    quant = json.loads((tmp_path / "out" / "draft" / "config.json").read_text())["quantization_config"]
    assert quant["format"] == "mixed-precision"
    int8, int4 = quant["config_groups"]["group_0"], quant["config_groups"]["group_1"]
    assert int8["format"] == "int-quantized" and int8["weights"]["num_bits"] == 8 and int8["input_activations"]
    assert int4["format"] == "pack-quantized" and int4["weights"]["group_size"] == 32  # a plan's own group size is kept
    # layers renumbered: 0 1 2 3 4 5 -> 0 - 1 2 3 4 (layer 1 dropped)
    assert "re:.*model\\.layers\\.1\\.self_attn\\.q_proj$" in int8["targets"]
    assert "re:.*model\\.layers\\.2\\.mlp\\.up_proj$" in int4["targets"]
    assert "re:.*model\\.layers\\.3\\.self_attn\\.o_proj$" in int4["targets"]
    written = tensors(tmp_path / "out")
    assert written["model.layers.1.self_attn.q_proj.weight"].dtype == torch.int8
    assert written["model.layers.3.self_attn.o_proj.weight_packed"].dtype == torch.int32
    assert written["model.layers.4.mlp.up_proj.weight"].dtype == torch.float32  # layer 5's MLP: full


def test_int4_refusals_name_the_reason(model_dir, tmp_path):
    plan = SkipMask(LAYERS, int4_mlp=(0,), int4_group_size=128)  # 128 does not divide the MLP's 64 in-features
    with pytest.raises(LayersearchError, match="group_size 128 does not divide"):
        export_vllm(local(model_dir, drafter=DrafterSpec("layer-skip"), mask_source=MaskSourceSpec("mask", mask=plan)),
                    tmp_path / "a")
    spec = DecoderSpec(ModelSpec(ModelRef(str(model_dir), path=True), dtype="float16"), drafter=DrafterSpec(quant="int4"),
                       lookahead=LookaheadSpec("static", 3))
    with pytest.raises(LayersearchError, match="float16"):
        export_vllm(spec, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@needs_vllm
def test_compressed_tensors_own_decompressor_reads_our_weights(tmp_path):
    torch.manual_seed(0)
    linear = torch.nn.Linear(192, 64, bias=False)
    packed, scale, zero_point, shape = int4_groups(linear.weight, 64)
    torch.save({"weight_packed": packed, "weight_scale": scale, "weight_zero_point": zero_point, "weight_shape": shape},
               tmp_path / "t.pt")
    script = f"""
import torch
from compressed_tensors.compressors.pack_quantized import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationScheme
scheme = QuantizationScheme(targets=["Linear"], weights=dict(num_bits=4, type="int", symmetric=False, strategy="group",
                                                              group_size=64))
state = torch.load({str(tmp_path / "t.pt")!r})
torch.save(PackedQuantizationCompressor.decompress(state, scheme)["weight"], {str(tmp_path / "w.pt")!r})
"""
    result = subprocess.run([VLLM_PYTHON, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = torch.load(tmp_path / "w.pt").double()
    assert torch.equal(theirs, dequantize(packed, scale, zero_point, shape, 64))


# --- served by a real vLLM engine (the embedded model, float32) --------------------------------------------

PROMPTS = ["def quicksort(xs):", "The capital of France is", "Write a function that adds two numbers.\n",
           "for i in range(10):\n    print(i)\nfor i in range(10):"]
MAX_TOKENS = 24
# the SmolLM2 plan: layer 4 whole and 17's MLP skipped, int8 and int4 sub-layers both (two config groups)
MIXED = SkipMask(30, attention=(4,), mlp=(4, 17), int8_attention=(0, 1, 2), int8_mlp=(3,),
                 int4_mlp=(5, 6, 7, 8, 9), int4_attention=(10, 11), int4_group_size=64)
EXPORTS = {"int4-self": {"drafter": DrafterSpec(quant="int4")},
           "int8-int4-plan": {"drafter": DrafterSpec("layer-skip"), "mask_source": MaskSourceSpec("mask", mask=MIXED)}}


def _run_engine(job: dict, tmp: Path, name: str) -> dict:
    (tmp / f"{name}.job.json").write_text(json.dumps(job))
    result = subprocess.run([VLLM_PYTHON, str(WORKER), str(tmp / f"{name}.job.json"), str(tmp / f"{name}.out.json")],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp / f"{name}.out.json").read_text())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The int4 exports, our plain decoding, and vLLM's outputs for each (plain first), one engine at a time."""
    import layersearch

    tmp = tmp_path_factory.mktemp("vllm-int4")
    exports = {name: export_vllm(DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), lookahead=LookaheadSpec("static", 3),
                                             **fields), tmp / name) for name, fields in EXPORTS.items()}
    plain = layersearch.load_decoder(DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), plain=True))
    prompts = [plain.encode(text)[0].tolist() for text in PROMPTS]
    ours = [list(plain.generate(ids, max_new_tokens=MAX_TOKENS).token_ids) for ids in prompts]
    del plain
    runs = {"plain": _run_engine({"model": exports["int4-self"].config["model"], "dtype": "float32",
                                  "speculative_config": None, "prompts": prompts, "max_tokens": MAX_TOKENS}, tmp, "plain")}
    for name, export in exports.items():
        runs[name] = _run_engine({"model": export.config["model"], "dtype": "float32",
                                  "speculative_config": export.config["speculative_config"], "prompts": prompts,
                                  "max_tokens": MAX_TOKENS, "wna16_reference": True}, tmp, name)
        if runs[name]["wna16_kernel"] == "reference":
            warnings.warn(f"{name}: this CPU lacks AVX-512, so vLLM's CPU build has no cpu_gemm_wna16; "
                          "served with vllm_worker.py's reference of that one op")
    return {"exports": exports, "ours": ours, "runs": runs}


@needs_vllm
@pytest.mark.embedded
@pytest.mark.parametrize("name", list(EXPORTS))
def test_int4_drafts_serve_vllm_plains_tokens_batched_and_single(served, name):
    assert served["runs"]["plain"]["batched"] == served["ours"]
    run = served["runs"][name]
    assert run["batched"] == served["ours"], f"{name}: batched requests differ from plain decoding"
    assert run["single"] == served["ours"], f"{name}: single requests differ from plain decoding"
    assert run["single"] == served["runs"]["plain"]["single"]
    assert run["draft_tokens"] > 0 and run["accepted"] > 0, f"{name}: vLLM accepted no draft ({run})"


@needs_vllm
@pytest.mark.embedded
def test_the_int4_self_draft_reports_its_4_bit_weights(served):
    export = served["exports"]["int4-self"]
    assert export.draft.plan.int4_group_size == 64  # SmolLM2's 576 takes 64, as our int4 drafter fits it
    # the embedding in fp32 (108 MiB) and the layers and head in 4 bits: about a third of the target
    assert 0.3 < export.draft_bytes / export.target_bytes < 0.4
    assert "draft weights" in export.describe()
