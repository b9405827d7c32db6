"""Weighted response loss and elastic token weights."""

from __future__ import annotations

import math

import torch
from qcs import per_token_loss, token_weights, weighted_response_loss


def test_token_weights_elastic_values_and_mask():
    w = torch.tensor([True, False])
    v = torch.tensor([[True, False, True], [True, True, False]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    c = token_weights(w, v, 0.1, mask)
    torch.testing.assert_close(c, torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(token_weights(w, v, 0.0), torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]))


def test_weighted_loss_matches_hand_computation():
    logits = torch.randn(2, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[1, -100, 4], [0, 2, 3]])
    weights = torch.tensor([[0.9, 0.5, 0.1], [0.0, 0.9, 0.9]], dtype=torch.float64)
    logp = torch.log_softmax(logits, -1)
    num, den = 0.0, 0.0
    for b in range(2):
        for j in range(3):
            if labels[b, j] != -100:
                num += float(weights[b, j]) * -float(logp[b, j, labels[b, j]])
                den += float(weights[b, j])
    out = weighted_response_loss(logits, labels, weights)
    assert math.isclose(float(out), num / den, rel_tol=1e-12)
    ptl = per_token_loss(logits, labels)
    assert float(ptl[0, 1]) == 0.0


def test_zero_weights_give_zero_gradient():
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[1, 2, 4], [0, 2, 3]])
    weights = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    weighted_response_loss(logits, labels, weights).backward()
    assert float(logits.grad[:, :2].abs().sum()) == 0.0 and float(logits.grad[1].abs().sum()) == 0.0
    assert float(logits.grad[0, 2].abs().sum()) > 0
    logits.grad = None
    out = weighted_response_loss(logits, labels, torch.zeros(2, 3, dtype=torch.float64))
    out.backward()
    assert float(out.detach()) == 0.0 and float(logits.grad.abs().sum()) == 0.0
