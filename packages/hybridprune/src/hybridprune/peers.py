"""The peer a user would try instead: torch-pruning's DepGraph (``pip install hybridprune[peers]``).

torch-pruning 1.6.1 cannot build a dependency graph through transformers' NemotronH Mamba2 mixer
or its GQA attention (``ZeroDivisionError`` in its repeat index mapping, measured here), so the
usable configuration ignores every Mamba2 and attention mixer; DepGraph then prunes the FFN
neurons only (the embedding width is coupled to the ignored layers and stays). On a Llama the
same call prunes the gated FFN (attention ignored).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from hybridprune.importance import model_layout

__all__ = ["torch_pruning_available", "torch_pruning_ffn"]


def torch_pruning_available() -> bool:
    """Whether ``torch_pruning`` imports."""
    try:
        import torch_pruning  # noqa: F401
    except ImportError:
        return False
    return True


def _n(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def torch_pruning_ffn(
    model: nn.Module, example_ids: torch.Tensor, params: int
) -> tuple[nn.Module, dict]:
    """Prune a copy of ``model`` with torch-pruning's ``MetaPruner`` (L2 magnitude) toward ``params``.

    First tries the whole model (recording the error DepGraph raises), then ignores the Mamba2 and
    attention mixers and ``lm_head`` and sets the per-layer FFN ratio that brings the count
    closest to ``params`` (at most 0.95 of the neurons go). Returns ``(pruned copy, info)``;
    ``info`` has ``params`` (the real count), ``ffn_ratio`` and ``full_graph_error``.
    """
    import torch_pruning as tp

    family, _ = model_layout(model)
    info: dict = {"full_graph_error": None}
    probe = copy.deepcopy(model).eval()
    try:
        tp.pruner.MetaPruner(
            probe,
            example_ids,
            importance=tp.importance.MagnitudeImportance(p=2),
            pruning_ratio=0.5,
            ignored_layers=[probe.lm_head],
            output_transform=lambda o: o.logits.sum(),
        ).step()
        info["full_graph_error"] = "none (whole model pruned)"
    except Exception as exc:  # torch-pruning's own failure is the finding we report
        info["full_graph_error"] = f"{type(exc).__name__}: {exc}"
    del probe
    student = copy.deepcopy(model).eval()
    if family == "llama":
        mlps = [blk.mlp for blk in student.model.layers]
        ignored = [blk.self_attn for blk in student.model.layers]
    else:
        mlps = [blk.mixer for blk in student.model.layers if hasattr(blk.mixer, "down_proj")]
        ignored = [blk.mixer for blk in student.model.layers if not hasattr(blk.mixer, "down_proj")]
    ffn_params = sum(p.numel() for m in mlps for p in m.parameters())
    ratio = min(0.95, max(0.0, (_n(student) - params) / max(ffn_params, 1)))
    pruner = tp.pruner.MetaPruner(
        student,
        example_ids,
        importance=tp.importance.MagnitudeImportance(p=2),
        pruning_ratio=ratio,
        ignored_layers=[student.lm_head, *ignored],
        output_transform=lambda o: o.logits.sum(),
    )
    pruner.step()
    sizes = {m.down_proj.in_features for m in mlps}
    if len(sizes) == 1:
        student.config.intermediate_size = sizes.pop()
    info.update(params=_n(student), ffn_ratio=ratio)
    return student, info
