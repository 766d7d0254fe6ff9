"""The vLLM export: what each spec maps to, what is refused and why, and the draft folder it writes.

Serving the folders in a real vLLM engine and server: tests/integrations/test_vllm_serving.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from layersearch.common.errors import LayersearchError
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec
from layersearch.integrations.vllm import PLAN_KEY
from layersearch.integrations.vllm_export import export_vllm, vllm_draft, write_draft
from layersearch.masks.mask import SkipMask
from layersearch.models.tiny import build_tiny_model, char_tokenizer

LAYERS = 6


def spec(**fields) -> DecoderSpec:
    fields.setdefault("lookahead", LookaheadSpec("static", 3))
    return DecoderSpec(ModelSpec(ModelRef("smollm2-135m")), **fields)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "llama"
    build_tiny_model("llama", num_layers=LAYERS, seed=3).save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


def local(folder: Path, **fields) -> DecoderSpec:
    fields.setdefault("lookahead", LookaheadSpec("static", 3))
    return DecoderSpec(ModelSpec(ModelRef(str(folder), path=True)), **fields)


def test_prompt_lookup_is_vllm_ngram_with_our_sizes_and_length():
    draft = vllm_draft(spec(drafter=DrafterSpec("prompt-lookup"), lookahead=LookaheadSpec("static", 5)), LAYERS)
    assert (draft.method, draft.num_speculative_tokens, draft.ngram) == ("ngram", 5, (2, 3))
    # prompt lookup reads no confidence: its confidence rule drafts the cap, as vLLM does
    assert vllm_draft(spec(drafter=DrafterSpec("prompt-lookup"), lookahead=LookaheadSpec("confidence", 4)), LAYERS).num_speculative_tokens == 4


def test_the_int8_self_draft_is_every_sub_layer_in_int8():
    draft = vllm_draft(spec(drafter=DrafterSpec(quant="int8")), LAYERS)
    assert draft.method == "draft_model" and draft.plan is not None
    assert draft.plan.int8_attention == tuple(range(LAYERS)) and draft.plan.int8_mlp == tuple(range(LAYERS))
    assert not draft.plan.attention and not draft.plan.mlp


def test_a_spec_naming_only_the_model_drafts_as_its_default_does():
    assert vllm_draft(spec(), LAYERS).method == "ngram"  # the default drafter is prompt lookup


def test_a_ratio_mask_is_resolved_against_the_model():
    draft = vllm_draft(spec(mask_source=MaskSourceSpec("uniform", skip_ratio=0.5)), LAYERS)
    assert draft.plan == SkipMask.uniform(LAYERS, 0.5)


@pytest.mark.parametrize("fields, named", [
    ({"verifier": "tree"}, "verifier"),
    ({"drafter": DrafterSpec("layer-skip"), "lookahead": LookaheadSpec("confidence", 4)}, "lookahead"),
    ({"drafter": DrafterSpec("prompt-lookup"), "lookahead": LookaheadSpec("heuristic", 4)}, "lookahead"),
    ({"drafter": DrafterSpec("hybrid")}, "drafter"),
    ({"mask_source": MaskSourceSpec("knapsack", reselect_every=8)}, "mask_source"),
    ({"mask_source": MaskSourceSpec("none")}, "mask_source"),
    ({"drafter": DrafterSpec(vocab=1000)}, "drafter.vocab"),
    ({"plain": True}, "plain"),
])
def test_what_vllm_cannot_express_is_one_error_naming_it(fields, named):
    with pytest.raises(LayersearchError, match=named):
        vllm_draft(spec(**fields), LAYERS)


def test_the_draft_folder_holds_the_kept_sub_layers_renumbered_int8_as_compressed_tensors(model_dir, tmp_path):
    # layer 1 whole, layer 3's attention and layer 4's MLP skipped; layer 0's MLP and 5's attention int8
    plan = SkipMask(LAYERS, attention=(1, 3), mlp=(1, 4), int8_mlp=(0,), int8_attention=(5,))
    write_draft(model_dir, tmp_path / "draft", plan, "float32")
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert config["num_hidden_layers"] == LAYERS - 1
    assert config["architectures"] == ["LayersearchLlamaDraftForCausalLM"]
    assert config[PLAN_KEY] == {"skip_attention": [2], "skip_mlp": [3]}  # renumbered past the dropped layer
    targets = config["quantization_config"]["config_groups"]["group_0"]["targets"]
    assert len(targets) == 3 + 4  # layer 0's gate/up/down, the last layer's q/k/v/o
    with safe_open(str(tmp_path / "draft" / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        original = build_tiny_model("llama", num_layers=LAYERS, seed=3).state_dict()
        assert not any(name.startswith("model.layers.2.self_attn") for name in names)
        assert not any(name.startswith("model.layers.3.mlp") for name in names)
        assert "model.layers.4.self_attn.o_proj.weight_scale" in names
        q = handle.get_tensor("model.layers.0.mlp.down_proj.weight")
        scale = handle.get_tensor("model.layers.0.mlp.down_proj.weight_scale")
        assert q.dtype == torch.int8
        # the int8 copy dequantizes to the weight within half a step of its channel's scale
        assert torch.all((q.float() * scale - original["model.layers.0.mlp.down_proj.weight"]).abs() <= scale / 2 + 1e-7)
        # full-precision parts are the model's weights, moved to their new layer number
        assert torch.equal(handle.get_tensor("model.layers.1.mlp.up_proj.weight"), original["model.layers.2.mlp.up_proj.weight"])


def test_whole_layer_plans_keep_the_models_own_architecture(model_dir, tmp_path):
    write_draft(model_dir, tmp_path / "draft", SkipMask(LAYERS, attention=(2, 5), mlp=(2, 5)), "float32")
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and PLAN_KEY not in config
    assert config["num_hidden_layers"] == LAYERS - 2 and "quantization_config" not in config


def test_export_writes_the_folder_whole_and_never_into_a_used_one(model_dir, tmp_path):
    out = tmp_path / "served"
    export = export_vllm(local(model_dir, drafter=DrafterSpec(quant="int8")), out)
    served = json.loads((out / "vllm.json").read_text())
    assert served["speculative_config"] == {"method": "draft_model", "num_speculative_tokens": 3, "model": str(out / "draft")}
    assert served["model"] == str(out / "model") and (out / "model" / "config.json").is_file()
    assert "--speculative-config" in (out / "README.md").read_text()
    # int8 (1 byte) beside fp32 (4): the layers' weights at a quarter, the embedding and norms as they are
    assert 0 < export.draft_bytes < export.target_bytes
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(LayersearchError, match="not empty"):
        export_vllm(local(model_dir, drafter=DrafterSpec(quant="int8")), out)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["served"]  # no staging folder left behind


def test_a_refused_spec_writes_nothing(model_dir, tmp_path):
    with pytest.raises(LayersearchError, match="lookahead"):
        export_vllm(local(model_dir, drafter=DrafterSpec("layer-skip"), lookahead=LookaheadSpec("adaptive", 3)), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_hub_id_is_refused_naming_what_the_export_needs(tmp_path):
    with pytest.raises(LayersearchError, match="model's files here"):
        export_vllm(DecoderSpec(ModelSpec(ModelRef("someone/some-model")), lookahead=LookaheadSpec("static", 3)), tmp_path / "o")
