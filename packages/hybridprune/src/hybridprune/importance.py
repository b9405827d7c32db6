"""Activation-based importance (Minitron): forward hooks on calibration batches, no gradients.

For an activation a[b, t, c]: m[b, c] = mean over the *non-padding* tokens t of |a[b, t, c]|, the
squares Σ_b m[b, c]² are accumulated over all batches (float64), and score_c = sqrt(total). The mean
is per sequence, so the score does not depend on how sequences are split into batches. Under
torch.distributed the accumulators are all-reduced (summed) before the square root, so every rank
gets the scores of the union of its calibration shards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["Importance", "collect_importance", "model_layout"]


@dataclass
class Importance:
    """Per-layer importance scores (float32, on the CPU), keyed by block index.

    Attributes:
        ffn: block index -> [intermediate_size], the input of ``down_proj``.
        attn_heads: block index -> [num_attention_heads], the L2 norm over each head's d_h scores of
            the input of ``o_proj``.
        mamba_x: block index -> [H, P], the ``x`` segment of the Mamba2 ``in_proj`` output.
        hidden: [hidden_size], the output of every block pre-norm, one score vector per norm, summed.
        depth: [num_blocks], block importance: the mean over all non-padding calibration tokens of
            1 - cos(block input, block output) (the spec's sum over equal-sized batches of per-batch
            means, divided by the number of batches: the same ranking, and independent of batching).
        tokens: the number of non-padding calibration tokens seen.
    """

    ffn: dict[int, torch.Tensor] = field(default_factory=dict)
    attn_heads: dict[int, torch.Tensor] = field(default_factory=dict)
    mamba_x: dict[int, torch.Tensor] = field(default_factory=dict)
    hidden: torch.Tensor | None = None
    depth: torch.Tensor | None = None
    tokens: int = 0


def _supported():
    from transformers import (
        LlamaForCausalLM,
        Mamba2ForCausalLM,
        NemotronHForCausalLM,
        Qwen2ForCausalLM,
    )

    return NemotronHForCausalLM, (LlamaForCausalLM, Qwen2ForCausalLM), Mamba2ForCausalLM


def model_layout(model: object) -> tuple[str, nn.ModuleList]:
    """``(family, blocks)`` of a supported model: family is ``"nemotron_h"``, ``"llama"`` or ``"mamba2"``.

    Raises ``TypeError`` naming ``model`` for anything else.
    """
    nemotron, llamas, mamba2 = _supported()
    if isinstance(model, nemotron):
        return "nemotron_h", model.model.layers
    if isinstance(model, llamas):
        return "llama", model.model.layers
    if isinstance(model, mamba2):
        return "mamba2", model.backbone.layers
    raise TypeError(
        "model: expected a transformers NemotronHForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM or "
        f"Mamba2ForCausalLM, got {type(model).__name__}"
    )


class _Acc:
    """Σ_b m[b, c]² for one hooked activation (float64)."""

    def __init__(self) -> None:
        self.sq: torch.Tensor | None = None

    def add(self, a: torch.Tensor, mask: torch.Tensor) -> None:
        a = a.detach()
        a = a.to(torch.float64) if a.dtype == torch.float64 else a.float()
        w = mask.to(a.dtype)  # [B, T]
        n = w.sum(1).clamp_min(1.0)  # a sequence with no token contributes m = 0
        m = torch.einsum("bt,btc->bc", w, a.abs()) / n[:, None]
        s = m.to(torch.float64).pow(2).sum(0)
        self.sq = s if self.sq is None else self.sq + s


def _batches(batches, attention_mask):
    if isinstance(batches, torch.Tensor):
        yield batches, attention_mask
        return
    if attention_mask is not None and isinstance(attention_mask, torch.Tensor):
        raise ValueError(
            "attention_mask: a single mask tensor goes with a single input_ids tensor as batches"
        )
    masks = iter(attention_mask) if attention_mask is not None else None
    for i, b in enumerate(batches):
        m = next(masks, None) if masks is not None else None
        if isinstance(b, Mapping):
            if "input_ids" not in b:
                raise ValueError(f"batches: item {i} is a mapping without 'input_ids'")
            if m is not None and b.get("attention_mask") is not None:
                raise ValueError(
                    f"attention_mask: item {i} has a mask both in the batch and in attention_mask"
                )
            yield b["input_ids"], b.get("attention_mask", m)
        else:
            yield b, m


def _check_batch(i: int, ids: object, mask: object) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(
            f"batches: item {i} must be an integer tensor [batch, seq] of token ids, got {ids!r:.80}"
        )
    if ids.ndim != 2 or ids.numel() == 0:
        raise ValueError(f"batches: item {i} must have shape [batch, seq], got {tuple(ids.shape)}")
    if mask is None:
        return torch.ones_like(ids, dtype=torch.bool)
    if not isinstance(mask, torch.Tensor) or mask.shape != ids.shape:
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"attention_mask: item {i} must have the shape {tuple(ids.shape)} of its input_ids, got {shape}"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"attention_mask: item {i} must hold only 0 and 1")
    return mask.bool()


def _hidden_of(out):
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def collect_importance(model: nn.Module, batches, *, attention_mask=None) -> Importance:
    """Activation importance of every FFN neuron, attention head, Mamba2 x channel, embedding
    channel and block of ``model`` on calibration ``batches`` (Minitron's aggregator).

    Args:
        model: ``NemotronHForCausalLM``, ``LlamaForCausalLM``/``Qwen2ForCausalLM`` or ``Mamba2ForCausalLM``.
        batches: one ``[batch, seq]`` token-id tensor, or an iterable of them or of mappings with
            ``input_ids`` and optionally ``attention_mask`` (1 = token, 0 = padding).
        attention_mask: the mask of a single ``batches`` tensor, or an iterable parallel to ``batches``.

    Padding tokens are left out of every mean (the official code packs sequences, so it has none).
    The model is run in eval mode without a cache and left as it was.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> cfg = LlamaConfig(
        ...     vocab_size=32,
        ...     hidden_size=16,
        ...     intermediate_size=24,
        ...     num_hidden_layers=2,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ... )
        >>> imp = collect_importance(LlamaForCausalLM(cfg), torch.randint(0, 32, (2, 5)))
        >>> imp.ffn[0].shape, imp.attn_heads[1].shape, imp.hidden.shape, imp.depth.shape
        (torch.Size([24]), torch.Size([4]), torch.Size([16]), torch.Size([2]))
    """
    family, blocks = model_layout(model)
    accs: dict[tuple[str, int], _Acc] = {}
    depth_sum = torch.zeros(len(blocks), dtype=torch.float64)
    state: dict[str, torch.Tensor] = {}
    handles = []

    def act_hook(key, fn):
        acc = accs.setdefault(key, _Acc())

        def hook(module, args, out):
            acc.add(fn(args, out), state["mask"])

        return hook

    def block_hook(i):
        def hook(module, args, kwargs, out):
            h_in = args[0] if args else kwargs["hidden_states"]
            h_out = _hidden_of(out)
            cos = torch.nn.functional.cosine_similarity(h_in.double(), h_out.double(), dim=-1)
            depth_sum[i] += ((1.0 - cos) * state["mask"].double()).sum()

        return hook

    for i, blk in enumerate(blocks):
        handles.append(blk.register_forward_hook(block_hook(i), with_kwargs=True))
        if family == "llama":
            norms = [("hidden", blk.input_layernorm), ("hidden_post", blk.post_attention_layernorm)]
            mixers = [("attn", blk.self_attn), ("ffn", blk.mlp)]
        else:
            norms = [("hidden", blk.norm)]
            kind = (
                "mamba"
                if family == "mamba2"
                else {"linear_attention": "mamba", "full_attention": "attn", "mlp": "ffn"}.get(
                    blk.block_type
                )
            )
            if kind is None:
                raise TypeError(
                    f"model: block {i} has the unsupported type {blk.block_type!r} (MoE is not supported)"
                )
            mixers = [(kind, blk.mixer)]
        for name, norm in norms:
            handles.append(norm.register_forward_hook(act_hook((name, i), lambda a, o: o)))
        for kind, mod in mixers:
            if kind == "ffn":
                handles.append(
                    mod.down_proj.register_forward_hook(act_hook(("ffn", i), lambda a, o: a[0]))
                )
            elif kind == "attn":
                handles.append(
                    mod.o_proj.register_forward_hook(act_hook(("attn", i), lambda a, o: a[0]))
                )
            else:
                d_in = mod.num_heads * mod.head_dim

                def x_seg(a, o, d_in=d_in):
                    return o[..., d_in : 2 * d_in]

                handles.append(mod.in_proj.register_forward_hook(act_hook(("mamba", i), x_seg)))

    was_training = model.training
    model.eval()
    n_tokens = torch.zeros((), dtype=torch.float64)
    device = next(model.parameters()).device
    try:
        n_seen = 0
        for i, (ids, mask) in enumerate(_batches(batches, attention_mask)):
            mask = _check_batch(i, ids, mask)
            state["mask"] = mask.to(device)
            model(input_ids=ids.to(device), attention_mask=mask.long().to(device), use_cache=False)
            n_tokens += mask.sum()
            n_seen += 1
        if n_seen == 0:
            raise ValueError("batches: no calibration batch was given")
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)

    keys = sorted(accs)
    flat = [accs[k].sq.cpu() for k in keys] + [depth_sum, n_tokens.reshape(1)]
    if (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    ):
        sizes = [t.numel() for t in flat]
        buf = torch.cat([t.reshape(-1) for t in flat]).to(device)
        torch.distributed.all_reduce(buf)
        flat = list(buf.cpu().split(sizes))
    sq = dict(zip(keys, flat[: len(keys)], strict=True))
    depth_sum, n_tokens = flat[-2], flat[-1].reshape(())

    imp = Importance(tokens=int(n_tokens))
    hidden = None
    for (name, i), total in sq.items():
        score = total.reshape(-1).sqrt()
        if name.startswith("hidden"):
            hidden = score if hidden is None else hidden + score
        elif name == "ffn":
            imp.ffn[i] = score.float()
        elif name == "attn":
            attn = blocks[i].self_attn if family == "llama" else blocks[i].mixer
            imp.attn_heads[i] = score.view(-1, attn.head_dim).norm(dim=1).float()
        else:
            mixer = blocks[i].mixer
            imp.mamba_x[i] = score.view(mixer.num_heads, mixer.head_dim).float()
    imp.hidden = hidden.float()
    imp.depth = (depth_sum / n_tokens.clamp_min(1.0)).float()
    return imp
