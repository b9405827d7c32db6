"""Compose a Zebra-Llama hybrid from a pretrained Llama: MLA, Mamba2 and kept-GQA layers.

:func:`compose` deep-copies a ``LlamaForCausalLM`` and swaps each layer's ``self_attn`` for an
:class:`~xecomla.MLAAttention` (SVD init), a :class:`~xecomla.Mamba2FromAttention` (attention
init) or keeps it (``gqa_layers``: the MambaInLlama baseline). The MLP, the norms, the embeddings
and the head are copied. :func:`hybrid_cache` builds the transformers ``Cache`` it decodes with: a
``DynamicLayer`` for MLA (c_kv as keys, rotated k_pe as values) and GQA layers, a
``LinearAttentionLayer`` (conv window, SSM state) for Mamba2 layers.
"""

from __future__ import annotations

import copy

from torch import nn

from .init import mamba_from_attention, mla_from_attention
from .layout import HybridLayout
from .mamba2 import Mamba2FromAttention
from .mla import MLAConfig

__all__ = ["compose", "hybrid_cache"]


def _decoder_layers(model):
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not all(hasattr(layer, "self_attn") for layer in layers):
        raise TypeError(
            f"llama: expected a transformers LlamaForCausalLM (model.layers[i].self_attn), got {type(model).__name__}"
        )
    return layers


def compose(
    llama: nn.Module,
    *,
    mla_layers,
    mla_config: MLAConfig | None,
    mamba_layers=None,
    gqa_layers=(),
    mla_init: str = "svd",
    mamba_init: str = "attention",
    rank_energy: float | None = None,
) -> nn.Module:
    """A new ``LlamaForCausalLM`` with the mixers of ``llama`` swapped (``llama`` is not modified).

    Args:
        llama: the teacher ``LlamaForCausalLM``.
        mla_layers: layers that become MLA (:func:`xecomla.init.mla_from_attention`).
        mla_config: their ranks.
        mamba_layers: layers that become Mamba2 (:func:`xecomla.init.mamba_from_attention`);
            None: every layer in neither ``mla_layers`` nor ``gqa_layers``.
        gqa_layers: layers that keep the original attention.
        mla_init: ``"svd"`` or ``"random"``; mamba_init: ``"attention"`` or ``"random"``.
        rank_energy: passed to the MLA init (energy ranks).

    Returns:
        The hybrid, with ``hybrid.hybrid_layout`` (a :class:`~xecomla.HybridLayout`) set and
        ``config.use_cache = False`` (transformers' default cache cannot hold Mamba2 states; decode
        with ``cache=hybrid_cache(hybrid)``).

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> teacher = LlamaForCausalLM(
        ...     LlamaConfig(
        ...         hidden_size=32,
        ...         num_attention_heads=4,
        ...         num_key_value_heads=2,
        ...         num_hidden_layers=4,
        ...         intermediate_size=64,
        ...         vocab_size=16,
        ...     )
        ... )
        >>> zebra = compose(teacher, mla_layers=[0, 2], mla_config=MLAConfig(16, 8, 4, 4, 8))
        >>> [type(layer.self_attn).__name__ for layer in zebra.model.layers]
        ['MLAAttention', 'Mamba2FromAttention', 'MLAAttention', 'Mamba2FromAttention']
    """
    layers = _decoder_layers(llama)
    layout = HybridLayout(
        llama.config,
        mla_layers=mla_layers,
        mla_config=mla_config,
        mamba_layers=mamba_layers,
        gqa_layers=gqa_layers,
    )
    if mla_init not in ("svd", "random"):
        raise ValueError(f"mla_init: expected 'svd' or 'random', got {mla_init!r}")
    if mamba_init not in ("attention", "random"):
        raise ValueError(f"mamba_init: expected 'attention' or 'random', got {mamba_init!r}")
    # build every new mixer first (from the teacher's own layers): a bad argument changes nothing
    mixers = {}
    for i, kind in enumerate(layout.kinds):
        if kind == "mla":
            mixers[i] = mla_from_attention(
                layers[i].self_attn, mla_config, rank_energy=rank_energy, init=mla_init
            )
        elif kind == "mamba2":
            mixers[i] = mamba_from_attention(layers[i].self_attn, init=mamba_init)
    hybrid = copy.deepcopy(llama)
    for i, mixer in mixers.items():
        hybrid.model.layers[i].self_attn = mixer
    hybrid.config.use_cache = False
    hybrid.hybrid_layout = layout
    return hybrid


def hybrid_cache(model: nn.Module):
    """The transformers ``Cache`` a hybrid from :func:`compose` decodes with.

    ``DynamicLayer`` for MLA and attention layers, ``LinearAttentionLayer`` for Mamba2 layers. An
    all-Mamba2 model is refused: transformers' Cache counts positions on an attention layer.
    """
    from transformers.cache_utils import Cache, DynamicLayer, LinearAttentionLayer

    kinds = [isinstance(layer.self_attn, Mamba2FromAttention) for layer in _decoder_layers(model)]
    if all(kinds):
        raise ValueError(
            "model: an all-Mamba2 model has no attention layer for transformers' Cache to count positions on"
        )
    return Cache(
        layers=[LinearAttentionLayer() if is_mamba else DynamicLayer() for is_mamba in kinds]
    )
