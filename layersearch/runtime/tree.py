"""SWIFT's dynamic verification: a draft chain widened into a token tree, verified in one forward.

Each drafted position j also proposes the draft's other top-k candidates, with k chosen by the
draft's confidence p_j (SWIFT §4.2: k = 10 / 5 / 3 / 1 for p in (0, .5] / (.5, .8] / (.8, .95] /
(.95, 1]). Only the chain continues; the other candidates are leaves. The tree is laid out as
one sequence, the chain first::

    node    0     1    2   ...  n    n+1 ...          (siblings, level by level)
    token   last  d1   d2  ...  dn   s(1,1) s(1,2) ... s(2,1) ...
    depth   0     1    2   ...  n    1      1          2
    parent  -     0    1   ...  n-1  0      0          1

Node i sits at position ``pos + depth(i)`` and attends to the cache and to its ancestors and
itself (a 4-D attention mask). Greedy acceptance walks the chain; at the first position where
the target's token is not the chain's, a sibling equal to it is accepted too, and the target's
token after that sibling comes from the sibling's own logits. Because the chain comes first, the
accepted chain's KV entries are already in place; only an accepted sibling's entry (one per
layer) is moved next to them. Nothing else of the cache is copied.

Sampling: the tree verifier verifies the chain alone with speculative sampling (the siblings are
not drafted when sampling), which keeps the output distribution exact; a multi-candidate
rejection rule is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from layersearch.common.errors import LayersearchError
from layersearch.runtime.step import DraftPosition, Proposal, StepRequest, Verdict, Verifier
from layersearch.runtime.verification import ChainVerifier

# SWIFT's (upper confidence bound, k) pairs.
SWIFT_TOP_K = ((0.5, 10), (0.8, 5), (0.95, 3), (1.0, 1))


@dataclass(frozen=True)
class TopKBranching:
    """Alternative candidates per draft position, k chosen by the draft's top-1 probability."""

    levels: tuple[tuple[float, int], ...] = SWIFT_TOP_K

    def width(self, confidence: float) -> int:
        """k for a position whose top-1 probability is ``confidence``."""
        for bound, k in self.levels:
            if confidence <= bound:
                return k
        return self.levels[-1][1]

    def __call__(self, position: DraftPosition, chosen: int) -> tuple[int, ...]:
        """The top-k tokens of the position other than ``chosen``."""
        k = self.width(position.confidence)
        if k <= 1:
            return ()
        top = torch.topk(position.logits, k).indices.tolist()
        return tuple(t for t in top if t != chosen)[: k - 1]


@dataclass(frozen=True)
class TreeLayout:
    """A flattened token tree: tokens, depths and parents of its nodes (node 0 = last token)."""

    tokens: tuple[int, ...]
    depths: tuple[int, ...]
    parents: tuple[int, ...]  # parent node of each node; -1 for the root
    chain_length: int

    @classmethod
    def build(cls, last: int, chain: tuple[int, ...], branches: tuple[tuple[int, ...], ...]) -> "TreeLayout":
        """Root, chain, then each level's siblings (children of the chain node one level up)."""
        tokens, depths, parents = [last, *chain], list(range(len(chain) + 1)), [-1, *range(len(chain))]
        for level, alternatives in enumerate(branches[: len(chain)], start=1):
            for token in alternatives:
                tokens.append(token)
                depths.append(level)
                parents.append(level - 1)
        return cls(tuple(tokens), tuple(depths), tuple(parents), len(chain))

    def siblings_at(self, level: int) -> dict[int, int]:
        """{token: node} of the non-chain nodes at depth ``level``."""
        return {self.tokens[i]: i for i in range(self.chain_length + 1, len(self.tokens)) if self.depths[i] == level}

    def attention_mask(self, cached: int, dtype: torch.dtype, device) -> torch.Tensor:
        """Additive mask [1, 1, nodes, cached + nodes]: 0 where a node may attend, the dtype's min elsewhere."""
        n = len(self.tokens)
        allowed = torch.zeros(n, cached + n, dtype=torch.bool)
        allowed[:, :cached] = True
        for node in range(n):
            ancestor = node
            while ancestor >= 0:
                allowed[node, cached + ancestor] = True
                ancestor = self.parents[ancestor]
        mask = torch.zeros(n, cached + n, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        return mask.view(1, 1, n, cached + n).to(device)


def verify_tree_greedy(layout: TreeLayout, target_tokens: list[int]) -> tuple[tuple[int, ...], int, int | None]:
    """Greedy acceptance on a tree: (accepted tokens, next token, node of an accepted sibling or None).

    ``target_tokens[i]`` is the target's argmax after node i."""
    accepted = 0
    while accepted < layout.chain_length:
        predicted = target_tokens[accepted]
        if predicted == layout.tokens[accepted + 1]:
            accepted += 1
            continue
        sibling = layout.siblings_at(accepted + 1).get(predicted)
        chain = layout.tokens[1 : accepted + 1]
        if sibling is None:
            return chain, predicted, None
        return (*chain, predicted), target_tokens[sibling], sibling
    return layout.tokens[1 : layout.chain_length + 1], target_tokens[layout.chain_length], None


def move_cache_entry(cache, source: int, destination: int) -> None:
    """Copy position ``source``'s key and value to ``destination`` in every layer (one entry each)."""
    for layer in cache.layers:
        layer.keys[:, :, destination] = layer.keys[:, :, source]
        layer.values[:, :, destination] = layer.values[:, :, source]


def refuse_sliding_window(model: torch.nn.Module) -> None:
    """Tree masks are built for full causal attention; refuse models with sliding-window layers."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ()
    sliding = any("sliding" in str(t) for t in layer_types)
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        sliding = True
    if sliding:
        raise LayersearchError("tree verification supports models with full attention only (this one uses sliding windows); use chain verification")


class TreeVerifier(Verifier):
    """Verifies a proposal's token tree in one forward (greedy); the chain when sampling."""

    name = "tree"

    def __init__(self) -> None:
        self._chain = ChainVerifier()

    def check_target(self, model: torch.nn.Module) -> None:
        """Refuse a model whose attention the tree mask would get wrong."""
        refuse_sliding_window(model)

    def verify(self, request: StepRequest, proposal: Proposal) -> Verdict:
        """Tree verification when the proposal has branches and decoding is greedy, else chain."""
        if not request.sampling.greedy or not proposal.branches or not any(proposal.branches):
            return self._chain.verify(request, proposal)
        layout = TreeLayout.build(request.last_token, proposal.tokens, proposal.branches)
        positions = torch.tensor([request.position + d for d in layout.depths])  # [nodes]
        cache: Any = request.cache  # a transformers Cache
        dtype = next(iter(cache.layers)).keys.dtype if cache.layers else torch.float32
        mask = layout.attention_mask(request.position, dtype, positions.device)
        logits = request.forward(list(layout.tokens), request.position, positions=positions, attention_mask=mask)
        path, next_token, sibling = verify_tree_greedy(layout, logits.argmax(-1).tolist())
        if sibling is not None:  # its entry goes right after the accepted chain
            move_cache_entry(cache, request.position + sibling, request.position + len(path))
        return Verdict(len(path), next_token, path if sibling is not None else None, sibling)
