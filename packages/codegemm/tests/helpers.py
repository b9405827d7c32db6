"""Shared builders for the codegemm tests: random and dyadic (exact in fp32) codebook weights."""

from __future__ import annotations

import torch

from neurips25_core.testing import randint, randn


def random_format(rows, k, m, v, bits, g, seed=0):
    """Random codes [M, K/v, m] (uint8), codebooks [m, C, v], positive scales [M, K/g] (fp32)."""
    size = 1 << bits
    codes = randint(0, size, rows, k // v, m, seed=seed).to(torch.uint8)
    codebooks = randn(m, size, v, seed=seed + 1)
    scales = randn(rows, k // g, seed=seed + 2).abs() + 0.5
    return codes, codebooks, scales


def dyadic_format(rows, k, m, v, bits, g, seed=0):
    """Codebooks in k/8, scales powers of two: with small-integer x every path is exact in fp32."""
    size = 1 << bits
    codes = randint(0, size, rows, k // v, m, seed=seed).to(torch.uint8)
    codebooks = randint(-16, 17, m, size, v, seed=seed + 1).float() / 8
    scales = torch.pow(2.0, randint(-2, 3, rows, k // g, seed=seed + 2).float())
    return codes, codebooks, scales


def dyadic_x(n, k, seed=0):
    return randint(-4, 5, n, k, seed=seed).float()
