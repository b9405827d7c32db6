"""Model-level API: ``quantize_`` (swap linears for QAT), ``pack_`` (export) and ``model_size_bits``.

Example (CPU, no download):

    >>> import paretoq
    >>> from neurips25_core.models import tiny_llama
    >>> model = tiny_llama()
    >>> _ = paretoq.quantize_(model, bits=2)  # q/k/v/o/gate/up/down become QuantLinear
    >>> # ... QAT: train the model as usual (W and α are parameters) ...
    >>> _ = paretoq.pack_(model)  # QuantLinear -> PackedLinear (int32 words)
    >>> bits = paretoq.model_size_bits(model)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from paretoq.modules import PackedLinear, QuantLinear
from paretoq.ops import BACKENDS, _check_ternary_alpha_grad, bits_per_weight, check_bits

__all__ = ["model_size_bits", "pack_", "quantize_"]


def _protected(model: nn.Module) -> set[int]:
    """ids of modules that must stay full precision: the output head and anything embedding-like."""
    ids = set()
    get_out = getattr(model, "get_output_embeddings", None)
    if callable(get_out):
        head = get_out()
        if head is not None:
            ids.add(id(head))
    get_in = getattr(model, "get_input_embeddings", None)
    if callable(get_in):
        emb = get_in()
        if emb is not None:
            ids.add(id(emb))
    for name, m in model.named_modules():
        last = name.rsplit(".", 1)[-1]
        if last == "lm_head" or "embed" in last or isinstance(m, nn.Embedding):
            ids.add(id(m))
    return ids


def _set_submodule(model: nn.Module, fqn: str, new: nn.Module) -> None:
    parent_name, _, child = fqn.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def quantize_(
    model: nn.Module,
    bits: float,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    *,
    ternary_alpha_grad: str = "paretoq",
) -> nn.Module:
    """Swap, in place, the linears of ``model`` for :class:`QuantLinear` with α initialised per width.

    Embeddings and the output head (``lm_head`` / ``get_output_embeddings()``) always stay full
    precision, as in the official code. ``bits == 16`` leaves the model unchanged.

    Args:
        model: e.g. a transformers ``LlamaForCausalLM``.
        bits: 1, 1.58, 2, 3, 4 or 16.
        filter_fn: ``(module, fqn) -> bool`` choosing among the ``nn.Linear`` modules; default all
            of them except the head. Selecting the head or an embedding raises ``ValueError``.
        ternary_alpha_grad: ``"paretoq"`` (official) or ``"exact"``.

    Returns:
        ``model`` (modified in place).

    Raises:
        ValueError: bad ``bits``; ``filter_fn`` selects a protected module; nothing to quantize.
    """
    bits = check_bits(bits)
    _check_ternary_alpha_grad(ternary_alpha_grad)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(
            f"filter_fn: expected a callable (module, fqn) -> bool, got {type(filter_fn).__name__}"
        )
    if bits >= 16:
        return model
    protected = _protected(model)
    chosen = []
    for fqn, m in model.named_modules():
        if not isinstance(m, nn.Linear) or isinstance(m, QuantLinear):
            continue
        if filter_fn is None:
            if id(m) not in protected:
                chosen.append((fqn, m))
        elif filter_fn(m, fqn):
            if id(m) in protected:
                raise ValueError(
                    f"filter_fn: selected {fqn!r}, the output head or an embedding, which stays full precision"
                )
            chosen.append((fqn, m))
    if not chosen:
        raise ValueError(
            "model: no nn.Linear module to quantize (all filtered out or already quantized)"
        )
    for fqn, m in chosen:
        _set_submodule(
            model, fqn, QuantLinear.from_linear(m, bits, ternary_alpha_grad=ternary_alpha_grad)
        )
    return model


@torch.no_grad()
def pack_(model: nn.Module, backend: str = "auto") -> nn.Module:
    """Replace, in place, every ``QuantLinear`` (bits < 16) by a :class:`PackedLinear`.

    Args:
        model: a model prepared by :func:`quantize_` (and trained).
        backend: matmul backend of the packed layers (``"auto"``, ``"triton"``, ``"torch"``,
            ``"reference"``).

    Returns:
        ``model`` (modified in place); its state dict now holds int32 words and scales.

    Raises:
        ValueError: the model has no ``QuantLinear`` with bits < 16.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    targets = [
        (fqn, m) for fqn, m in model.named_modules() if isinstance(m, QuantLinear) and m.bits < 16
    ]
    if not targets:
        raise ValueError(
            "model: no QuantLinear with bits < 16 to pack; call paretoq.quantize_(model, bits) first"
        )
    packed = [(fqn, PackedLinear.from_quant_linear(m, backend=backend)) for fqn, m in targets]
    for fqn, p in packed:
        _set_submodule(model, fqn, p)
    return model


def model_size_bits(
    model: nn.Module, param_bits: int | None = 16, *, ternary_base3: bool = False
) -> float:
    """Storage of ``model`` in bits.

    - ``PackedLinear``: the int32 words actually stored, plus its scales at ``param_bits``.
    - ``QuantLinear`` (not yet packed): the arithmetic count ``numel·b`` (ternary ``log2 3``),
      plus α at ``param_bits``.
    - every other parameter (embeddings, norms, untied head, biases), counted once: ``param_bits``.

    Args:
        model: any module.
        param_bits: bits per full-precision value (16: a bf16 deployment); ``None`` uses each
            tensor's actual element size.
        ternary_base3: count packed ternary layers in the base-3 storage format (8 bits per 5
            weights, :func:`paretoq.packing.pack_ternary_base3`) instead of their 2-bit planes.
    """

    def fp_bits(t: torch.Tensor) -> int:
        return t.numel() * (t.element_size() * 8 if param_bits is None else param_bits)

    total = 0.0
    counted: set[int] = set()
    for m in model.modules():
        if isinstance(m, PackedLinear):
            if ternary_base3 and m.bits == 1.58:
                total += m.out_features * -(-m.in_features // 5) * 8 + fp_bits(m.scale)
            else:
                total += sum(p.numel() * 32 for p in m.planes) + fp_bits(m.scale)
        elif isinstance(m, QuantLinear) and m.bits < 16:
            total += m.weight.numel() * bits_per_weight(m.bits) + fp_bits(m.alpha)
            counted.update({id(m.weight), id(m.alpha)})
    for p in model.parameters():
        if id(p) not in counted:
            total += fp_bits(p)
            counted.add(id(p))
    return total
