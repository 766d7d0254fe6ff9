"""``mix:a,b,...`` prompt sets (KNN-SSD's SSD_M searches on them): the parts in turn, same splits."""

from __future__ import annotations

import pytest

from layersearch.data import check_domain, load_prompts
from layersearch.common.errors import LayersearchError


def test_mixed_prompts_take_the_parts_in_turn():
    mixed = load_prompts("mix:code,translation", 5, seed=3, split="train")
    assert [p.domain for p in mixed] == ["code", "translation", "code", "translation", "code"]
    code = load_prompts("code", 3, seed=3, split="train")
    assert [p.text for p in mixed if p.domain == "code"] == [p.text for p in code]


@pytest.mark.parametrize("domain, match", [("mix:code", "two or more"), ("mix:code,code", "distinct"),
                                           ("mix:code,nope", "unknown domain 'nope'"), ("nope", "unknown domain")])
def test_bad_mixed_domains(domain, match):
    with pytest.raises(LayersearchError, match=match):
        check_domain(domain)
    with pytest.raises(LayersearchError, match=match):
        load_prompts(domain, 2)
