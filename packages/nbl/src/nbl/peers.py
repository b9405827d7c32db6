"""The structured-pruning peer: data-free attention-head pruning with torch-pruning.

A user who wants fewer attention parameters without calibration data would reach for
`torch-pruning <https://github.com/VainF/Torch-Pruning>`_ (DepGraph, CVPR 2023) and its LLM
recipe: remove whole heads, ranked by L2 weight magnitude (``GroupMagnitudeImportance(p=2,
group_reduction="mean")``), head dims untouched so RoPE is unchanged. With grouped-query attention
the unit that can go is one KV head together with the query heads that read it (q rows, k rows,
v rows, o columns).

torch-pruning's ``DependencyGraph.get_pruning_group`` does not return on transformers 5.x Llama
attention here (no result after 120 s on a 1-layer width-64 model; the graph itself builds in
0.5 s), so this module does the grouping itself and calls torch-pruning's own pruning functions
(``prune_linear_out_channels`` / ``prune_linear_in_channels``) for the surgery. Ranking is global
across layers; a layer that loses every KV group has its attention removed (Attn-DROP of that
layer, its input norm included).
"""

from __future__ import annotations

import torch

from .model import _layers, apply_drop

__all__ = ["head_groups", "prune_attention_heads"]


def head_groups(model) -> list[dict]:
    """One entry per (layer, KV head): its parameter count and L2-magnitude importance."""
    decoder = _layers(model)
    out = []
    for i, lay in enumerate(decoder):
        a = lay.self_attn
        if not hasattr(a, "q_proj"):
            continue
        hd = a.head_dim
        n_kv = a.k_proj.out_features // hd
        g = a.q_proj.out_features // a.k_proj.out_features
        for j in range(n_kv):
            q = slice(j * g * hd, (j + 1) * g * hd)
            kv = slice(j * hd, (j + 1) * hd)
            ws = [
                a.q_proj.weight[q],
                a.k_proj.weight[kv],
                a.v_proj.weight[kv],
                a.o_proj.weight[:, q].T,
            ]
            # torch-pruning's GroupMagnitudeImportance(p=2, "mean"): per-channel squared L2
            # norm, averaged over the coupled layers, then over the group's channels.
            imp = torch.stack([w.detach().double().pow(2).sum(1).mean() for w in ws]).mean()
            n = sum(w.numel() for w in ws)
            for lin in (a.q_proj, a.k_proj, a.v_proj):
                if lin.bias is not None:
                    n += lin.bias[q if lin is a.q_proj else kv].numel()
            out.append({"layer": i, "kv_head": j, "params": n, "importance": float(imp)})
    return out


def prune_attention_heads(model, n_params: int, rounding: str = "nearest") -> dict:
    """Remove the least important KV-head groups (globally) until about ``n_params`` are gone.

    Groups come whole, so the count rarely matches: ``rounding="nearest"`` takes the number of
    groups whose removed count is closest to ``n_params``, ``"down"`` the most groups removing at
    most ``n_params``, ``"up"`` the fewest removing at least ``n_params`` (always at least one
    group, at most all). In place; returns ``{"removed": exact count, "groups": [(layer,
    kv_head), ...]}``. Raises ``ImportError`` when torch-pruning is not installed.
    """
    import torch_pruning as tp

    if not isinstance(n_params, int) or isinstance(n_params, bool) or n_params < 1:
        raise ValueError(f"n_params: expected a positive int, got {n_params!r}")
    if rounding not in ("nearest", "down", "up"):
        raise ValueError(f"rounding: expected 'nearest', 'down' or 'up', got {rounding!r}")
    groups = sorted(head_groups(model), key=lambda r: r["importance"])
    if not groups:
        raise ValueError("model: no attention heads left to prune")
    before = sum(p.numel() for p in model.parameters())
    cums, cum = [], 0
    for r in groups:
        cum += r["params"]
        cums.append(cum)
    if rounding == "nearest":
        best = min(range(len(cums)), key=lambda i: abs(cums[i] - n_params)) + 1
    elif rounding == "down":
        best = max(1, sum(c <= n_params for c in cums))
    else:
        best = next((i + 1 for i, c in enumerate(cums) if c >= n_params), len(cums))
    chosen = groups[:best]
    decoder = _layers(model)
    by_layer: dict[int, list[int]] = {}
    for r in chosen:
        by_layer.setdefault(r["layer"], []).append(r["kv_head"])
    drop = []
    for i, heads in by_layer.items():
        a = decoder[i].self_attn
        hd, n_kv = a.head_dim, a.k_proj.out_features // a.head_dim
        if len(heads) == n_kv:
            drop.append(i)
            continue
        g = a.q_proj.out_features // a.k_proj.out_features
        q_idx = [c for j in heads for c in range(j * g * hd, (j + 1) * g * hd)]
        kv_idx = [c for j in heads for c in range(j * hd, (j + 1) * hd)]
        tp.prune_linear_out_channels(a.q_proj, q_idx)
        tp.prune_linear_out_channels(a.k_proj, kv_idx)
        tp.prune_linear_out_channels(a.v_proj, kv_idx)
        tp.prune_linear_in_channels(a.o_proj, q_idx)
        # Whole GQA groups go, so num_key_value_groups and head_dim stay valid.
    if drop:
        apply_drop(model, sorted(drop))
    removed = before - sum(p.numel() for p in model.parameters())
    return {"removed": removed, "groups": [(r["layer"], r["kv_head"]) for r in chosen]}
