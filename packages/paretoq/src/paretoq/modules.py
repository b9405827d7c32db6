"""``QuantLinear`` (QAT: latent FP weight + learnable per-row α) and ``PackedLinear`` (inference).

Example (CPU):

    >>> import torch, paretoq
    >>> lin = torch.nn.Linear(64, 32, bias=False)
    >>> q = paretoq.QuantLinear.from_linear(lin, bits=2)
    >>> y = q(torch.randn(3, 64))  # trains W and α with straight-through gradients
    >>> p = paretoq.PackedLinear.from_quant_linear(q)  # int32-packed 2-bit codes
    >>> p(torch.randn(3, 64)).shape
    torch.Size([3, 32])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paretoq.ops import (
    _check_ternary_alpha_grad,
    _check_weight_alpha,
    _quantize_unchecked,
    alpha_init,
    bits_per_weight,
    check_bits,
    packed_matmul,
)

__all__ = ["FORMAT_VERSION", "PACKED_FORMAT", "QUANT_FORMAT", "PackedLinear", "QuantLinear"]

#: The ``format`` tag of a :class:`PackedLinear`'s ``_extra_state`` (int32 planes, see
#: :mod:`paretoq.packing`) and of a :class:`QuantLinear`'s; bump ``FORMAT_VERSION`` on a change.
PACKED_FORMAT = "paretoq.PackedLinear/int32-planar"
QUANT_FORMAT = "paretoq.QuantLinear"
FORMAT_VERSION = 1


def _check_extra_state(state: Any, layer: nn.Module, fmt: str, key: str) -> None:
    """Refuse a checkpoint whose recorded format, version, bits or sizes differ from ``layer``'s."""
    where = f"state_dict[{key!r}]" if key else "extra_state"
    if not isinstance(state, dict) or "format" not in state or "bits" not in state:
        raise ValueError(
            f"{where}: expected a dict with 'format' and 'bits' (saved by paretoq), got {state!r}"
        )
    if state["format"] != fmt or state.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{where}: checkpoint format {state['format']!r} v{state.get('version')} does not load "
            f"into a {type(layer).__name__} ({fmt!r} v{FORMAT_VERSION})"
        )
    if state["bits"] != layer.bits:
        raise ValueError(
            f"{where}: the checkpoint holds {state['bits']}-bit weights but this "
            f"{type(layer).__name__} is {layer.bits}-bit; build the model with bits="
            f"{state['bits']} (paretoq.quantize_(model, {state['bits']}), then pack_)"
        )
    for name in ("in_features", "out_features"):
        if name in state and state[name] != getattr(layer, name):
            raise ValueError(
                f"{where}: the checkpoint has {name}={state[name]}, this layer "
                f"{getattr(layer, name)}"
            )


class QuantLinear(nn.Linear):
    """A linear layer whose weight is quantized on the fly by ParetoQ's quantizer (QAT).

    ``y = x · (α·Q(W/α))ᵀ + b``; the latent ``weight`` (out, in) and ``alpha`` (out, 1) are
    parameters and receive straight-through gradients (see :func:`paretoq.quantize_weight`).
    The quantized weight is cast to the activation dtype, as in the official ``QuantizeLinear``.
    Checkpoints of the official code (``weight_clip_val``) load into ``alpha``.

    Args:
        in_features: K. out_features: N. bias: add a bias (the official layers have none).
        bits: 1, 1.58, 2, 3, 4, or 16 (plain linear, no α).
        ternary_alpha_grad: ``"paretoq"`` (official) or ``"exact"``.
        device, dtype: as for ``nn.Linear``. ``alpha`` starts at 1; use :meth:`from_linear` or
            :meth:`reset_alpha` to initialise it from the weight per bit width.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        *,
        bits: float,
        ternary_alpha_grad: str = "paretoq",
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        bits = check_bits(bits)
        mode = _check_ternary_alpha_grad(ternary_alpha_grad)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.bits = bits
        self.ternary_alpha_grad = mode
        if bits < 16:
            self.alpha = nn.Parameter(
                torch.ones(out_features, 1, device=self.weight.device, dtype=self.weight.dtype)
            )
        else:
            self.register_parameter("alpha", None)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, bits: float, *, ternary_alpha_grad: str = "paretoq"
    ) -> QuantLinear:
        """Wrap an ``nn.Linear``, reusing its weight and bias parameters; α initialised per bit width."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected an nn.Linear, got {type(linear).__name__}")
        bits = check_bits(bits)
        w = linear.weight
        q = cls(
            linear.in_features, linear.out_features, bias=linear.bias is not None,
            bits=bits, ternary_alpha_grad=ternary_alpha_grad, device="meta", dtype=w.dtype,
        )  # fmt: skip
        q.weight = w
        q.bias = linear.bias
        if bits < 16:
            q.alpha = nn.Parameter(alpha_init(w.detach(), bits).clone())
        return q

    @torch.no_grad()
    def reset_alpha(self) -> None:
        """Re-initialise α from the current weight (official ``train.py`` rule)."""
        if self.alpha is not None:
            self.alpha.copy_(alpha_init(self.weight, self.bits))

    def quantized_weight(self) -> torch.Tensor:
        """``α·Q(W/α)``, shape ``(out, in)`` (the latent weight when ``bits == 16``)."""
        return _quantize_unchecked(
            self.weight, self.alpha, self.bits, self.ternary_alpha_grad == "exact"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(
            x,
            self.quantized_weight().to(x.dtype),
            None if self.bias is None else self.bias.to(x.dtype),
        )

    def get_extra_state(self) -> dict[str, Any]:
        """``{"format": "paretoq.QuantLinear", "version": 1, "bits": b}``, saved as ``_extra_state``."""
        return {"format": QUANT_FORMAT, "version": FORMAT_VERSION, "bits": self.bits}

    def set_extra_state(self, state: Any) -> None:
        _check_extra_state(state, self, QUANT_FORMAT, "")

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        official = prefix + "weight_clip_val"
        if official in state_dict and prefix + "alpha" not in state_dict:
            state_dict[prefix + "alpha"] = state_dict.pop(official)
        key = prefix + "_extra_state"
        if key in state_dict:  # checked before anything is copied
            _check_extra_state(state_dict[key], self, QUANT_FORMAT, key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # The official checkpoints (and ours from before the format tag) carry no _extra_state:
        # α's shape still has to fit, and the bit width is the one this layer was built with.
        if key in missing_keys:
            missing_keys.remove(key)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bits={self.bits}"


class PackedLinear(nn.Module):
    """Inference linear layer over int32-packed low-bit codes: ``y = s ⊙ (x·(C − z)ᵀ) + b``.

    Buffers: ``qweight`` (first plane, int32 ``(out, K_pad·b/32)``), ``qweight_hi`` (3-bit only:
    the 1-bit high plane), ``scale`` ``(out,)``; ``bias`` optional. ``backend`` selects the matmul
    (``"auto"``: Triton on CUDA; numba on CPU when installed and no gradient is needed, else torch). Build with :meth:`from_quant_linear`.

    The state dict also holds ``_extra_state``, the format tag (bits, in/out features, layout,
    version): a strict ``load_state_dict`` of a checkpoint without it, or of another bit width
    (a 2-bit checkpoint into a ternary layer has the same buffer shapes), raises ``ValueError``
    before any buffer is copied.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bits: float,
        qweight: torch.Tensor,
        scale: torch.Tensor,
        qweight_hi: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        backend: str = "auto",
    ) -> None:
        from paretoq.ops import BACKENDS

        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        super().__init__()
        self.in_features, self.out_features, self.bits = in_features, out_features, check_bits(bits)
        self.backend = backend
        self.register_buffer("qweight", qweight)
        self.register_buffer("qweight_hi", qweight_hi)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self._layout = None
        self._layout_key: tuple | None = None

    @classmethod
    @torch.no_grad()
    def from_quant_linear(cls, layer: QuantLinear, backend: str = "auto") -> PackedLinear:
        """Pack a ``QuantLinear`` (bits < 16): codes of ``Q(W/α)`` plus the per-row scale."""
        from paretoq import packing

        if not isinstance(layer, QuantLinear):
            raise TypeError(f"layer: expected a QuantLinear, got {type(layer).__name__}")
        if layer.bits >= 16:
            raise ValueError("layer: a 16-bit QuantLinear has nothing to pack")
        _check_weight_alpha(layer.weight, layer.alpha)
        codes, scale, _ = packing.weight_to_codes(layer.weight, layer.alpha, layer.bits)
        specs = packing.plane_specs(layer.bits)
        if len(specs) == 1:
            planes = [packing.pack_codes(codes, specs[0][0])]
        else:  # 3-bit: low 2 bits + high bit
            planes = [packing.pack_codes(codes & 3, 2), packing.pack_codes(codes >> 2, 1)]
        return cls(
            layer.in_features, layer.out_features, layer.bits, planes[0], scale.detach().clone(),
            qweight_hi=planes[1] if len(planes) > 1 else None,
            bias=None if layer.bias is None else layer.bias.detach().clone(), backend=backend,
        )  # fmt: skip

    @property
    def planes(self) -> list[torch.Tensor]:
        return [self.qweight] if self.qweight_hi is None else [self.qweight, self.qweight_hi]

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The dense weight ``s·(C − z)``, shape ``(out, in)``."""
        from paretoq import packing

        return packing.dequantize_packed(
            self.planes, self.scale, self.bits, self.in_features, dtype
        )

    def cpu_layout(self):
        """The numba kernel's :class:`paretoq.cpu.CpuLayout` (bytes of 8/b codes, ``[M/R, K_pad·b/8, R]``, row tiles of R = 256),
        derived from the planes and rebuilt only when a buffer changes; never in the state dict."""
        from paretoq.cpu import cpu_layout

        key = tuple((t.data_ptr(), t._version) for t in (*self.planes, self.scale))
        if self._layout is None or self._layout_key != key:
            self._layout = cpu_layout(self.planes, self.scale, self.bits)
            self._layout_key = key
        return self._layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from paretoq.cpu import numba_available

        layout = None
        if (
            self.backend in ("auto", "numba")
            and x.device.type == "cpu"
            and x.dtype != torch.float64
            and numba_available()
        ):
            layout = self.cpu_layout()
        return packed_matmul(
            x, self.planes, self.scale, self.bits, self.in_features, self.bias,
            backend=self.backend, layout=layout,
        )  # fmt: skip

    def get_extra_state(self) -> dict[str, Any]:
        """The format tag saved as ``_extra_state``: bits, in_features, layout and version.

        Two bit widths can share buffer shapes (1.58 and 2 bits are both one 2-bit plane), so the
        buffers alone cannot tell a ternary checkpoint from a 2-bit one; this tag can.
        """
        return {
            "format": PACKED_FORMAT,
            "version": FORMAT_VERSION,
            "bits": self.bits,
            "in_features": self.in_features,
            "out_features": self.out_features,
        }

    def set_extra_state(self, state: Any) -> None:
        _check_extra_state(state, self, PACKED_FORMAT, "")

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        key = prefix + "_extra_state"
        if key in state_dict:  # checked before anything is copied
            _check_extra_state(state_dict[key], self, PACKED_FORMAT, key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def stored_bits(self) -> int:
        """Bits actually stored: int32 words, scales and bias in their dtypes."""
        total = sum(p.numel() * 32 for p in self.planes)
        total += self.scale.numel() * self.scale.element_size() * 8
        if self.bias is not None:
            total += self.bias.numel() * self.bias.element_size() * 8
        return total

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
            f"bits_per_weight={bits_per_weight(self.bits):.2f}, bias={self.bias is not None}"
        )
