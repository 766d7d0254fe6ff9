"""The decoder specs behind the session-7 ``bench --specs`` rows, written without loading a model.

Each file is what ``layersearch generate ... --save-spec FILE`` would write for the same options
(the spec is not bound to the model yet: ``bench`` checks that it names its ``--model``):

* the draft model in int8 with static drafts of 3, a confidence rule (threshold 0.4) capped at 7
  and at 20, transformers' assisted rule (``roc``: the 0.4 threshold learned along an ROC curve)
  capped at 20 (its default) and at 7, the reduced 32,768-token head, and SD² steering;
* each searched mask with a lower confidence threshold (0.5), HF's heuristic schedule, and DISCO
  trained on that mask (``layersearch disco train --mask MASK``).

Run: ``python benchmarks/bench_specs.py --model Q15.gguf --draft-model Q05.gguf --steering steer.safetensors
--mask swift=swift.json --disco swift=disco_swift.json --out specs/``
"""

from __future__ import annotations

import argparse
from pathlib import Path

from layersearch.masks.mask import SkipMask
from layersearch.decoder.spec import DecoderSpec, DrafterSpec, LookaheadSpec, MaskSourceSpec, ModelRef, ModelSpec


def draft_model_specs(draft: ModelRef, steering: str | None) -> dict[str, dict]:
    """The draft-model rows: int8 weights under four rules, the reduced head, and steering."""
    int8 = DrafterSpec(model=draft, quant="int8")
    static3 = LookaheadSpec("static", max_draft=3)
    specs = {
        "q05-int8-static3": dict(drafter=int8, lookahead=static3),
        "q05-int8-conf0.4-max7": dict(drafter=int8, lookahead=LookaheadSpec("confidence", max_draft=7, threshold=0.4)),
        "q05-int8-conf0.4-max20": dict(drafter=int8, lookahead=LookaheadSpec("confidence", max_draft=20, threshold=0.4)),
        "q05-int8-static3-vocab32k": dict(drafter=DrafterSpec(model=draft, quant="int8", vocab=32768), lookahead=static3),
        # transformers' own assisted rule in our loop: threshold 0.4 learned along an ROC curve
        "q05-int8-roc-max20": dict(drafter=int8, lookahead=LookaheadSpec("roc", max_draft=20, threshold=0.4)),
        "q05-int8-roc-max7": dict(drafter=int8, lookahead=LookaheadSpec("roc", max_draft=7, threshold=0.4)),
    }
    if steering:
        specs["q05-int8-static3-sd2"] = dict(drafter=int8, lookahead=static3, steering=steering)
    return specs


def mask_specs(name: str, path: str, disco: str | None) -> dict[str, dict]:
    """One mask's rows: a lower confidence threshold, the heuristic schedule, and DISCO."""
    source = MaskSourceSpec("mask", mask=SkipMask.load(path), file=path)
    specs = {
        f"{name}-conf0.5": dict(mask_source=source, lookahead=LookaheadSpec("confidence", threshold=0.5)),
        f"{name}-heuristic": dict(mask_source=source, lookahead=LookaheadSpec("heuristic")),
    }
    if disco:
        specs[f"{name}-disco"] = dict(mask_source=source, lookahead=LookaheadSpec("disco", file=disco))
    return specs


def _pairs(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def main() -> None:
    """Write the spec files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the verifier (.gguf file or folder)")
    parser.add_argument("--draft-model", required=True)
    parser.add_argument("--steering", help="SD² steering file trained for the draft model")
    parser.add_argument("--mask", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--disco", action="append", default=[], metavar="NAME=FILE", help="DISCO file for mask NAME")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", required=True, help="folder for the spec files")
    args = parser.parse_args()
    model = ModelSpec(ModelRef(str(Path(args.model).resolve()), True))
    specs = draft_model_specs(ModelRef(str(Path(args.draft_model).resolve()), True), args.steering)
    discos = _pairs(args.disco)
    for name, path in _pairs(args.mask).items():
        specs.update(mask_specs(name, path, discos.get(name)))
    for name, fields in specs.items():
        DecoderSpec(model, max_new_tokens=args.new_tokens, **fields).save(Path(args.out) / f"{name}.json")
        print(Path(args.out) / f"{name}.json")


if __name__ == "__main__":
    main()
