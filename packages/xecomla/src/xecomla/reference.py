"""Naive, readable reference implementations of xecomla: the spec in code (float64-capable).

Every function here loops over heads and builds each key and value explicitly, as the spec
(`shared/methods/xecomla.md`, §2) writes them; the layers are tested against these.
"""

from __future__ import annotations

import torch

__all__ = ["mla_attention_ref"]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def mla_attention_ref(attn, hidden_states: torch.Tensor, cos_sin=None) -> torch.Tensor:
    """Causal MLA output [B, T, d] of ``attn`` (an ``MLAAttention``) with every key decompressed.

    Per head h with KV head g = h // (n_h / n_kv): q_h = W_qB,h W_qA x; [c_kv | k_pe] = W_kvA x;
    [k_nope | v]_g = W_kvB,g c_kv; RoPE on q_pe and k_pe; score = (q_nope·k_nope + q_pe·k_pe) /
    √(d_nope + d_rope); causal softmax; out = W_o [ctx_0 | … | ctx_{n_h−1}].

    Args:
        attn: the layer whose weights are used (cast to the dtype of ``hidden_states``).
        hidden_states: [B, T, d].
        cos_sin: RoPE tables (cos, sin), each [B, T, d_rope] (``attn.rope_cos_sin``); None when
            d_rope = 0.
    """
    c = attn.mla_config
    dt = hidden_states.dtype
    x = hidden_states
    T = x.shape[1]
    n_h, n_kv = attn.num_heads, attn.num_key_value_heads
    group = n_h // n_kv
    w_qa, w_qb = attn.q_a_proj.weight.to(dt), attn.q_b_proj.weight.to(dt)
    w_kva, w_kvb = attn.kv_a_proj.weight.to(dt), attn.kv_b_proj.weight.to(dt)
    latent = x @ w_kva.T
    c_kv, k_pe = latent[..., : c.r_kv], latent[..., c.r_kv :]
    if c.d_rope:
        cos, sin = (t.to(dt) for t in cos_sin)
        k_pe = _rope(k_pe, cos, sin)
    q_all = (x @ w_qa.T) @ w_qb.T
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    contexts = []
    for h in range(n_h):
        g = h // group
        q = q_all[..., h * c.qk_head_dim : (h + 1) * c.qk_head_dim]
        q_nope, q_pe = q[..., : c.d_nope], q[..., c.d_nope :]
        if c.d_rope:
            q_pe = _rope(q_pe, cos, sin)
        rows = w_kvb[g * (c.d_nope + c.d_v) : (g + 1) * (c.d_nope + c.d_v)]
        k_nope = c_kv @ rows[: c.d_nope].T
        v = c_kv @ rows[c.d_nope :].T
        scores = (q_nope @ k_nope.transpose(-1, -2) + q_pe @ k_pe.transpose(-1, -2)) / (
            c.qk_head_dim**0.5
        )
        scores = scores.masked_fill(~causal, float("-inf"))
        contexts.append(torch.softmax(scores, dim=-1) @ v)
    out = torch.cat(contexts, dim=-1) @ attn.o_proj.weight.to(dt).T
    if attn.o_proj.bias is not None:
        out = out + attn.o_proj.bias.to(dt)
    return out
