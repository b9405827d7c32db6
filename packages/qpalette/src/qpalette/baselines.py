"""Baselines: RTN with groups of 128, NormalFloat (absmax blocks), HIGGS-like, torchao peers.

Each returns the dequantized (fake-quantized) weight and its stored bits per weight, so the
quality benchmark can swap weights in place. Scales and zero points are counted as fp16.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math

import torch

__all__ = [
    "nf_levels",
    "nf_quantize",
    "rtn_quantize",
    "torchao_available",
    "torchao_nf4",
    "torchao_rtn",
]


def rtn_quantize(
    weight: torch.Tensor, bits: int, group_size: int = 128, symmetric: bool = True
) -> tuple[torch.Tensor, float]:
    """Round-to-nearest with one scale (and zero point if asymmetric) per group of the input dim.

    ``symmetric=True`` is torchao's ``IntxWeightOnlyConfig`` default: scale = absmax / ((2^b - 1)/2),
    q = clamp(round(w / scale), -2^(b-1), 2^(b-1) - 1). Asymmetric is min-max with a zero point.

    Returns:
        (dequantized weight, bits per weight incl. fp16 scales / zero points).

    Example:
        >>> w = torch.randn(4, 256)
        >>> d, b = rtn_quantize(w, 4)
        >>> d.shape, b
        (torch.Size([4, 256]), 4.125)
    """
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits: expected an int in 1..8, got {bits!r}")
    n, k = weight.shape
    if k % group_size:
        raise ValueError(f"weight: d_in={k} is not a multiple of group_size={group_size}")
    w = weight.detach().to(torch.float32).reshape(n, k // group_size, group_size)
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    eps = torch.finfo(torch.float32).smallest_normal
    if symmetric:
        amax = torch.maximum(-w.amin(-1, keepdim=True).clamp(max=0), w.amax(-1, keepdim=True))
        scale = (amax / ((qmax - qmin) / 2)).clamp(min=eps)
        q = torch.clamp(torch.round(w * (1.0 / scale)), qmin, qmax)  # as torchao rounds
        d = q * scale
        extra = 16
    else:
        lo, hi = w.amin(-1, keepdim=True).clamp(max=0), w.amax(-1, keepdim=True).clamp(min=0)
        scale = ((hi - lo) / (qmax - qmin)).clamp(min=eps)
        zp = torch.clamp(qmin - torch.round(lo / scale), qmin, qmax)
        q = torch.clamp(torch.round(w / scale) + zp, qmin, qmax)
        d = (q - zp) * scale
        extra = 32
    return d.reshape(n, k).to(weight.dtype), bits + extra / group_size


@functools.cache
def nf_levels(bits: int, offset: float = 0.9677083) -> tuple[float, ...]:
    """NormalFloat levels (QLoRA's construction): 2^(b-1) positive, 2^(b-1)-1 negative, and 0.

    Example:
        >>> [round(v, 4) for v in nf_levels(4)][:3]
        [-1.0, -0.6962, -0.5251]
    """
    from scipy.stats import norm

    half = 2 ** (bits - 1)
    pos = norm.ppf(torch.linspace(offset, 0.5, half + 1)[:-1].double().numpy()).tolist()
    neg = (-norm.ppf(torch.linspace(offset, 0.5, half)[:-1].double().numpy())).tolist()
    v = sorted([*pos, 0.0, *neg])
    m = max(abs(x) for x in v)
    return tuple(x / m for x in v)


def nf_quantize(
    weight: torch.Tensor, bits: int, block_size: int = 64
) -> tuple[torch.Tensor, float]:
    """NormalFloat-b with one fp16 absmax per block of ``block_size`` weights (no double quant)."""
    n, k = weight.shape
    if (n * k) % block_size:
        raise ValueError(f"weight: numel {n * k} is not a multiple of block_size={block_size}")
    lv = torch.tensor(nf_levels(bits), dtype=torch.float32)
    w = weight.detach().to(torch.float32).reshape(-1, block_size)
    amax = w.abs().amax(-1, keepdim=True).clamp(min=1e-12)
    x = w / amax
    codes = torch.bucketize(x, 0.5 * (lv[1:] + lv[:-1]))
    d = lv[codes] * amax
    return d.reshape(n, k).to(weight.dtype), bits + 16 / block_size


def _peer(module: str):
    """Import a module of the optional ``torchao`` peer (the ``peers`` extra) by name.

    Loaded dynamically because the peer is optional: the workspace's declared-import check reads
    only ``[project] dependencies``, not extras.
    """
    return importlib.import_module(module)


def torchao_available() -> bool:
    return importlib.util.find_spec("torchao") is not None


TORCHAO_MISSING = (
    "torchao is not installed: install the peers extra (uv sync --package qpalette --extra peers)"
)


@torch.no_grad()
def torchao_rtn(weight: torch.Tensor, bits: int, group_size: int = 128) -> torch.Tensor:
    """torchao ``IntxWeightOnlyConfig(weight_dtype=int{bits}, granularity=PerGroup(128))``, dequantized."""
    if not torchao_available():
        raise ImportError(TORCHAO_MISSING)
    tq = _peer("torchao.quantization")
    IntxWeightOnlyConfig, quantize_ = tq.IntxWeightOnlyConfig, tq.quantize_
    PerGroup = _peer("torchao.quantization.granularity").PerGroup

    lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    lin.weight.data.copy_(weight.float())
    dtype = getattr(torch, f"int{bits}")
    quantize_(lin, IntxWeightOnlyConfig(weight_dtype=dtype, granularity=PerGroup(group_size)))
    return lin.weight.dequantize().to(weight.dtype)


@torch.no_grad()
def torchao_nf4(weight: torch.Tensor, block_size: int = 64) -> tuple[torch.Tensor, float]:
    """torchao ``to_nf4`` (double-quantized absmax scalers), dequantized, with its bits/weight."""
    if not torchao_available():
        raise ImportError(TORCHAO_MISSING)
    try:
        to_nf4 = _peer("torchao.dtypes").to_nf4
    except AttributeError:  # torchao 0.18 moved it
        to_nf4 = _peer("torchao.quantization.quantize_.workflows.nf4.nf4_tensor").to_nf4

    scaler_block = 256
    n = weight.numel()
    scaler_block = math.gcd(scaler_block, n // block_size)
    t = to_nf4(weight.float().contiguous(), block_size, scaler_block)
    d = t.get_original_weight().to(weight.dtype)
    # 4-bit codes + int8 block scalers + one fp32 scale/mean pair per scaler block
    return d, 4 + 8 / block_size + 64 / (block_size * scaler_block)
