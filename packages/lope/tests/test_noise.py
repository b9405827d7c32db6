"""HyNoise: text corruption and embedding noise."""

import math

import pytest
import torch
from lope import HyNoise
from transformers import LlamaConfig, LlamaForCausalLM

TEXT = (
    "### Instruction: reverse the words of the phrase below and answer in lower case "
    "### Response: case lower in answer and below phrase the of words the reverse "
) * 30


def test_rate_zero_is_the_identity():
    for unit in ("char", "example"):
        assert HyNoise(rate=0.0, unit=unit).corrupt(TEXT) == TEXT


def test_same_seed_same_output_other_seed_other_output():
    a = [HyNoise(rate=0.05, seed=3).corrupt(TEXT) for _ in range(2)]
    assert a[0] == a[1]
    assert HyNoise(rate=0.05, seed=4).corrupt(TEXT) != a[0]


@pytest.mark.parametrize("rate", [0.05, 0.3])
def test_event_count_is_binomial(rate):
    noise = HyNoise(rate=rate, seed=11)
    n, p = len(TEXT), rate
    _, events = noise.corrupt_with_count(TEXT)
    assert abs(events - n * p) <= 4 * math.sqrt(n * p * (1 - p))
    examples = HyNoise(rate=rate, unit="example", seed=12)
    hits = sum(examples.corrupt_with_count("a b c d")[1] for _ in range(2000))
    assert abs(hits - 2000 * p) <= 4 * math.sqrt(2000 * p * (1 - p))


def test_operations_do_what_they_say():
    text = "alpha beta gamma delta"
    deleted, _ = HyNoise(rate=1.0, ops=("delete",)).corrupt_with_count(text)
    assert deleted == ""
    inserted, _ = HyNoise(rate=1.0, ops=("insert",)).corrupt_with_count(text)
    assert len(inserted) == 2 * len(text) and inserted[1::2] == text
    shuffled = HyNoise(rate=0.5, ops=("shuffle",), seed=1).corrupt(text)
    assert sorted(shuffled.split()) == sorted(text.split()) and len(shuffled) == len(text)


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=24,
    )
    return LlamaForCausalLM(config)


def _embeddings_seen(model, noise, ids, mask):
    """The embedding output the decoder receives (a hook registered after HyNoise's sees it)."""
    seen = []
    with noise.embedding_noise(model):
        handle = model.get_input_embeddings().register_forward_hook(lambda m, a, o: seen.append(o))
        model(input_ids=ids, attention_mask=mask)
        handle.remove()
    return seen[0]


def test_embedding_noise_is_bounded_masked_and_off_in_eval():
    model = _model()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    clean = model.get_input_embeddings()(ids).detach()
    noise = HyNoise(embed_alpha=0.05)
    delta = _embeddings_seen(model.train(), noise, ids, mask).detach() - clean
    assert delta.abs().max() <= 0.05 + 1e-7
    assert delta.abs().max() > 0.01
    assert torch.all(delta[1, 2:] == 0) and torch.all(delta[:, :2] != 0)
    assert torch.equal(_embeddings_seen(model.eval(), noise, ids, mask), clean)
    assert not model.get_input_embeddings()._forward_hooks and not model._forward_pre_hooks


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"rate": -0.1}, ValueError, "rate"),
        ({"rate": 1.5}, ValueError, "rate"),
        ({"embed_alpha": float("nan")}, ValueError, "embed_alpha"),
        ({"unit": "token"}, ValueError, "unit"),
        ({"ops": ("swap",)}, ValueError, "ops"),
        ({"seed": "1"}, TypeError, "seed"),
    ],
)
def test_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        HyNoise(**kwargs)
