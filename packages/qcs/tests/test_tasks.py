"""Synthetic instruction pool: families, planted noise with ground truth, byte encoding."""

from __future__ import annotations

import pytest
from qcs.tasks import FAMILIES, encode_pairs, make_instruction_pool, make_target_set


def test_pool_families_noise_and_determinism():
    pool = make_instruction_pool(300, seed=0)
    assert pool == make_instruction_pool(300, seed=0)
    assert {p.family for p in pool} == set(FAMILIES)
    assert sum(p.wrong for p in pool) == 60
    assert sum(p.filler_span is not None for p in pool) == 90
    assert not any(p.wrong and p.filler_span for p in pool)
    for p in pool:
        if p.family == "add" and not p.wrong and p.filler_span is None:
            a, b = p.instruction.removeprefix("add: ").split(" + ")
            assert int(p.response) == int(a) + int(b)
        if p.family == "sort" and p.wrong:
            digits = p.instruction.removeprefix("sort digits: ").split()
            assert p.response != " ".join(sorted(digits))
        if p.filler_span is not None:
            a, b = p.filler_span
            run = p.response[a:b]
            assert 4 <= len(run) <= 10 and len(set(run)) == 1 and run[0] in "~#^"
        if p.family == "funcname" and not p.wrong and p.filler_span is None:
            assert f"def {p.response}(" in p.instruction


def test_def_lines_come_from_the_stdlib():
    from qcs.tasks import _def_names

    defs = _def_names()
    assert len(defs) >= 100
    assert all(line.startswith("def ") and f"def {name}(" in line for line, name in defs)


def test_target_set_is_clean():
    tgt = make_target_set(40)
    assert {p.family for p in tgt} == {"add", "sort"}
    assert not any(p.wrong or p.filler_span for p in tgt)


def test_encoding_layout():
    pool = make_instruction_pool(30, seed=2)
    enc = encode_pairs(pool)
    ids, labels = enc["input_ids"], enc["labels"]
    for i, p in enumerate(pool):
        resp = labels[i][labels[i] != -100]
        assert bytes(resp.tolist()) == (p.response + "\n").encode()
        assert int(enc["token_lengths"][i]) == len(p.response) + 1
        s = int(enc["response_start"][i])
        assert int(labels[i, s]) == (p.response + "\n").encode()[0]
        assert bool((labels[i, :s] == -100).all())
        # next-byte alignment: labels[j] == input_ids[j + 1] inside the sequence
        n = s + int(enc["token_lengths"][i])
        assert labels[i, : n - 1].tolist()[s:] == ids[i, 1:n].tolist()[s:]
        if p.filler_span is not None:
            f = enc["filler"][i]
            assert int(f.sum()) == p.filler_span[1] - p.filler_span[0]
            assert set(bytes(labels[i][f].tolist()).decode()) <= set("~#^")
    assert int(enc["filler"].sum()) == sum(
        b - a for a, b in (p.filler_span for p in pool if p.filler_span)
    )


def test_bad_input():
    with pytest.raises(ValueError, match="wrong_frac"):
        make_instruction_pool(10, wrong_frac=1.5)
    with pytest.raises(ValueError, match="families"):
        make_instruction_pool(10, families=("poetry",))
    with pytest.raises(ValueError, match="max_len"):
        encode_pairs(make_instruction_pool(5), max_len=4)
    with pytest.raises(ValueError, match="pairs"):
        encode_pairs([])
