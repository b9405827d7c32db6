"""nn.Modules: the rotated, quantized linear layer and fused same-input groups.

CPU path: dequantize to float32 (cached after the first call), then one matmul. CUDA path: the
Triton dequant-GEMV kernels on a device-side copy of the codes made once (``device_qweight``). The forward is
y = σ ⊙ (Q(W_r/σ) · M(s ⊙ x)) + b, with M the orthonormal Hadamard transform.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .quantizers import QuantizedMatrix, QuantizerSpec, parse_spec, quantize
from .rotation import hadamard_transform, rotate_weight

__all__ = ["FusedGroup", "FusedMember", "QPaletteLinear"]


class QPaletteLinear(nn.Module):
    """A linear layer stored as a rotated Q-Palette quantized matrix (or unquantized, rotated).

    Build it with :meth:`from_linear`. ``qweight`` holds the QuantizedMatrix (None when
    unquantized, then ``weight_r`` holds the rotated weight in the linear's dtype).

    Example:
        >>> lin = torch.nn.Linear(32, 16)
        >>> q = QPaletteLinear.from_linear(lin, "nuq-4", signs=None)
        >>> q(torch.randn(2, 32)).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        signs: torch.Tensor,
        qweight: QuantizedMatrix | None,
        weight_r: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.qweight = qweight
        self.register_buffer("signs", signs)
        self.register_buffer("weight_r", weight_r)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self._dense: torch.Tensor | None = None
        self._device_qm: QuantizedMatrix | None = None

    @property
    def spec(self) -> QuantizerSpec | None:
        return None if self.qweight is None else self.qweight.spec

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        spec: QuantizerSpec | str | None,
        signs: torch.Tensor | None = None,
        seed: int = 0,
    ) -> QPaletteLinear:
        """Rotate ``linear``'s weight by (signs, Hadamard) and quantize it with ``spec``.

        Args:
            linear: the nn.Linear to replace.
            spec: a palette quantizer, or None to keep the rotated weight unquantized.
            signs: (in_features,) ±1 vector shared by layers reading the same input; None draws
                one from ``seed``.
            seed: seed of the signs when ``signs`` is None.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected an nn.Linear, got {type(linear).__name__}")
        from .rotation import random_signs

        w = linear.weight.detach()
        if signs is None:
            signs = random_signs(linear.in_features, seed, dtype=w.dtype)
        if signs.shape != (linear.in_features,):
            raise ValueError(
                f"signs: expected shape ({linear.in_features},), got {tuple(signs.shape)}"
            )
        signs = signs.to(w.dtype)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        wr = rotate_weight(w, signs)
        if spec is None:
            return cls(linear.in_features, linear.out_features, signs, None, wr, bias)
        qm = quantize(wr, parse_spec(spec))
        return cls(linear.in_features, linear.out_features, signs, qm, None, bias)

    def dense_weight(self) -> torch.Tensor:
        """The rotated weight the matmul uses (dequantized once, then cached)."""
        if self.weight_r is not None:
            return self.weight_r
        if self._dense is None:
            self._dense = self.qweight.dequantize()
        return self._dense

    def device_qweight(self, device: torch.device) -> QuantizedMatrix:
        """``qweight`` with codes, scales and codebook on ``device``, moved once and cached.

        The Triton kernels read this copy; later calls on the same device move nothing.
        """
        qm = self._device_qm
        if qm is None or qm.scales.device != device:
            src = self.qweight
            qm = QuantizedMatrix(
                src.spec,
                src.shape,
                src.scales.to(device),
                tuple(c.to(device) for c in src.codes),
                src.codebook.to(device),
            )
            self._device_qm = qm
        return qm

    @property
    def nbytes(self) -> int:
        """Stored bytes: codes + codebook + row scales (+ the sign vector as bits)."""
        body = self.qweight.nbytes if self.qweight is not None else self.weight_r.numel() * 2
        return body + self.in_features // 8

    def rotate_input(self, x: torch.Tensor) -> torch.Tensor:
        return hadamard_transform(x, self.signs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.qweight is not None and x.is_cuda:
            from .ops import qmatmul  # Triton dequant-GEMV on the cached device-side codes

            y = qmatmul(self.rotate_input(x), self.device_qweight(x.device))
        else:
            w = self.dense_weight()
            w = w if w.device == x.device else w.to(x.device)
            y = self.rotate_input(x).to(w.dtype) @ w.T
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, spec={self.spec}"


class FusedGroup(nn.Module):
    """Layers that read the same input, run as one rotation and one output-concatenated matmul.

    Members must share the sign vector and have identical codebooks (the same quantizer spec);
    the official ``merge_infos`` only warns there, we refuse. Each member is replaced by a
    :class:`FusedMember` proxy: the first call computes every member's output, the others read a
    one-entry cache keyed by the input tensor (identity, data_ptr, shape, _version), each member
    reading an entry at most once.

    Example:
        >>> a, b = torch.nn.Linear(32, 16), torch.nn.Linear(32, 32)
        >>> s = torch.ones(32)
        >>> g = FusedGroup([QPaletteLinear.from_linear(m, "nuq-3", s) for m in (a, b)])
        >>> x = torch.randn(3, 32)
        >>> pa, pb = g.proxies()
        >>> pa(x).shape, pb(x).shape
        (torch.Size([3, 16]), torch.Size([3, 32]))
    """

    def __init__(self, members: Sequence[QPaletteLinear]) -> None:
        super().__init__()
        members = list(members)
        if len(members) < 2:
            raise ValueError(f"members: a fused group needs at least 2 layers, got {len(members)}")
        for m in members:
            if not isinstance(m, QPaletteLinear):
                raise TypeError(f"members: expected QPaletteLinear, got {type(m).__name__}")
        first = members[0]
        for m in members[1:]:
            if m.in_features != first.in_features:
                raise ValueError(
                    f"members: in_features differ ({first.in_features} vs {m.in_features})"
                )
            if not torch.equal(m.signs, first.signs):
                raise ValueError("members: fused layers must share one sign vector")
            if m.spec != first.spec:
                raise ValueError(
                    f"members: fused layers need identical codebooks, got {first.spec} and {m.spec}"
                )
            a, b = first.qweight, m.qweight
            if a is not None and not torch.equal(a.codebook, b.codebook):
                raise ValueError("members: fused layers need identical codebooks")
        self.members = nn.ModuleList(members)
        self.splits = [m.out_features for m in members]
        self._cache: tuple | None = None
        self._weight: torch.Tensor | None = None

    def weight(self) -> torch.Tensor:
        if self._weight is None:
            self._weight = torch.cat([m.dense_weight() for m in self.members], dim=0)
        return self._weight

    def compute(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """All members' outputs for input x: one rotation, one matmul."""
        w = self.weight()
        if w.device != x.device:
            self._weight = w = w.to(x.device)
        y = self.members[0].rotate_input(x).to(w.dtype) @ w.T
        outs = list(torch.split(y, self.splits, dim=-1))
        for i, m in enumerate(self.members):
            if m.bias is not None:
                outs[i] = outs[i] + m.bias.to(y.dtype)
            outs[i] = outs[i].to(x.dtype)
        return tuple(outs)

    def output(self, x: torch.Tensor, index: int) -> torch.Tensor:
        key = (x.data_ptr(), tuple(x.shape), x._version)
        c = self._cache
        if c is None or c[0] is not x or c[1] != key or index in c[3]:
            c = (x, key, self.compute(x), set())
        c[3].add(index)
        self._cache = c if len(c[3]) < len(self.members) else None
        return c[2][index]

    def proxies(self) -> list[FusedMember]:
        return [FusedMember(self, i) for i in range(len(self.members))]


class FusedMember(nn.Module):
    """Stands in for one member of a :class:`FusedGroup` (same call signature as nn.Linear)."""

    def __init__(self, group: FusedGroup, index: int) -> None:
        super().__init__()
        self.index = index
        self.in_features = group.members[index].in_features
        self.out_features = group.members[index].out_features
        object.__setattr__(self, "_group", group)  # not a submodule: shared by all members

    @property
    def group(self) -> FusedGroup:
        return self._group

    @property
    def spec(self) -> QuantizerSpec | None:
        return self._group.members[self.index].spec

    @property
    def nbytes(self) -> int:
        return self._group.members[self.index].nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._group.output(x, self.index)
