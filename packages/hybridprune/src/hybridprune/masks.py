"""Mask baselines at equal sparsity: ``flat_channel`` Mamba2 masks and Wanda-style unstructured masks.

Neither makes a model smaller or faster (the weights stay dense, with zeros); they are quality
references. A masked parameter keeps its zeros through :func:`hybridprune.distill` (and any
optimizer whose update is zero for a zero gradient, such as AdamW without weight decay on those
entries) because a gradient hook multiplies its gradient by the mask.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from hybridprune.importance import _batches, _check_batch, model_layout

__all__ = ["apply_masks", "count_nonzero", "flat_channel_masks", "wanda_masks", "wanda_prune"]


def apply_masks(model: nn.Module, masks: dict[str, torch.Tensor]) -> nn.Module:
    """Zero ``model``'s parameters outside ``masks`` (name -> bool tensor, True = kept), in place.

    A gradient hook keeps the zeros during training; the masks are stored as
    ``model.hybridprune_masks``. Returns ``model``.
    """
    params = dict(model.named_parameters())
    for name, mask in masks.items():
        if name not in params:
            raise ValueError(f"masks: {name!r} is not a parameter of the model")
        p = params[name]
        if mask.shape != p.shape or mask.dtype != torch.bool:
            raise ValueError(
                f"masks[{name!r}]: expected a bool tensor of shape {tuple(p.shape)}, "
                f"got {mask.dtype} {tuple(mask.shape)}"
            )
    for name, mask in masks.items():
        p = params[name]
        m = mask.to(p.device)
        with torch.no_grad():
            p.mul_(m.to(p.dtype))
        p.register_hook(lambda g, m=m: g * m.to(g.dtype))
    model.hybridprune_masks = dict(masks)
    return model


def count_nonzero(model: nn.Module) -> int:
    """Parameters that are not masked out (every parameter of an unmasked model)."""
    masks = getattr(model, "hybridprune_masks", {})
    total = 0
    for name, p in model.named_parameters():
        total += int(masks[name].sum()) if name in masks else p.numel()
    return total


def flat_channel_masks(
    model: nn.Module, mamba_x: dict[int, torch.Tensor], keep: int
) -> dict[str, torch.Tensor]:
    """Masks that keep the top ``keep`` of the H·P Mamba2 channels of every layer, ranked flat.

    The channel scores ``mamba_x[i]`` ([H, P], the student's block index ``i``) are ranked as one
    vector, ignoring heads and B/C groups (so a head may keep any number of channels). A removed
    channel c loses its ``z`` and ``x`` rows of ``in_proj``, its ``conv1d`` row, its gated-norm
    weight and its ``out_proj`` column. The gated norm still averages over the full group size
    (the zeros count), which is one reason this is only a quality reference.
    """
    family, layers = model_layout(model)
    if family != "nemotron_h":
        raise TypeError(
            f"model: flat_channel masks need a NemotronHForCausalLM, got {type(model).__name__}"
        )
    masks: dict[str, torch.Tensor] = {}
    for i, x in mamba_x.items():
        mixer = layers[i].mixer
        d_in = mixer.num_heads * mixer.head_dim
        if x.numel() != d_in:
            raise ValueError(f"mamba_x[{i}]: expected {d_in} scores, got {x.numel()}")
        if not 1 <= keep <= d_in:
            raise ValueError(f"keep: expected an int in [1, {d_in}], got {keep}")
        kept = torch.zeros(d_in, dtype=torch.bool)
        order = torch.sort(x.reshape(-1).double(), descending=True, stable=True).indices
        kept[order[:keep]] = True
        pre = f"model.layers.{i}.mixer."
        w = mixer.in_proj.weight
        rows = torch.ones(w.shape[0], dtype=torch.bool)
        rows[:d_in] = kept  # z
        rows[d_in : 2 * d_in] = kept  # x
        masks[pre + "in_proj.weight"] = rows[:, None].expand_as(w).clone()
        if mixer.in_proj.bias is not None:
            masks[pre + "in_proj.bias"] = rows.clone()
        conv = torch.ones(mixer.conv1d.weight.shape[0], dtype=torch.bool)
        conv[:d_in] = kept
        masks[pre + "conv1d.weight"] = conv[:, None, None].expand_as(mixer.conv1d.weight).clone()
        if mixer.conv1d.bias is not None:
            masks[pre + "conv1d.bias"] = conv.clone()
        masks[pre + "norm.weight"] = kept.clone()
        masks[pre + "out_proj.weight"] = kept[None, :].expand_as(mixer.out_proj.weight).clone()
    return masks


@torch.no_grad()
def wanda_masks(
    model: nn.Module, batches, sparsity: float, *, attention_mask=None
) -> dict[str, torch.Tensor]:
    """Wanda (Sun et al., 2024) masks: per output row, drop the ``sparsity`` fraction of weights
    with the lowest |W_ij|·‖X_j‖₂ (‖X_j‖ over every real calibration token of the layer's input).

    Every ``nn.Linear`` except ``lm_head`` is masked; embeddings, norms, convolutions and the
    Mamba2 per-head vectors are not (as in Wanda).
    """
    if not isinstance(sparsity, (int, float)) or not 0 <= sparsity < 1:
        raise ValueError(f"sparsity: expected a number in [0, 1), got {sparsity!r}")
    model_layout(model)
    data = [
        (ids, _check_batch(i, ids, m))
        for i, (ids, m) in enumerate(_batches(batches, attention_mask))
    ]
    if not data:
        raise ValueError("batches: no batch was given")
    linears = {
        n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"
    }
    sq = {n: torch.zeros(m.in_features, dtype=torch.float64) for n, m in linears.items()}
    current: dict[str, torch.Tensor] = {}

    def hook(name):
        def fn(module, args):
            a = args[0].detach().double()
            keep = current["mask"].to(a.device)
            sq[name] += (a.pow(2) * keep[..., None]).reshape(-1, a.shape[-1]).sum(0).cpu()

        return fn

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in linears.items()]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        for ids, mask in data:
            current["mask"] = mask.to(torch.float64)
            model(input_ids=ids.to(device), attention_mask=mask.long().to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    masks = {}
    for n, m in linears.items():
        w = m.weight.detach().double().abs().cpu()
        score = w * sq[n].sqrt()[None, :]
        drop = round(sparsity * w.shape[1])
        kept = torch.ones_like(w, dtype=torch.bool)
        if drop:
            idx = torch.sort(score, dim=1, stable=True).indices[:, :drop]
            kept.scatter_(1, idx, False)
        masks[n + ".weight"] = kept
    return masks


def wanda_prune(model: nn.Module, batches, sparsity: float, *, attention_mask=None) -> nn.Module:
    """A masked copy of ``model`` (see :func:`wanda_masks`); ``model`` is not modified."""
    masks = wanda_masks(model, batches, sparsity, attention_mask=attention_mask)
    return apply_masks(copy.deepcopy(model), masks)
