"""The per-token, per-layer decode cost model of the spec (§6)."""

from __future__ import annotations

__all__ = ["decode_cost"]


def decode_cost(d: int, d_kv: int, context: int, bytes_per_elem: int = 2) -> dict[str, float]:
    """FLOPs and bytes of one attention decode step vs the NBL map at context ``context``.

    Attention: ``2(2d² + 2d·d_kv) + 4·T·d`` FLOPs and ``(2d² + 2d·d_kv)·s + 2·T·d_kv·s`` bytes
    (weights plus the K and V reads, ``s`` bytes per element); NBL: ``2d²`` FLOPs, ``d²·s`` bytes.

    Example:
        >>> c = decode_cost(4096, 1024, 2048)
        >>> round(c["flop_ratio"], 2), round(c["byte_ratio"], 2)
        (3.5, 2.75)
    """
    for name, v in (("d", d), ("d_kv", d_kv), ("context", context)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    proj = 2 * d * d + 2 * d * d_kv
    attn_flops = 2 * proj + 4 * context * d
    attn_bytes = (proj + 2 * context * d_kv) * bytes_per_elem
    nbl_flops = 2 * d * d
    nbl_bytes = d * d * bytes_per_elem
    return {
        "attn_flops": attn_flops,
        "nbl_flops": nbl_flops,
        "attn_bytes": attn_bytes,
        "nbl_bytes": nbl_bytes,
        "flop_ratio": attn_flops / nbl_flops,
        "byte_ratio": attn_bytes / nbl_bytes,
    }
