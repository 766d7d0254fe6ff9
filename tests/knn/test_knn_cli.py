"""``layersearch knn build``, ``generate --mask router:FILE`` and ``knn bench`` end to end on a saved tiny model
(real prompt domains, real files); bad input is one error line."""

from __future__ import annotations

import json

import pytest

from layersearch.cli import main
from layersearch.knn.router import Router
from layersearch.masks.mask import SkipMask
from layersearch.models.loading import load_model

DOMAINS = ("code", "translation")


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny model folder with the embedded tokenizer, two domain masks and a router built from them."""
    from transformers import AutoTokenizer

    from layersearch.models.loading import embedded_model_dir
    from layersearch.models.tiny import build_tiny_model

    work = tmp_path_factory.mktemp("knn")
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    model = build_tiny_model("llama", num_layers=4, vocab_size=len(tokenizer), seed=0)
    model.config.max_position_embeddings = 4096
    folder = work / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    info = load_model(str(folder)).info
    masks = {"code": SkipMask(4, (1,), (2,), info), "translation": SkipMask(4, (2,), (), info)}
    for domain, mask in masks.items():
        mask.save(work / f"{domain}.json")
    router = work / "router.json"
    argv = ["knn", "build", "--model", folder, "--samples", 4, "--anchors", 2, "--out", router, "--pca", work / "pca.png"]
    for domain in DOMAINS:
        argv += ["--domain", f"{domain}={work / (domain + '.json')}"]
    assert main([str(a) for a in argv]) == 0
    return work, folder, router, masks


def test_build_writes_a_router_with_anchors_per_domain_and_a_pca_picture(built):
    work, folder, router_path, masks = built
    router = Router.load(router_path, load_model(str(folder)).info)
    assert router.domain_names == DOMAINS
    assert [d.mask for d in router.domains] == [masks[d] for d in DOMAINS]
    assert router.anchors.shape[0] == 4 and sorted(router.anchor_domains.tolist()) == [0, 0, 1, 1]
    assert router.threshold is not None and router.build["samples"] == {"code": 4, "translation": 4}
    assert (work / "pca.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generate_with_router_equals_plain_and_reports_the_route(built, capsys):
    work, folder, router_path, _ = built
    prompt = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n"
    common = ["generate", "--model", folder, "--prompt", prompt, "--max-new-tokens", 12, "--json", "--draft-threshold", 0]
    code, plain, err = run_cli(capsys, *common, "--baseline")
    assert code == 0, err
    code, routed, err = run_cli(capsys, *common, "--mask", f"router:{router_path}")
    assert code == 0, err
    result = json.loads(routed)
    assert result["token_ids"] == json.loads(plain)["token_ids"]
    (selection,) = result["stats"]["selections"]
    assert selection["router"] == "knn" and selection["step"] == 0
    assert selection["domain"] in (None, *DOMAINS) and selection["distance"] >= 0


def test_bench_writes_the_table_and_the_plot(built, capsys, tmp_path):
    work, folder, router_path, _ = built
    out, plot = tmp_path / "bench.json", tmp_path / "mix.png"
    code, stdout, err = run_cli(
        capsys, "knn", "bench", "--model", folder, "--router", router_path, "--mix-ratios", "0,1", "--instances", 3,
        "--test-prompts", 1, "--max-new-tokens", 4, "--mixed-mask", work / "code.json", "--out", out, "--plot", plot,
        "--routing-prompts", 2, "--pca", tmp_path / "held.png", "--ood-domains", "math",
    )
    assert code == 0, err
    report = json.loads(out.read_text())
    methods = [(r["ratio"], r["method"]) for r in report["rows"]]
    assert methods == [(r, m) for r in (0.0, 1.0) for m in ("plain", "SSD_F", "SSD_M", "KNN-SSD", "oracle")]
    assert report["switch_rates"] == {"0.0": 0.0, "1.0": 1.0}
    assert set(report["routing_accuracy"]) == set(DOMAINS)
    for row in report["rows"]:
        assert row["tokens_per_second"] > 0 and row["M"] >= 1
        assert (row["routing_accuracy"] is not None) == (row["method"] == "KNN-SSD")
    plain = [r for r in report["rows"] if r["method"] == "plain"]
    assert all(r["speedup"] == pytest.approx(1.0) for r in plain)
    assert "routing accuracy on held-out prompts" in stdout
    assert plot.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "held.png").read_bytes()[:4] == b"\x89PNG"
    held = report["held_out_routing"]
    assert {d: sum(row.values()) for d, row in held["confusion"].items()} == {d: 2 for d in (*DOMAINS, "math")}
    assert held["per_domain"]["math"] == held["confusion"]["math"].get("OOD", 0) / 2  # right when it falls back
    assert 0 <= held["overall"] <= 1


def test_router_for_another_model_is_one_line(built, capsys, tmp_path):
    work, folder, router_path, _ = built
    data = json.loads(router_path.read_text())
    data["model"]["fingerprint"] = "0000"
    for domain in data["domains"]:
        domain["mask"]["model"]["fingerprint"] = "0000"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "generate", "--model", folder, "--prompt", "x", "--mask", f"router:{other}")
    assert code == 2 and err.count("\n") == 1 and "router was built for model" in err


def test_domain_mask_from_a_study_on_mixed_prompts(built, tmp_path, capsys):
    """``NAME=study:STUDY@STORAGE`` takes the study's best trial; a study may search ``mix:a,b`` prompts."""
    work, folder, _, masks = built
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    code, _, err = run_cli(capsys, "study", "create", "--name", "mixed", "--model", folder, "--domain", "mix:code,translation",
                           "--strategy", "random", "--objective", "matchness", "--samples", 2, "--max-new-tokens", 2,
                           "--storage", storage, "--threads", 1)
    assert code == 0, err
    code, _, err = run_cli(capsys, "study", "run", "--name", "mixed", "--storage", storage, "--trials", 2, "--quiet")
    assert code == 0, err
    out = tmp_path / "router.json"
    code, _, err = run_cli(capsys, "knn", "build", "--model", folder, "--samples", 2, "--anchors", 1, "--out", out,
                           "--domain", f"code=study:mixed@{storage}", "--domain", f"translation={work / 'translation.json'}")
    assert code == 0, err
    from layersearch.study.export import study_mask

    router = Router.load(out)
    expected = study_mask("mixed", storage=storage)
    assert router.mask_of("code") == expected and router.mask_of("translation") == masks["translation"]
    provenance = router.mask_of("code").provenance
    assert provenance["study"] == "mixed" and provenance["domain"] == "mix:code,translation"
    assert provenance["source"] == f"study:mixed@{storage}"
