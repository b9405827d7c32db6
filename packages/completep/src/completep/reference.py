"""The spec in code: a plain-torch forward of a Llama under a parameterization (float64-capable).

Written from the Llama equations (RMSNorm, rotary embeddings, causal GQA attention, SwiGLU), not from
transformers' modules, so the hooked Llama and the Granite model can both be checked against it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from completep.params import ParamConfig, multipliers

__all__ = ["reference_logits"]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm normalizes in float32 whatever the input dtype; do the same so the
    # float64 comparison with it is exact (this is the only float32 step besides the rotary angles).
    x32 = x.to(torch.float32)
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_logits(
    state_dict: dict[str, torch.Tensor], config, cfg: ParamConfig, input_ids: torch.Tensor
) -> torch.Tensor:
    """Logits of a Llama with weights ``state_dict`` under ``cfg``: (batch, seq) -> (batch, seq, vocab).

    Computes in the dtype of the weights (pass a float64 state dict for the fp64 reference).
    h₀ = α_in·E[x]; h ← h + m_L^-α·Attn(RMSNorm(h)); h ← h + m_L^-α·MLP(RMSNorm(h));
    logits = W_out·(α_out/m_N·RMSNorm(h)); attention logits q·k·head_dim^-p (p = 1 μP family, ½ SP).
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids: expected (batch, seq), got shape {tuple(input_ids.shape)}")
    sd = {k.removeprefix("model."): v for k, v in state_dict.items()}
    width = config.hidden_size
    depth = config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or width // heads
    eps = config.rms_norm_eps
    rope = getattr(config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    m = multipliers(cfg, width, depth)
    embed = sd["embed_tokens.weight"]
    dtype = embed.dtype
    batch, seq = input_ids.shape
    h = embed[input_ids] * m.embedding

    # Rotary angles in float32, as transformers computes them whatever the model dtype (so the
    # float64 comparison is exact); everything after them runs in the weights' dtype.
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    scale = m.attention_scale(head_dim)

    for i in range(depth):
        p = f"layers.{i}."
        x = _rms_norm(h, sd[p + "input_layernorm.weight"], eps)
        q = F.linear(x, sd[p + "self_attn.q_proj.weight"], sd.get(p + "self_attn.q_proj.bias"))
        k = F.linear(x, sd[p + "self_attn.k_proj.weight"], sd.get(p + "self_attn.k_proj.bias"))
        v = F.linear(x, sd[p + "self_attn.v_proj.weight"], sd.get(p + "self_attn.v_proj.bias"))
        q = q.view(batch, seq, heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = scores.softmax(-1) @ v
        attn = attn.transpose(1, 2).reshape(batch, seq, heads * head_dim)
        out = F.linear(attn, sd[p + "self_attn.o_proj.weight"], sd.get(p + "self_attn.o_proj.bias"))
        h = h + m.residual * out
        x = _rms_norm(h, sd[p + "post_attention_layernorm.weight"], eps)
        gate = F.linear(x, sd[p + "mlp.gate_proj.weight"], sd.get(p + "mlp.gate_proj.bias"))
        up = F.linear(x, sd[p + "mlp.up_proj.weight"], sd.get(p + "mlp.up_proj.bias"))
        out = F.linear(
            F.silu(gate) * up, sd[p + "mlp.down_proj.weight"], sd.get(p + "mlp.down_proj.bias")
        )
        h = h + m.residual * out
    h = _rms_norm(h, sd["norm.weight"], eps)
    head = state_dict.get("lm_head.weight", embed)
    return F.linear(h * m.logits, head, state_dict.get("lm_head.bias"))
