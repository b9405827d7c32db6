"""``solve``: the size of each arm that lands nearest a common trainable-parameter budget."""

from __future__ import annotations

__all__ = ["KINDS", "count", "solve"]

KINDS = ("pt", "dpt", "ptmoe", "smop", "lora")


def count(kind: str, value: int, H: int, T: int, num_experts: int = 2, lora_dims: int = 0) -> int:
    """Trainable parameters of ``kind`` at size ``value`` (T for pt/smop's T_short, R, or r).

    * pt: ``T·H`` (``value`` is T); dpt: ``T·R + R·H``; ptmoe: ``N·T·R + R·H + N·H + N``;
      smop: ``N·T_short·H + N·H`` (bias-free router); lora: ``r·lora_dims`` where ``lora_dims`` is
      ``Σ (d_in + d_out)`` over the targeted linears.
    """
    n = num_experts
    if kind == "pt":
        return value * H
    if kind == "dpt":
        return T * value + value * H
    if kind == "ptmoe":
        return n * T * value + value * H + n * H + n
    if kind == "smop":
        return n * value * H + n * H
    if kind == "lora":
        return value * lora_dims
    raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")


def solve(
    kind: str,
    target_params: int,
    H: int,
    T: int,
    num_experts: int = 2,
    lora_dims: int = 0,
    tolerance: float = 0.05,
) -> dict:
    """The size of ``kind`` whose parameter count is nearest ``target_params``, within ±tolerance.

    R is searched in ``[1, min(T, H)]`` (the SVD init's bound), T (pt) and T_short (smop) in
    ``[1, 4·T]``, r in ``[1, 256]``.

    Returns:
        ``{"kind", "value", "params", "relative"}`` with ``relative = params / target − 1``.

    Raises:
        ValueError: no size lands within ±tolerance (the message gives the two nearest).

    Example:
        >>> solve("ptmoe", 5120, H=128, T=40, num_experts=2)["value"]
        23
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    for name, v in (
        ("target_params", target_params),
        ("H", H),
        ("T", T),
        ("num_experts", num_experts),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if kind == "lora" and lora_dims < 1:
        raise ValueError("lora_dims: kind='lora' needs Σ (d_in + d_out) over the targeted linears")
    upper = {"pt": 4 * T, "smop": 4 * T, "dpt": min(T, H), "ptmoe": min(T, H), "lora": 256}[kind]
    sizes = sorted(
        range(1, upper + 1),
        key=lambda v: abs(count(kind, v, H, T, num_experts, lora_dims) - target_params),
    )
    best = sizes[0]
    params = count(kind, best, H, T, num_experts, lora_dims)
    relative = params / target_params - 1
    if abs(relative) > tolerance:
        near = ", ".join(
            f"{v} -> {count(kind, v, H, T, num_experts, lora_dims)}" for v in sorted(sizes[:2])
        )
        raise ValueError(
            f"target_params: no {kind} size lands within ±{tolerance:.0%} of {target_params} "
            f"(nearest: {near})"
        )
    return {"kind": kind, "value": best, "params": params, "relative": relative}
