"""The press's attention function, registered with transformers' ``AttentionInterface`` as ``"andpro"``.

It builds its own boolean mask from the cache layer's slot positions and validity:

    allowed[b, h, i, s] = valid[b, h, s] and positions[b, h, s] <= query_position[i]
                          (and query_position[i] - positions[b, h, s] < sliding_window, if any)

so per-head budgets are exact (evicted slots do not exist; padding slots are masked with -inf),
new tokens attend causally to the kept tokens at their original positions, and a multi-token
forward after compression (a question appended to a compressed context) works. The math is
eager (fp32 softmax, as transformers' eager path) or ``F.scaled_dot_product_attention``, matching the
model's original implementation. Because ``"andpro"`` is not a registered *mask* implementation,
transformers' ``create_causal_mask`` returns ``None`` for it; padded batches are refused by the
press's model-level pre-hook.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

__all__ = ["ATTENTION_NAME", "masked_attention", "press_attention_forward", "register"]

ATTENTION_NAME = "andpro"
SUPPORTED_IMPLEMENTATIONS = ("eager", "sdpa")

# attention module -> {"cache": PressCache | None, "impl": "eager" | "sdpa"}, set by the press's hooks.
_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def masked_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    allowed: torch.Tensor,
    scaling: float,
    impl: str = "sdpa",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention under a boolean mask with GQA.

    Args:
        query: ``[B, H_q, q, d]``.
        key, value: ``[B, H_k, P, d]`` with ``H_k`` dividing ``H_q``.
        allowed: ``[B, H_k, q, P]`` bool.
        scaling: logit scale.
        impl: ``"eager"`` (matmul, fp32 softmax) or ``"sdpa"``.

    Returns:
        (``[B, q, H_q, d]`` output, ``[B, H_q, q, P]`` weights for eager else ``None``).
    """
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
        allowed = allowed.repeat_interleave(groups, dim=1)
    if impl == "eager":
        logits = torch.matmul(query, key.transpose(2, 3)) * scaling
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
        weights = torch.softmax(
            logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)
        ).to(query.dtype)
        out = torch.matmul(weights, value)
        return out.transpose(1, 2).contiguous(), weights
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _allowed_mask(
    layer, query_len: int, batch: int, heads: int, kv_len: int, device, sliding_window
):
    if layer is not None and layer.valid is not None and layer.valid.shape[-1] == kv_len:
        positions, valid = layer.positions, layer.valid
        total = layer.logical_length
    else:  # no press cache (use_cache=False) or a plain forward: keys are positions 0..kv_len-1
        positions = torch.arange(kv_len, device=device).expand(batch, heads, kv_len)
        valid = None
        total = kv_len
    qpos = torch.arange(total - query_len, total, device=device)
    allowed = positions[:, :, None, :] <= qpos[None, None, :, None]
    if valid is not None:
        allowed = allowed & valid[:, :, None, :]
    if sliding_window is not None:
        allowed = allowed & (
            (qpos[None, None, :, None] - positions[:, :, None, :]) < sliding_window
        )
    return allowed


def press_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ``AttentionInterface`` entry (signature of transformers' attention functions)."""
    state = _STATE.get(module)
    if state is None:
        raise RuntimeError(
            "the 'andpro' attention implementation is only valid inside an andpro Press context; "
            f"module {type(module).__name__} is not hooked"
        )
    cache = state.get("cache")
    layer = None
    if cache is not None and module.layer_idx < len(cache.layers):
        layer = cache.layers[module.layer_idx]
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    if layer is not None and layer.prefill_pending and "window_queries" not in state:
        # Prefill of a press cache: keep the observation window's queries (the model's own query
        # path: q_norm, RoPE) for the press's scorer, which runs after this attention call.
        w = min(state["press"].window, query.shape[2])
        state["window_queries"] = query[:, :, -w:].detach().clone()
        state["scaling"] = scaling
    if attention_mask is not None:
        # "andpro" is not a mask implementation, so transformers passes None unless the caller
        # handed a ready 4-D mask, which would not know about evicted slots.
        raise ValueError(
            f"attention_mask: the press builds its own per-head mask; got a {attention_mask.dim()}-D mask "
            "(padding masks are checked and refused at the model's forward)"
        )
    allowed = _allowed_mask(
        layer,
        query.shape[2],
        key.shape[0],
        key.shape[1],
        key.shape[2],
        key.device,
        kwargs.get("sliding_window"),
    )
    return masked_attention(query, key, value, allowed, scaling, state["impl"])


def register() -> None:
    """Register ``"andpro"`` with transformers' ``AttentionInterface`` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, press_attention_forward)
