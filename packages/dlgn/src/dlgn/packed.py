"""Bit-packed inference of a discretized logic gate network (torch int64/int32 bitwise ops).

Samples are packed along the batch: feature ``f`` of samples ``[j·w, (j+1)·w)`` is word ``j`` of
row ``f`` (bit ``i`` = sample ``j·w + i``). Each neuron is then one branch-free bitwise expression
per word, ``y = (m11 & a & b) | (m10 & a & ~b) | (m01 & ~a & b) | (m00 & ~a & ~b)``, where
``m_pq`` is all ones where the gate's truth bit ``f(p, q)`` is 1. GroupSum becomes a per-class
popcount (integer counts, no τ, the same argmax). Padding bits of the last word are never counted.
"""

from __future__ import annotations

import dataclasses

import torch

from .functional import truth_table
from .layers import Circuit, LogicNet

__all__ = ["PackedBits", "pack_bits", "packed_forward", "unpack_bits"]

_WORD_DTYPES = {32: torch.int32, 64: torch.int64}


@dataclasses.dataclass
class PackedBits:
    """Bits packed along the batch.

    Attributes:
        words: (features, ⌈B/w⌉) int32 or int64 words.
        batch_size: B, the number of real samples (the rest of the last word is padding).
        word_bits: w ∈ {32, 64}.
    """

    words: torch.Tensor
    batch_size: int
    word_bits: int

    @property
    def num_features(self) -> int:
        return int(self.words.shape[0])


def pack_bits(x_bool: torch.Tensor, word_bits: int = 64) -> PackedBits:
    """Pack (B, F) binary inputs along the batch into (F, ⌈B/w⌉) words.

    Args:
        x_bool: (B, F) bool tensor, or a numeric tensor holding only 0 and 1.
        word_bits: 32 or 64.

    Returns:
        :class:`PackedBits`.

    Example:
        >>> p = pack_bits(torch.tensor([[1, 0], [1, 1], [0, 1]]), word_bits=32)
        >>> p.words.tolist(), p.batch_size
        ([[3], [6]], 3)
    """
    if word_bits not in _WORD_DTYPES:
        raise ValueError(f"word_bits: expected 32 or 64, got {word_bits!r}")
    if not isinstance(x_bool, torch.Tensor):
        raise TypeError(f"x_bool: expected a torch.Tensor, got {type(x_bool).__name__}")
    if x_bool.ndim != 2:
        raise ValueError(f"x_bool: expected shape (B, F), got {tuple(x_bool.shape)}")
    if x_bool.dtype != torch.bool:
        if x_bool.is_complex() or not ((x_bool == 0) | (x_bool == 1)).all():
            raise ValueError(
                "x_bool: expected binary inputs (bool, or only 0 and 1); threshold or round them "
                "first (e.g. dlgn.data.thermometer)"
            )
        x_bool = x_bool != 0
    batch, features = x_bool.shape
    num_words = max(1, -(-batch // word_bits))
    bits = torch.zeros(features, num_words * word_bits, dtype=torch.int64, device=x_bool.device)
    bits[:, :batch] = x_bool.T.to(torch.int64)
    shifts = torch.arange(word_bits, device=x_bool.device, dtype=torch.int64)
    # Distinct powers of two never carry, so the sum is the bitwise OR (bit 63 wraps to the sign).
    words = (bits.view(features, num_words, word_bits) << shifts).sum(-1)
    if word_bits == 32:
        words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return PackedBits(words=words, batch_size=batch, word_bits=word_bits)


def unpack_bits(packed: PackedBits) -> torch.Tensor:
    """(B, F) bool: the inverse of :func:`pack_bits` (padding dropped)."""
    w = packed.word_bits
    shifts = torch.arange(w, device=packed.words.device, dtype=packed.words.dtype)
    bits = (packed.words.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(packed.num_features, -1)[:, : packed.batch_size].T.bool()


def _gate_masks(ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Per neuron (out, 1) all-ones / zero masks of the truth bits f(0,0), f(0,1), f(1,0), f(1,1)."""
    bits = truth_table().to(ids.device)[ids]  # (out, 4)
    masks = (-bits).to(dtype)  # 1 -> -1 (all ones), 0 -> 0
    return tuple(masks[:, j : j + 1] for j in range(4))


def packed_layer(words: torch.Tensor, ids: torch.Tensor, ia: torch.Tensor, ib: torch.Tensor):
    """One discrete layer on packed words: (in, W) → (out, W)."""
    a = words.index_select(0, ia)
    b = words.index_select(0, ib)
    m00, m01, m10, m11 = _gate_masks(ids, words.dtype)
    na, nb = ~a, ~b
    return (m11 & a & b) | (m10 & a & nb) | (m01 & na & b) | (m00 & na & nb)


def packed_forward(
    net: LogicNet | Circuit, packed: PackedBits, backend: str = "torch"
) -> torch.Tensor:
    """Run the discretized network on packed bits.

    Args:
        net: a :class:`LogicNet` (its :meth:`~LogicNet.discretize` circuit is used) or a
            :class:`Circuit`.
        packed: :func:`pack_bits` of the (B, in_dim) binary inputs.
        backend: ``torch`` (int64 or int32 bitwise ops) or ``triton`` (the int32 eval kernel;
            needs ``word_bits=32``). The final popcount is a torch unpack either way.

    Returns:
        (B, k) int64 class counts: ``tau ×`` the eval-mode float GroupSum, with its argmax.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = LogicNet.from_widths(8, [16, 8], num_classes=2, tau=4.0).eval()
        >>> x = torch.randint(0, 2, (5, 8)).float()
        >>> counts = packed_forward(net, pack_bits(x))
        >>> bool((counts == (net(x) * 4.0).round().long()).all())
        True
    """
    circuit = net.discretize() if isinstance(net, LogicNet) else net
    if not isinstance(circuit, Circuit):
        raise TypeError(f"net: expected a LogicNet or a Circuit, got {type(net).__name__}")
    if not isinstance(packed, PackedBits):
        raise TypeError(
            f"packed: expected PackedBits (from pack_bits), got {type(packed).__name__}"
        )
    if packed.num_features != circuit.in_dim:
        raise ValueError(
            f"packed: expected {circuit.in_dim} packed features, got {packed.num_features}"
        )
    if backend not in ("torch", "triton"):
        raise ValueError(f"backend: expected 'torch' or 'triton', got {backend!r}")
    layer_fn = packed_layer
    if backend == "triton":
        from .kernels.logic import packed_layer_triton as layer_fn
    device = packed.words.device
    words = packed.words
    for ids, ia, ib in zip(circuit.ids, circuit.ia, circuit.ib):
        words = layer_fn(words, ids.to(device), ia.to(device), ib.to(device))
    bits = unpack_bits(PackedBits(words, packed.batch_size, packed.word_bits))  # (B, out)
    return bits.reshape(packed.batch_size, circuit.k, -1).sum(-1, dtype=torch.int64)
