"""The SFT and DPO loops: masking, ln 2 at the start, the reference, argument checks."""

import copy
import math

import pytest
import torch
from seal.models import WordTokenizer, tiny_lm
from seal.train import dpo, encode_pairs, encode_sft, sft

EXAMPLES = [
    ("<priv> text: I live in Zurich. <leaks>", "city=Zurich:5"),
    ("<priv> text: I work as a nurse. <leaks>", "occupation=nurse:4"),
    ("<util> original: I live in Zurich. text: I live in a city. <utility>", "readability=10"),
    ("<anon> text: I live in Zurich. <rewrite>", "I live in a city."),
]
PAIRS = [
    ("<anon> text: I live in Zurich. <rewrite>", "I live in a city.", "I live in Paris."),
    ("<anon> text: I work as a nurse. <rewrite>", "I work in healthcare.", "I work as a nurse."),
    ("<anon> text: I am 34. <rewrite>", "I am an adult.", "I am 35 years old, a nurse."),
]


def _setup():
    tok = WordTokenizer.from_corpus([t for row in EXAMPLES + PAIRS for t in row])
    return tok, tiny_lm(tok, layers=1, width=16, heads=2, max_positions=64, seed=0).double()


def test_sft_first_loss_is_the_completion_token_mean_and_training_lowers_it():
    tok, model = _setup()
    init = copy.deepcopy(model)
    result = sft(model, tok, EXAMPLES, max_steps=30, batch_size=4, lr=1e-2, seed=0)
    # the first step's batch is a permutation of all 4 examples: its loss is the mean over every
    # completion token (and <eos>), prompt and padding excluded
    nll, count = 0.0, 0
    for ids, p in encode_sft(tok, EXAMPLES):
        with torch.no_grad():
            logp = init(torch.tensor([ids])).logits[0].log_softmax(-1)
        nll -= sum(logp[t - 1, ids[t]].item() for t in range(p, len(ids)))
        count += len(ids) - p
    assert math.isclose(result.losses[0], nll / count, rel_tol=1e-9)
    assert result.losses[-1] < 0.5 * result.losses[0]
    assert not model.training  # left in eval mode, like neurips25_core.models.train


def test_dpo_starts_at_ln2_moves_only_the_policy_and_raises_the_margin():
    tok, model = _setup()
    reference = copy.deepcopy(model)
    before = [p.detach().clone() for p in reference.parameters()]
    result = dpo(model, reference, tok, PAIRS, max_steps=15, batch_size=3, lr=1e-2, beta=0.5)
    assert math.isclose(result.losses[0], math.log(2), rel_tol=1e-12)
    assert result.losses[-1] < result.losses[0]
    assert all(torch.equal(a, b) for a, b in zip(before, reference.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # reference=None takes a frozen copy of the policy: ln 2 again at step 0
    _, fresh = _setup()
    assert math.isclose(
        dpo(fresh, None, tok, PAIRS, max_steps=1, batch_size=3).losses[0], math.log(2)
    )


def test_reference_sharing_parameters_is_refused():
    tok, model = _setup()
    with pytest.raises(ValueError, match="reference"):
        dpo(model, model, tok, PAIRS, max_steps=1)
    shallow = copy.copy(model)  # same parameter tensors
    with pytest.raises(ValueError, match="reference: shares parameters"):
        dpo(model, shallow, tok, PAIRS, max_steps=1)
    partial = copy.deepcopy(model)
    partial.lm_head.weight = model.lm_head.weight  # one shared tensor is enough
    with pytest.raises(ValueError, match="lm_head"):
        dpo(model, partial, tok, PAIRS, max_steps=1)


def test_loop_bad_input_names_the_argument():
    tok, model = _setup()
    ref = copy.deepcopy(model)
    for steps in (0, -3):
        with pytest.raises(ValueError, match="max_steps"):
            sft(model, tok, EXAMPLES, max_steps=steps)
        with pytest.raises(ValueError, match="max_steps"):
            dpo(model, ref, tok, PAIRS, max_steps=steps)
    with pytest.raises(TypeError, match="max_steps"):
        sft(model, tok, EXAMPLES, max_steps=2.0)
    for beta in (0.0, -0.1):
        with pytest.raises(ValueError, match="beta"):
            dpo(model, ref, tok, PAIRS, max_steps=1, beta=beta)
    with pytest.raises(ValueError, match="examples"):
        sft(model, tok, [], max_steps=1)
    with pytest.raises(ValueError, match="examples: item 0 has an empty completion"):
        sft(model, tok, [("a prompt", " ")], max_steps=1)
    with pytest.raises(TypeError, match="pairs"):
        dpo(model, ref, tok, [("only", "two")], max_steps=1)
    with pytest.raises(ValueError, match="batch_size"):
        sft(model, tok, EXAMPLES, max_steps=1, batch_size=0)
    with pytest.raises(ValueError, match="max_length"):
        encode_sft(tok, EXAMPLES, max_length=5)
    with pytest.raises(ValueError, match="max_length"):
        encode_pairs(tok, PAIRS, max_length=5)
    small = tiny_lm(8, layers=1, width=16, heads=2)
    with pytest.raises(ValueError, match="tokenizer"):
        sft(small, tok, EXAMPLES, max_steps=1)
    with pytest.raises(TypeError, match="reference"):
        dpo(model, "ref", tok, PAIRS, max_steps=1)
    # nothing was trained by the refused calls
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
