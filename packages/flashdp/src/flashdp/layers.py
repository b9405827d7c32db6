"""DP layers: the forward of the original module; a backward that returns clipped per-sample sums.

Each trainable tensor (weight and bias separately) is one clipping group with threshold ``C_k``.
The batch is dim 0 of every layer input. With ``loss_reduction="mean"`` the incoming gradient
carries a 1/B factor, so it is multiplied by the micro-batch size B before norms are taken (as
opacus's ``rearrange_grad_samples``); the ``.grad`` then holds ``S_k = Σᵢ cᵢ gᵢ`` in units of the
per-sample losses, and :class:`flashdp.DPOptimizer` adds noise and divides by B̄.
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn
from torch.nn import functional as F

from . import ops
from .clipping import clipped_weight_grad_chunked


class _DPState:
    """What a DP layer needs in its backward (set by :func:`flashdp.make_private`)."""

    def __init__(self, clip_norms: dict[str, float], config) -> None:
        self.clip_norms = clip_norms
        self.eps = config.clip_eps
        self.mean = config.loss_reduction == "mean"
        self.backend = config.backend
        self.chunk_bytes = config.chunk_bytes


def _scaled(grad: torch.Tensor, state: _DPState) -> torch.Tensor:
    return grad * grad.shape[0] if state.mean else grad


def _sum_grad(per_sample: torch.Tensor, state: _DPState, name: str, like: torch.Tensor):
    out, _ = ops.clipped_per_sample_sum(per_sample, state.clip_norms[name], state.eps)
    return out.to(like.dtype)


def _linear_wgrad(x, g, state, like, transpose=False):
    c = state.clip_norms["weight"]
    if state.backend in (None, "torch") and x.device.type == "cpu":
        w, _ = clipped_weight_grad_chunked(x, g, c, state.eps, state.chunk_bytes)
    else:
        w = ops.clipped_linear_weight_grad(
            x, g, c, eps=state.eps, backend=state.backend, chunk_bytes=state.chunk_bytes
        )
    return (w.t() if transpose else w).to(like.dtype)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, state, transpose):
        ctx.save_for_backward(x, weight)
        ctx.state, ctx.transpose, ctx.has_bias = state, transpose, bias is not None
        w = weight.t() if transpose else weight
        return F.linear(x, w, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        state = ctx.state
        w = weight.t() if ctx.transpose else weight
        grad_x = grad_out @ w if ctx.needs_input_grad[0] else None
        g = _scaled(grad_out, state)
        grad_w = grad_b = None
        if ctx.needs_input_grad[1]:
            grad_w = _linear_wgrad(x, g, state, weight, ctx.transpose)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            per_sample = g.reshape(g.shape[0], -1, g.shape[-1]).sum(1)
            grad_b = _sum_grad(per_sample, state, "bias", weight)
        return grad_x, grad_w, grad_b, None, None


class DPLinear(nn.Linear):
    """``nn.Linear`` whose backward writes the clipped per-sample sums into ``.grad``.

    Example:
        >>> import flashdp
        >>> model = flashdp.make_private(
        ...     nn.Sequential(nn.Linear(3, 2)), flashdp.FlashDPConfig(1.0, 0.0)
        ... )
        >>> type(model[0]).__name__, sorted(model.state_dict())
        ('DPLinear', ['0.bias', '0.weight'])
    """

    dp_state: _DPState

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LinearFn.apply(x, self.weight, self.bias, self.dp_state, False)


def _conv1d_class() -> type | None:
    """transformers ``Conv1D`` if transformers has loaded it (no instance can exist otherwise)."""
    return getattr(sys.modules.get("transformers.pytorch_utils"), "Conv1D", None)


@functools.lru_cache(maxsize=1)
def dp_conv1d_class() -> type:
    """``DPConv1D``: transformers ``Conv1D`` (y = x W + b, W (N, M)) with clipped-sum grads."""
    from transformers.pytorch_utils import Conv1D as conv

    class DPConv1D(conv):
        """transformers ``Conv1D`` (a Linear with the weight transposed) with clipped-sum grads."""

        dp_state: _DPState

        def forward(self, x):
            shape = (*x.shape[:-1], self.nf)
            flat = x.reshape(x.shape[0], -1, x.shape[-1])
            y = _LinearFn.apply(flat, self.weight, self.bias, self.dp_state, True)
            return y.reshape(shape)

    return DPConv1D


class _AffineFn(torch.autograd.Function):
    """``y = x̂ ⊙ γ (+ β)`` with per-sample clipped sums for γ and β."""

    @staticmethod
    def forward(ctx, xhat, weight, bias, state):
        ctx.save_for_backward(xhat, weight)
        ctx.state, ctx.has_bias = state, bias is not None
        y = xhat * weight
        return y + bias if bias is not None else y

    @staticmethod
    def backward(ctx, grad_out):
        xhat, weight = ctx.saved_tensors
        state = ctx.state
        grad_x = grad_out * weight if ctx.needs_input_grad[0] else None
        g = _scaled(grad_out, state)
        b, d = g.shape[0], weight.numel()
        grad_w = grad_b = None
        if ctx.needs_input_grad[1]:
            per_sample = (g * xhat).reshape(b, -1, d).sum(1)
            grad_w = _sum_grad(per_sample, state, "weight", weight).view_as(weight)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = _sum_grad(g.reshape(b, -1, d).sum(1), state, "bias", weight).view_as(weight)
        return grad_x, grad_w, grad_b, None


class DPLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (last-dim affine) with per-sample clipped γ/β gradients."""

    dp_state: _DPState

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xhat = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        if self.weight is None:
            return xhat if self.bias is None else xhat + self.bias
        return _AffineFn.apply(xhat, self.weight, self.bias, self.dp_state)


class DPRMSNorm(nn.Module):
    """RMSNorm ``y = γ ⊙ x / rms(x)`` (torch ``nn.RMSNorm`` or transformers ``LlamaRMSNorm``)."""

    dp_state: _DPState

    def __init__(self, weight: nn.Parameter, eps: float | None) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x if x.dtype == torch.float64 else x.float()
        eps = torch.finfo(h.dtype).eps if self.eps is None else self.eps
        xhat = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
        return _AffineFn.apply(xhat, self.weight, None, self.dp_state)


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, padding_idx, state):
        ctx.save_for_backward(ids)
        ctx.state, ctx.padding_idx, ctx.rows = state, padding_idx, weight.shape[0]
        ctx.dtype = weight.dtype
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx, grad_out):
        (ids,) = ctx.saved_tensors
        state = ctx.state
        g = _scaled(grad_out, state)
        b, d = g.shape[0], g.shape[-1]
        acc = torch.float64 if g.dtype == torch.float64 else torch.float32
        g = g.reshape(b, -1, d).to(acc)
        idx = ids.reshape(b, -1)
        if ctx.padding_idx is not None:
            g = g * (idx != ctx.padding_idx).unsqueeze(-1).to(acc)
        # per-sample norm² = Σ over distinct rows v of ‖Σ_{t: idx_t = v} G_t‖² (opacus's
        # embedding_norm_sample): group (sample, row) pairs without forming a (B, V, D) tensor.
        key = (torch.arange(b, device=idx.device)[:, None] * ctx.rows + idx).reshape(-1)
        uniq, inverse = torch.unique(key, return_inverse=True)
        rows = torch.zeros(uniq.numel(), d, dtype=acc, device=g.device)
        rows.index_add_(0, inverse, g.reshape(-1, d))
        norm2 = torch.zeros(b, dtype=acc, device=g.device)
        norm2.index_add_(0, torch.div(uniq, ctx.rows, rounding_mode="floor"), rows.pow(2).sum(1))
        c = (state.clip_norms["weight"] / (norm2.sqrt() + state.eps)).clamp(max=1.0)
        grad_w = torch.zeros(ctx.rows, d, dtype=acc, device=g.device)
        grad_w.index_add_(0, idx.reshape(-1), (g * c.view(b, 1, 1)).reshape(-1, d))
        return None, grad_w.to(ctx.dtype), None, None


class DPEmbedding(nn.Embedding):
    """``nn.Embedding`` with per-sample clipped gradients (ids (B, T); position ids need B too)."""

    dp_state: _DPState

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return _EmbeddingFn.apply(ids, self.weight, self.padding_idx, self.dp_state)


def _retype(module: nn.Module, cls: type) -> nn.Module:
    new = cls.__new__(cls)
    new.__dict__ = module.__dict__.copy()
    new._parameters = dict(module._parameters)
    return new


def _rmsnorm_classes() -> tuple[type, ...]:
    # LlamaRMSNorm only when its module is loaded: importing transformers just to find out that
    # a model has no LlamaRMSNorm would cost seconds
    llama = sys.modules.get("transformers.models.llama.modeling_llama")
    return (nn.RMSNorm, llama.LlamaRMSNorm) if llama is not None else (nn.RMSNorm,)


def supported(module: nn.Module) -> bool:
    """Whether :func:`to_dp` has a DP version of ``module``'s exact type."""
    t = type(module)
    return (
        t in (nn.Linear, nn.LayerNorm, nn.Embedding)
        or t in _rmsnorm_classes()
        or t is _conv1d_class()
    )


def to_dp(module: nn.Module) -> nn.Module:
    """The DP version of ``module``, sharing its parameters (same state-dict keys).

    Raises:
        TypeError: the module type (or a setting such as ``Embedding(max_norm=...)``) is not
            supported.
    """
    t = type(module)
    if t is nn.Linear:
        return _retype(module, DPLinear)
    if t is nn.LayerNorm:
        if len(module.normalized_shape) != 1:
            raise TypeError("LayerNorm: only a last-dim normalized_shape is supported")
        return _retype(module, DPLayerNorm)
    if t is nn.Embedding:
        if module.max_norm is not None or module.sparse:
            raise TypeError("Embedding: max_norm and sparse=True are not supported by DPEmbedding")
        return _retype(module, DPEmbedding)
    if t in _rmsnorm_classes():
        eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
        if getattr(module, "weight", None) is None:
            raise TypeError("RMSNorm: elementwise_affine=False has nothing to train")
        new = DPRMSNorm(module.weight, eps)
        new.train(module.training)
        return new
    if t is _conv1d_class():
        return _retype(module, dp_conv1d_class())
    raise TypeError(
        f"target module: {t.__name__} is not supported (supported: Linear, LayerNorm, RMSNorm, "
        "LlamaRMSNorm, Embedding, transformers Conv1D)"
    )
