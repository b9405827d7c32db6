"""Greedy decoding and exact match (the test metric of the quality case)."""

from __future__ import annotations

import pytest
import qcs.evaluate as ev
import torch
from qcs.tasks import InstructionPair, make_target_set

from neurips25_core.models import tiny_llama, tiny_llama_config


def _model(seed=0):
    return tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2), seed=seed)


@torch.no_grad()
def _reference_greedy(model, pair, max_new):
    ids = torch.tensor(ev.prompt_bytes(pair))[None]
    out = []
    for _ in range(max_new):
        nxt = int(model(input_ids=ids).logits[0, -1].argmax())
        if nxt == 10:
            break
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    return bytes(out)


def test_batched_padded_generate_equals_an_unpadded_argmax_loop():
    model = _model(3)
    pairs = make_target_set(9, seed=5)  # prompts of different lengths: left padding is exercised
    assert len({len(ev.prompt_bytes(p)) for p in pairs}) > 1
    model.train()
    got = ev.greedy_responses(model, pairs, max_new_bytes=6, batch_size=4)
    assert model.training  # mode restored
    model.eval()
    assert got == [_reference_greedy(model, p, 6) for p in pairs]


def test_a_newline_stops_decoding_and_exact_match_compares_the_bytes(monkeypatch):
    model = _model(1)
    bump = torch.zeros(256)
    bump[10] = 1e4  # the newline byte wins at every position: every response is empty
    model.lm_head.register_forward_hook(lambda _m, _i, out: out + bump)
    assert ev.greedy_responses(model, make_target_set(3)) == [b"", b"", b""]
    pairs = [InstructionPair("add: 1 + 2", "3", "add"), InstructionPair("add: 2 + 2", "4", "add")]
    monkeypatch.setattr(ev, "greedy_responses", lambda *a, **k: [b"3", b"5"])
    assert ev.exact_match(model, pairs).tolist() == [True, False]


def test_bad_input_names_the_argument():
    model, pairs = _model(), make_target_set(2)
    with pytest.raises(TypeError, match="model"):
        ev.exact_match("m", pairs)
    with pytest.raises(TypeError, match="pairs"):
        ev.exact_match(model, [])
    with pytest.raises(TypeError, match="pairs"):
        ev.greedy_responses(model, ["add: 1 + 1"])
    with pytest.raises(ValueError, match="max_new_bytes"):
        ev.exact_match(model, pairs, max_new_bytes=0)
    with pytest.raises(TypeError, match="batch_size"):
        ev.exact_match(model, pairs, batch_size=2.0)
