"""The transformers integration: parameterize a ``LlamaForCausalLM`` in place, or build the
hook-free ``GraniteForCausalLM`` that computes the same function, and AdamW parameter groups.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch
from torch import nn

from completep.params import GROUPS, Multipliers, ParamConfig, multipliers

__all__ = [
    "ParameterizationHandle",
    "from_llama_config",
    "param_groups",
    "parameterize",
    "scaled_config",
    "to_granite_config",
]

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass
class _Structure:
    embed: nn.Embedding
    layers: list[nn.Module]
    final_norm: nn.Module
    lm_head: nn.Linear
    width: int
    depth: int
    head_dim: int


def _structure(model: Any) -> _Structure:
    """Find the Llama-like modules by structure; TypeError naming ``model`` when they are absent."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    inner = getattr(model, "model", None)
    missing = [
        name
        for name, owner in (
            ("model.model", model),
            ("model.lm_head", model),
            ("model.config", model),
        )
        if not hasattr(owner, name.split(".")[-1])
    ]
    if inner is not None:
        missing += [
            f"model.model.{n}" for n in ("embed_tokens", "layers", "norm") if not hasattr(inner, n)
        ]
    if missing:
        raise TypeError(
            f"model: expected a Llama-like causal LM (LlamaForCausalLM or GraniteForCausalLM), "
            f"{type(model).__name__} lacks {', '.join(missing)}"
        )
    layers = list(inner.layers)
    for i, layer in enumerate(layers):
        need = [f"self_attn.{n}" for n in _ATTENTION] + [f"mlp.{n}" for n in _MLP]
        need += ["input_layernorm", "post_attention_layernorm"]
        absent = [n for n in need if _get(layer, n) is None]
        if absent:
            raise TypeError(
                f"model: decoder layer {i} is not Llama-like, it lacks {', '.join(absent)}"
            )
    if not isinstance(inner.embed_tokens, nn.Embedding) or not isinstance(model.lm_head, nn.Linear):
        raise TypeError("model: expected nn.Embedding embed_tokens and an nn.Linear lm_head")
    config = model.config
    width = int(config.hidden_size)
    head_dim = getattr(config, "head_dim", None) or width // config.num_attention_heads
    if len(layers) == 0:
        raise TypeError("model: has no decoder layers")
    return _Structure(
        inner.embed_tokens, layers, inner.norm, model.lm_head, width, len(layers), int(head_dim)
    )


def _get(module: nn.Module, dotted: str) -> nn.Module | None:
    for part in dotted.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def _group_of_parameters(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> Table 1 group, for every parameter the structure knows."""
    s = _structure(model)
    out: dict[int, str] = {}

    def put(p: nn.Parameter | None, group: str) -> None:
        if p is not None:
            out.setdefault(id(p), group)

    put(s.embed.weight, "embedding")
    for layer in s.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            for p in norm.parameters(recurse=False):
                put(p, "block_norm")
        for name in [f"self_attn.{n}" for n in _ATTENTION] + [f"mlp.{n}" for n in _MLP]:
            linear = _get(layer, name)
            put(linear.weight, "hidden_weight")
            put(linear.bias, "hidden_bias")
    for p in s.final_norm.parameters(recurse=False):
        put(p, "final_norm")
    put(s.lm_head.weight, "unembedding")
    put(s.lm_head.bias, "unembedding")
    return out


def _tied(s: _Structure) -> bool:
    return s.lm_head.weight is s.embed.weight


@torch.no_grad()
def reinitialize(
    model: nn.Module, cfg: ParamConfig, generator: torch.Generator | None = None
) -> None:
    """Table 1 init in place: embedding/unembedding N(0, σ²), hidden N(0, σ²/m_N), norms ones, biases 0."""
    s = _structure(model)
    m = multipliers(cfg, s.width, s.depth)
    groups = _group_of_parameters(model)
    seen: set[int] = set()
    for _, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        group = groups.get(id(p))
        if group is None:
            continue
        std = m.groups[group].init_std
        if group in ("block_norm", "final_norm"):
            # RMSNorm gains are ones; a LayerNorm bias (1-D, named bias) would be zeros.
            p.fill_(1.0)
        elif std is None or p.dim() == 1:
            p.zero_()
        else:
            nn.init.normal_(p, mean=0.0, std=std, generator=generator)


class ParameterizationHandle:
    """What :func:`parameterize` returns: the multipliers in force and :meth:`remove`."""

    def __init__(self, model: nn.Module, cfg: ParamConfig, mult: Multipliers) -> None:
        self.model = model
        self.cfg = cfg
        self.multipliers = mult
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []
        self._old_scaling: list[tuple[nn.Module, float]] = []

    def remove(self) -> None:
        """Drop the hooks, restore the attention scales and forget the parameterization."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        for attn, scaling in self._old_scaling:
            attn.scaling = scaling
        self._old_scaling.clear()
        if getattr(self.model, "_completep_handle", None) is self:
            del self.model._completep_handle
        if hasattr(self.model.config, "parameterization"):
            del self.model.config.parameterization


def _scale_output(factor: float):
    def hook(module, args, output):
        return output * factor

    return hook


def _scale_input(factor: float):
    def hook(module, args):
        return (args[0] * factor, *args[1:])

    return hook


def parameterize(
    model: nn.Module,
    cfg: ParamConfig,
    reinit: bool = True,
    generator: torch.Generator | None = None,
) -> ParameterizationHandle:
    """Apply ``cfg`` to a Llama-like causal LM in place.

    Re-initializes per Table 1 (unless ``reinit=False``, e.g. to keep a checkpoint trained under
    the same parameterization), multiplies each ``o_proj``/``down_proj`` output by m_L^-α, the
    embedding output by α_in and the ``lm_head`` input by α_out/m_N with forward hooks (never folded
    into the weights: that would change Adam's effective step), sets every attention's ``scaling``
    to 1/head_dim (μP family; SP keeps 1/√head_dim) and stores ``cfg`` in
    ``model.config.parameterization``. Call it after ``from_pretrained``/``post_init``: those
    re-initialize.

    Args:
        model: a ``LlamaForCausalLM`` (or anything with its module structure).
        cfg: the parameterization.
        reinit: re-initialize the weights per Table 1.
        generator: optional RNG for the re-initialization.

    Returns:
        A :class:`ParameterizationHandle`; ``handle.remove()`` drops the hooks.

    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=4, num_heads=2))
    >>> handle = parameterize(model, ParamConfig(kind="completep", base_width=32, base_depth=2))
    >>> handle.multipliers.residual
    0.5
    >>> handle.remove()
    """
    if not isinstance(cfg, ParamConfig):
        raise TypeError(f"cfg: expected a ParamConfig, got {type(cfg).__name__}")
    s = _structure(model)
    if getattr(model, "_completep_handle", None) is not None:
        raise ValueError(
            "model: is already parameterized; call handle.remove() before parameterize again"
        )
    if getattr(model.config, "model_type", None) == "granite":
        raise ValueError(
            "model: a GraniteForCausalLM carries its multipliers in its config; "
            "use from_llama_config instead of hooks"
        )
    m = multipliers(cfg, s.width, s.depth)
    if reinit:
        reinitialize(model, cfg, generator)
    handle = ParameterizationHandle(model, cfg, m)
    for layer in s.layers:
        handle._hooks.append(
            layer.self_attn.o_proj.register_forward_hook(_scale_output(m.residual))
        )
        handle._hooks.append(layer.mlp.down_proj.register_forward_hook(_scale_output(m.residual)))
        attn = layer.self_attn
        handle._old_scaling.append((attn, attn.scaling))
        attn.scaling = m.attention_scale(s.head_dim)
    handle._hooks.append(s.embed.register_forward_hook(_scale_output(m.embedding)))
    handle._hooks.append(s.lm_head.register_forward_pre_hook(_scale_input(m.logits)))
    model._completep_handle = handle
    model.config.parameterization = dataclasses.asdict(cfg)
    return handle


def param_groups(
    model: nn.Module,
    cfg: ParamConfig,
    lr: float,
    weight_decay: float = 0.1,
    eps: float = 1e-12,
) -> list[dict[str, Any]]:
    """AdamW parameter groups with Table 1's per-group LR, weight decay and ε.

    Every trainable parameter appears exactly once (a tied ``lm_head`` counts as the embedding).
    Each group carries ``lr_scale`` (its lr / ``lr``) and ``name``: schedulers built on
    ``LambdaLR`` (HF's included) multiply each group's own initial lr and keep the ratios; a loop
    that writes one lr into every group must write ``lr * group["lr_scale"]`` instead.

    Args:
        model: the (parameterized) Llama-like model; its width and depth come from its config.
        cfg: the parameterization.
        lr: base learning rate η.
        weight_decay: base decoupled-in-name, coupled-in-PyTorch weight decay λ.
        eps: base AdamW ε.

    Returns:
        A list of dicts for ``torch.optim.AdamW``; empty groups are left out.

    Raises:
        ValueError: a trainable parameter outside the Table 1 groups (named).
    """
    if not isinstance(cfg, ParamConfig):
        raise TypeError(f"cfg: expected a ParamConfig, got {type(cfg).__name__}")
    for name, value in (("lr", lr), ("weight_decay", weight_decay), ("eps", eps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    s = _structure(model)
    m = multipliers(cfg, s.width, s.depth)
    known = _group_of_parameters(model)
    buckets: dict[str, list[nn.Parameter]] = {g: [] for g in GROUPS}
    for pname, p in model.named_parameters():  # remove_duplicate=True: tied weights once
        if not p.requires_grad:
            continue
        group = known.get(id(p))
        if group is None:
            raise ValueError(
                f"model: parameter {pname!r} is in none of the Table 1 groups {GROUPS}; "
                "freeze it or give it its own optimizer group"
            )
        buckets[group].append(p)
    out = []
    for group in GROUPS:
        if not buckets[group]:
            continue
        scale = m.groups[group]
        out.append(
            {
                "params": buckets[group],
                "lr": lr * scale.lr,
                "weight_decay": weight_decay * scale.weight_decay,
                "eps": eps * scale.eps,
                "lr_scale": scale.lr,
                "name": group,
            }
        )
    return out


def scaled_config(base_config: Any, hidden_size: int, num_layers: int) -> Any:
    """A copy of ``base_config`` at another width and depth, keeping head_dim and the FFN ratio.

    >>> from neurips25_core.models import tiny_llama_config
    >>> c = scaled_config(
    ...     tiny_llama_config(hidden_size=64, num_heads=4, intermediate_size=256), 128, 8
    ... )
    >>> c.num_attention_heads, c.intermediate_size, c.num_hidden_layers
    (8, 512, 8)
    """
    for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name}: expected an int > 0, got {value}")
    base_width = base_config.hidden_size
    head_dim = (
        getattr(base_config, "head_dim", None) or base_width // base_config.num_attention_heads
    )
    if hidden_size % head_dim:
        raise ValueError(f"hidden_size: {hidden_size} is not a multiple of head_dim={head_dim}")
    heads = hidden_size // head_dim
    group = base_config.num_attention_heads // base_config.num_key_value_heads
    if heads % group:
        raise ValueError(
            f"hidden_size: {heads} heads are not divisible by the base GQA group size {group}"
        )
    ffn = base_config.intermediate_size * hidden_size
    if ffn % base_width:
        raise ValueError(
            f"hidden_size: the FFN ratio gives a fractional intermediate size {ffn / base_width}"
        )
    config = copy.deepcopy(base_config)
    config.hidden_size = hidden_size
    config.num_hidden_layers = num_layers
    config.num_attention_heads = heads
    config.num_key_value_heads = heads // group
    config.intermediate_size = ffn // base_width
    config.head_dim = head_dim
    if hasattr(config, "layer_types") and config.layer_types is not None:
        config.layer_types = [config.layer_types[0]] * num_layers
    return config


def to_granite_config(llama_config: Any, cfg: ParamConfig) -> Any:
    """The ``GraniteConfig`` whose model computes what a Llama parameterized by ``cfg`` computes.

    ``residual_multiplier`` = m_L^-α, ``embedding_multiplier`` = α_in, ``logits_scaling`` =
    m_N/α_out (Granite divides the logits by it) and ``attention_multiplier`` = the attention scale.
    The parameterization is stored in ``config.parameterization``, so it survives
    ``save_pretrained``/``from_pretrained``.
    """
    from transformers import GraniteConfig

    if not isinstance(cfg, ParamConfig):
        raise TypeError(f"cfg: expected a ParamConfig, got {type(cfg).__name__}")
    if getattr(llama_config, "model_type", None) != "llama":
        raise TypeError(f"llama_config: expected a LlamaConfig, got {type(llama_config).__name__}")
    width = llama_config.hidden_size
    depth = llama_config.num_hidden_layers
    head_dim = getattr(llama_config, "head_dim", None) or width // llama_config.num_attention_heads
    m = multipliers(cfg, width, depth)
    fields = llama_config.to_dict()
    for drop in (
        "model_type",
        "architectures",
        "transformers_version",
        "parameterization",
        "head_dim",
        "mlp_bias",
    ):
        fields.pop(drop, None)
    fields.update(
        residual_multiplier=m.residual,
        embedding_multiplier=m.embedding,
        logits_scaling=1.0 / m.logits,
        attention_multiplier=m.attention_scale(head_dim),
        initializer_range=cfg.sigma_base,
    )
    config = GraniteConfig(**fields)
    if getattr(llama_config, "head_dim", None) not in (
        None,
        width // llama_config.num_attention_heads,
    ):
        raise ValueError(
            "llama_config: Granite derives head_dim from hidden_size/heads; a custom head_dim is not supported"
        )
    config.parameterization = dataclasses.asdict(cfg)
    return config


def from_llama_config(llama_config: Any, cfg: ParamConfig, seed: int = 0) -> nn.Module:
    """A ``GraniteForCausalLM`` built from ``llama_config`` under ``cfg``, initialized per Table 1.

    The hook-free twin of ``parameterize(LlamaForCausalLM(llama_config), cfg)``; it serializes
    with ``save_pretrained`` and loads back with ``GraniteForCausalLM.from_pretrained`` (which
    refuses weights of another shape).
    """
    from transformers import GraniteForCausalLM

    config = to_granite_config(llama_config, cfg)
    model = GraniteForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    reinitialize(model, cfg, generator)
    return model
