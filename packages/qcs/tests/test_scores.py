"""Model-based score producers: per-sequence losses (perplexity), IFD's pair of losses, RHO-1."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from qcs.baselines import ifd_scores, rho1_token_mask
from qcs.rollouts import LoRARollouts, mean_token_loss
from qcs.scores import ifd_losses, mean_response_losses, rho1_losses, rho1_reference_model
from qcs.tasks import make_instruction_pool, make_target_set

from neurips25_core.models import tiny_llama, tiny_llama_config

pytest.importorskip("peft", reason="peft is a dependency of qcs; run `uv sync --all-packages`")


@pytest.fixture(scope="module")
def setup():
    base = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2), seed=0)
    return base, make_instruction_pool(12, seed=0), make_target_set(8, seed=1)


def _hand_loss(model, prompt: str, response: str) -> float:
    full = list((prompt + response + "\n").encode())
    x = torch.tensor([full[:-1]])
    with torch.no_grad():
        logits = model(input_ids=x).logits[0].double()
    p = len(prompt.encode())
    return float(F.cross_entropy(logits[p - 1 :], torch.tensor(full[p:])))


def test_mean_response_losses_and_ifd_match_hand_computation(setup):
    base, pool, _ = setup
    base.train()  # the producers evaluate in eval mode and restore the caller's mode
    got = mean_response_losses(base, pool, batch_size=5)
    assert base.training
    base.eval()
    given, alone = ifd_losses(base, pool, batch_size=5)
    assert torch.equal(given, got)
    for i in (0, 5, 11):
        p = pool[i]
        assert (
            abs(float(given[i]) - _hand_loss(base, f"Q: {p.instruction}\nA: ", p.response)) < 1e-4
        )
        assert abs(float(alone[i]) - _hand_loss(base, "A: ", p.response)) < 1e-4
    assert ifd_scores(given, alone).shape == (12,)
    with pytest.raises(TypeError, match="pairs"):
        ifd_losses(base, {"input_ids": None})


def test_rho1_reference_model_and_excess_loss(setup):
    base, pool, target = setup
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ref = rho1_reference_model(base, target, steps=8, batch_size=8, lr=3e-2)
    assert not any("lora_" in k for k in ref.state_dict())  # merged into a plain model
    assert mean_token_loss(ref, target) < mean_token_loss(base, target) - 0.02
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k]), k
    tok, ref_loss, mask = rho1_losses(base, ref, pool)
    ro = LoRARollouts(base, pool, target, steps=1)
    assert tok.shape == ref_loss.shape == mask.shape == (ro.n, ro.max_tokens)
    assert torch.equal(mask.sum(1), ro.pool["token_lengths"])
    assert bool((tok[~mask] == 0).all()) and bool((tok[mask] > 0).all())
    p = pool[3]
    hand = _hand_loss(base, f"Q: {p.instruction}\nA: ", p.response)
    assert abs(float(tok[3][mask[3]].mean()) - hand) < 1e-4
    keep = rho1_token_mask(tok, ref_loss, mask, 0.5)
    assert int(keep.sum()) == -(-int(mask.sum()) // 2)
    ro.train_fn(keep.float())  # the RHO-1 mask is directly a rollout's weights
