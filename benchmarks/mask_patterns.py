"""Sparsity patterns of searched masks beside the papers' published ones.

Prints, for the mask files given: the Jaccard index of their skipped sub-layer sets, pair by
pair; where in depth each skips (share of its skipped sub-layers in the first, middle and last
third of the layers); and the same for the published masks in ``../shared/data/published-masks``
(KNN-SSD's per-task masks: their mean cross-task Jaccard against random sets of the same sizes,
the figure the KNN-SSD comparison quotes; SWIFT's and Self-SD's depth profile).

Run: ``python benchmarks/mask_patterns.py masks/*.json``
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import sys
from pathlib import Path

from layersearch.masks.mask import SkipMask

from tool_args import ToolParser, run_tool  # benchmarks/ is on sys.path when a script runs

PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "data" / "published-masks"


def skipped(attention, mlp) -> set[tuple[str, int]]:
    """The skipped sub-layers as a set of (kind, layer)."""
    return {("A", i) for i in attention} | {("M", i) for i in mlp}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def thirds(sets: set[tuple[str, int]], num_layers: int) -> tuple[float, float, float]:
    """Share of the skipped sub-layers in each third of the depth."""
    counts = [0, 0, 0]
    for _, layer in sets:
        counts[min(2, 3 * layer // num_layers)] += 1
    total = sum(counts) or 1
    return tuple(c / total for c in counts)


def random_like(sets: list[set], num_layers: int, rng: random.Random) -> list[set]:
    """Random skipped sets of the same attention/MLP sizes."""
    out = []
    for s in sets:
        a = sum(1 for kind, _ in s if kind == "A")
        m = len(s) - a
        out.append(skipped(rng.sample(range(num_layers), a), rng.sample(range(num_layers), m)))
    return out


def mean_pairwise(sets: list[set]) -> float:
    return statistics.mean(jaccard(a, b) for a, b in itertools.combinations(sets, 2))


def main(argv: list[str] | None = None) -> int:
    """Print the patterns of the masks named in ``argv`` and of the published masks found; the exit status."""
    parser = ToolParser(__file__, description=__doc__.split("\n\n")[0])
    parser.add_argument("masks", nargs="+", help="mask JSON files")
    parser.add_argument("--published", type=Path, default=PUBLISHED,
                        help="folder of the papers' mask files (default ../shared/data/published-masks)")
    args = parser.parse_args(argv)
    return run_tool(parser, lambda: patterns(args.masks, args.published))


def patterns(paths: list[str], published: Path) -> None:
    """The report of ``main``: a missing or invalid mask file is refused before anything is printed."""
    ours = {Path(p).stem: SkipMask.load(p) for p in paths}
    print("ours: skipped sub-layers, depth thirds (first/middle/last)")
    for name, mask in ours.items():
        s = skipped(mask.attention, mask.mlp)
        print(f"  {name:28} {len(s):3d} of {2 * mask.num_layers}  " + " / ".join(f"{x:.2f}" for x in thirds(s, mask.num_layers)))
    print("ours: Jaccard pair by pair")
    for (a, ma), (b, mb) in itertools.combinations(ours.items(), 2):
        print(f"  {a} ~ {b}: {jaccard(skipped(ma.attention, ma.mlp), skipped(mb.attention, mb.mlp)):.2f}")
    rng = random.Random(0)
    for path in sorted(published.glob("*.json")):
        data = json.loads(path.read_text())
        groups: dict[str, list[set]] = {}
        for key, value in data.items():
            if not isinstance(value, dict) or "attention" not in value:
                continue
            # KNN-SSD: one model per file, a mask per task; SWIFT / Self-SD: keys name the model
            model = path.stem[len("knnssd_"):-len("_skip")] if path.name.startswith("knnssd") else key.split("_", 1)[0]
            groups.setdefault(model, []).append(skipped(value["attention"], value.get("mlp", [])))
        for model, sets in groups.items():
            layers = 1 + max(i for s in sets for _, i in s)
            layers = next(n for n in (24, 28, 32, 40, 48, 60, 64, 80) if n >= layers)
            depth = [statistics.mean(t[k] for t in (thirds(s, layers) for s in sets)) for k in range(3)]
            line = f"{path.stem:40} {model:28} {len(sets):2d} masks, ~{layers} layers, depth " + " / ".join(f"{x:.2f}" for x in depth)
            if len(sets) > 1:
                rand = statistics.mean(mean_pairwise(random_like(sets, layers, rng)) for _ in range(200))
                line += f", mean cross-task Jaccard {mean_pairwise(sets):.2f} (random sets {rand:.2f})"
            print(line)


if __name__ == "__main__":
    sys.exit(main())
