"""Mixed-domain prompt sets, ``mix:math,code,translation``: the domains' prompts in turn.

KNN-SSD's SSD_M baseline searches one mask on the mixed distribution; a study whose domain is
``mix:a,b,c`` searches on ``n`` prompts taken round-robin from the parts (the first
``ceil(n / parts)`` of each, same seed and split), so every part is represented.
"""

from __future__ import annotations

from typing import Callable

from layersearch.common.errors import LayersearchError

PREFIX = "mix:"


def parts(domain: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """The domains of ``mix:a,b,...``: at least two, distinct, each one of ``known``."""
    names = tuple(part.strip() for part in domain[len(PREFIX):].split(",") if part.strip())
    if len(names) < 2 or len(set(names)) != len(names):
        raise LayersearchError(f"{domain!r}: a mixed domain names two or more distinct domains, e.g. mix:math,code")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LayersearchError(f"{domain!r}: unknown domain {unknown[0]!r}: choose from {', '.join(known)}")
    return names


def prompts(names: tuple[str, ...], n: int, load: Callable[[str, int], tuple]) -> tuple:
    """``n`` prompts round-robin over ``names``; ``load(domain, count)`` gives one domain's prompts."""
    per = -(-n // len(names))
    sets = [load(name, per) for name in names]
    mixed = [s[i] for i in range(per) for s in sets if i < len(s)]
    return tuple(mixed[:n])
