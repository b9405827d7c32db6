"""Structured pruning of a transformers NemotronH hybrid (and, attention-only, Llama/Qwen2): a new model from an edited config plus
sliced weights (width: embedding channels, FFN neurons, attention heads, Mamba2 heads and head
channels; depth: whole blocks).

``prune`` = rank (``hybridprune.ranking``) + ``apply_plan`` (slicing with explicit, possibly
permuted, index lists: the tests use permutations to check that slicing is exact).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields

import torch
from torch import nn

from hybridprune.importance import Importance, model_layout
from hybridprune.ranking import rank_attention_heads, rank_channels, rank_mamba

__all__ = [
    "MAMBA_STRATEGIES",
    "Plan",
    "PruneTarget",
    "apply_plan",
    "count_params",
    "make_plan",
    "prune",
]

#: the ``mamba_strategy`` values (``flat_channel`` is a mask baseline: dense Mamba2 layers with zeros)
MAMBA_STRATEGIES = (
    "group_aware",
    "none",
    "heads_only",
    "head_dim_only",
    "random",
    "group_agnostic",
    "flat_channel",
)


@dataclass(frozen=True)
class PruneTarget:
    """The pruned architecture; ``None`` keeps the teacher's value.

    ``num_attention_heads`` counts query heads (KV heads are never removed); ``num_layers`` counts
    blocks (one ``M``, ``*`` or ``-`` entry of the hybrid pattern).
    """

    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int | None = None
    num_layers: int | None = None


@dataclass
class Plan:
    """Explicit kept indices, in the order they are written into the new model.

    ``layers`` lists kept block indices of the teacher (ascending); the per-layer dicts are keyed by
    teacher block index. ``mamba`` maps a block to ``(heads, channels)``.
    """

    hidden: torch.Tensor
    layers: list[int]
    ffn: dict[int, torch.Tensor] = field(default_factory=dict)
    attn_heads: dict[int, torch.Tensor] = field(default_factory=dict)
    mamba: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    #: True only for the group-agnostic baseline: Mamba2 heads need not be listed group by group, and
    #: kept head j reads the B/C of group j // (H'/G) of the new model (heads reassigned by position)
    mamba_regroup: bool = False


def _family(model: nn.Module) -> str:
    family, _ = model_layout(model)
    return family


def _mamba_dims(config) -> tuple[int, int, int, int]:
    """(H, P, G, N) of the Mamba2 layers of a NemotronH or Mamba2 config."""
    if config.model_type == "nemotron_h":
        return config.mamba_num_heads, config.mamba_head_dim, config.n_groups, config.ssm_state_size
    return config.num_heads, config.head_dim, config.n_groups, config.state_size


def _nemotron_only(model: nn.Module) -> None:
    if _family(model) != "nemotron_h":
        raise TypeError(f"model: expected a NemotronHForCausalLM, got {type(model).__name__}")


def _kinds(config) -> list[tuple[str, ...]]:
    """What each block holds: ("mamba",), ("attn",), ("ffn",) for NemotronH, ("attn", "ffn") for Llama."""
    if config.model_type == "nemotron_h":
        table = {"linear_attention": ("mamba",), "full_attention": ("attn",), "mlp": ("ffn",)}
        out = []
        for i, t in enumerate(config.layers_block_type):
            if t not in table:
                raise TypeError(
                    f"model: block {i} has the unsupported type {t!r} (MoE is not supported)"
                )
            out.append(table[t])
        return out
    if config.model_type == "mamba2":
        return [("mamba",)] * config.num_hidden_layers
    return [("attn", "ffn")] * config.num_hidden_layers


def _check_target(config, target: object) -> dict[str, int | None]:
    if not isinstance(target, PruneTarget):
        raise TypeError(f"target: expected a hybridprune.PruneTarget, got {type(target).__name__}")
    mt = config.model_type
    has_mamba, has_attn = mt in ("nemotron_h", "mamba2"), mt != "mamba2"
    H, P, G, _ = _mamba_dims(config) if has_mamba else (None, None, None, None)
    have = {
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size if has_attn else None,
        "num_attention_heads": config.num_attention_heads if has_attn else None,
        "mamba_num_heads": H,
        "mamba_head_dim": P,
        "num_layers": len(_kinds(config)),
    }
    out: dict[str, int | None] = {}
    for f in fields(target):
        v = getattr(target, f.name)
        if v is None:
            out[f.name] = have[f.name]
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"target.{f.name}: expected an int or None, got {type(v).__name__}")
        if have[f.name] is None:
            raise ValueError(
                f"target.{f.name}: {type(config).__name__} has no such dimension; leave it None"
            )
        if v < 1:
            raise ValueError(f"target.{f.name}: must be >= 1, got {v}")
        if v > have[f.name]:
            raise ValueError(
                f"target.{f.name}: {v} is above the model's {have[f.name]} (pruning cannot grow a model)"
            )
        out[f.name] = v
    if has_mamba and out["mamba_num_heads"] % G:
        raise ValueError(
            f"target.mamba_num_heads: must be a multiple of n_groups={G} (the same number of "
            f"heads is kept in every B/C group), got {out['mamba_num_heads']}"
        )
    if has_attn and out["num_attention_heads"] % config.num_key_value_heads:
        raise ValueError(
            f"target.num_attention_heads: must be a multiple of num_key_value_heads={config.num_key_value_heads} "
            f"(KV heads are never removed), got {out['num_attention_heads']}"
        )
    return out


def _check_importance(model: nn.Module, importance: object) -> None:
    if not isinstance(importance, Importance):
        raise TypeError(
            f"importance: expected a hybridprune.Importance, got {type(importance).__name__}"
        )
    cfg = model.config
    kinds = _kinds(cfg)
    want = {
        "ffn": {i: (cfg.intermediate_size,) for i, k in enumerate(kinds) if "ffn" in k},
        "attn_heads": {i: (cfg.num_attention_heads,) for i, k in enumerate(kinds) if "attn" in k},
        "mamba_x": {i: _mamba_dims(cfg)[:2] for i, k in enumerate(kinds) if "mamba" in k},
    }
    for name, shapes in want.items():
        got = {i: tuple(t.shape) for i, t in getattr(importance, name).items()}
        if got != shapes:
            raise ValueError(
                f"importance: its {name} scores {got} do not fit this model ({shapes})"
            )
    if importance.hidden is None or tuple(importance.hidden.shape) != (cfg.hidden_size,):
        raise ValueError(f"importance: hidden scores must have shape ({cfg.hidden_size},)")
    if importance.depth is None or tuple(importance.depth.shape) != (len(kinds),):
        raise ValueError(f"importance: depth scores must have shape ({len(kinds)},)")


def make_plan(
    model: nn.Module,
    importance: Importance,
    target: PruneTarget,
    *,
    mamba_strategy: str = "group_aware",
    seed: int = 0,
) -> Plan:
    """Rank everything (see ``prune``) and return the kept indices without building a model."""
    _family(model)
    if mamba_strategy not in MAMBA_STRATEGIES:
        raise ValueError(
            f"mamba_strategy: expected one of {MAMBA_STRATEGIES} , got {mamba_strategy!r}"
        )
    cfg = model.config
    t = _check_target(cfg, target)
    _check_importance(model, importance)
    if (
        mamba_strategy == "none"
        and cfg.model_type != "llama"
        and (t["mamba_num_heads"], t["mamba_head_dim"]) != _mamba_dims(cfg)[:2]
    ):
        raise ValueError(
            "target: mamba_strategy='none' keeps every Mamba2 head and channel; leave mamba_num_heads and mamba_head_dim None"
        )
    if cfg.model_type != "llama":
        if mamba_strategy == "heads_only" and t["mamba_head_dim"] != _mamba_dims(cfg)[1]:
            raise ValueError(
                "target.mamba_head_dim: mamba_strategy='heads_only' keeps every head channel; leave it None"
            )
        if mamba_strategy == "head_dim_only" and t["mamba_num_heads"] != _mamba_dims(cfg)[0]:
            raise ValueError(
                "target.mamba_num_heads: mamba_strategy='head_dim_only' keeps every head; leave it None"
            )
    kinds = _kinds(cfg)
    order = torch.sort(importance.depth.double(), descending=True, stable=True).indices
    layers = sorted(order[: t["num_layers"]].tolist())
    plan = Plan(hidden=rank_channels(importance.hidden, t["hidden_size"]), layers=layers)
    keep_per_kv = (
        t["num_attention_heads"] // cfg.num_key_value_heads if t["num_attention_heads"] else 0
    )
    for i in layers:
        if "ffn" in kinds[i]:
            plan.ffn[i] = rank_channels(importance.ffn[i], t["intermediate_size"])
        if "attn" in kinds[i]:
            plan.attn_heads[i] = rank_attention_heads(
                importance.attn_heads[i], cfg.num_key_value_heads, keep_per_kv
            )
        if "mamba" in kinds[i]:
            plan.mamba[i] = _mamba_choice(
                importance.mamba_x[i],
                _mamba_dims(cfg)[2],
                t["mamba_num_heads"],
                t["mamba_head_dim"],
                mamba_strategy,
                seed + i,
            )
    plan.mamba_regroup = mamba_strategy == "group_agnostic"
    return plan


def _mamba_choice(x, n_groups, num_heads, head_dim, strategy, seed):
    if strategy == "flat_channel":  # the layer stays whole; prune() masks channels afterwards
        n_h, p = x.shape
        return torch.arange(n_h), torch.arange(p)
    if strategy == "random":  # the same counts as group-aware, drawn at random (seeded per layer)
        g = torch.Generator().manual_seed(seed)
        n_h, p = x.shape
        per = n_h // n_groups
        channels = torch.sort(torch.randperm(p, generator=g)[:head_dim]).values
        heads = torch.cat(
            [
                k * per
                + torch.sort(torch.randperm(per, generator=g)[: num_heads // n_groups]).values
                for k in range(n_groups)
            ]
        )
        return heads, channels
    if (
        strategy == "group_agnostic"
    ):  # one global head ranking: the top heads wherever their groups are
        return rank_mamba(x, 1, num_heads, head_dim)
    return rank_mamba(
        x, n_groups, num_heads, head_dim
    )  # group_aware, heads_only, head_dim_only, none


def _plan_config(config, plan: Plan):
    """The teacher's config with the plan's sizes (all layers of a kind keep the same count)."""

    def one(sizes, name, default):
        sizes = set(sizes)
        if len(sizes) > 1:
            raise ValueError(f"plan: every layer must keep the same {name}, got {sorted(sizes)}")
        return sizes.pop() if sizes else default

    new = copy.deepcopy(config)
    new.hidden_size = len(plan.hidden)
    if config.model_type == "mamba2":
        H, P, _, _ = _mamba_dims(config)
        new.num_heads = one((len(h) for h, _ in plan.mamba.values()), "mamba_num_heads", H)
        new.head_dim = one((len(c) for _, c in plan.mamba.values()), "mamba_head_dim", P)
        new.num_hidden_layers = len(plan.layers)
        # Mamba2Mixer derives d_in = expand * hidden_size, and Mamba2Config's expand is an int
        d_in = new.num_heads * new.head_dim
        if d_in % new.hidden_size:
            raise ValueError(
                f"target: a Mamba2ForCausalLM needs mamba_num_heads * mamba_head_dim ({d_in}) to be an integer "
                f"multiple of hidden_size ({new.hidden_size}): transformers derives d_in = expand * hidden_size "
                "with an int expand"
            )
        new.expand = d_in // new.hidden_size
        return new
    new.intermediate_size = one(
        (len(v) for v in plan.ffn.values()), "intermediate_size", config.intermediate_size
    )
    new.num_attention_heads = one(
        (len(v) for v in plan.attn_heads.values()),
        "num_attention_heads",
        config.num_attention_heads,
    )
    if config.model_type == "nemotron_h":
        new.mamba_num_heads = one(
            (len(h) for h, _ in plan.mamba.values()), "mamba_num_heads", config.mamba_num_heads
        )
        new.mamba_head_dim = one(
            (len(c) for _, c in plan.mamba.values()), "mamba_head_dim", config.mamba_head_dim
        )
        new.layers_block_type = [config.layers_block_type[i] for i in plan.layers]
    else:
        # head_dim defaults to hidden_size // num_attention_heads: pin the teacher's
        new.head_dim = (
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        new.num_hidden_layers = len(plan.layers)
        if getattr(config, "layer_types", None) is not None:
            new.layer_types = [config.layer_types[i] for i in plan.layers]
    return new


def _check_plan(config, plan: Plan) -> None:
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a hybridprune.prune.Plan, got {type(plan).__name__}")
    kinds = _kinds(config)
    n = len(kinds)
    if (
        not plan.layers
        or sorted(set(plan.layers)) != list(plan.layers)
        or not all(0 <= i < n for i in plan.layers)
    ):
        raise ValueError(
            f"plan: layers must be distinct ascending block indices in [0, {n}), got {plan.layers}"
        )

    def idx(name, t, size):
        if (
            not isinstance(t, torch.Tensor)
            or t.ndim != 1
            or len(t) == 0
            or len(set(t.tolist())) != len(t)
        ):
            raise ValueError(f"plan: {name} must be a non-empty 1-D tensor of distinct indices")
        if int(t.min()) < 0 or int(t.max()) >= size:
            raise ValueError(f"plan: {name} has indices outside [0, {size})")

    def grouped(name, heads, n_heads, n_groups):
        per = n_heads // n_groups
        k = len(heads) // n_groups
        if len(heads) % n_groups or (heads // per).tolist() != [
            g for g in range(n_groups) for _ in range(k)
        ]:
            raise ValueError(
                f"plan: {name} must list the same number of heads for every group, group by group"
            )

    idx("hidden", plan.hidden, config.hidden_size)
    for i in plan.layers:
        if "ffn" in kinds[i]:
            idx(f"ffn[{i}]", plan.ffn.get(i), config.intermediate_size)
        if "attn" in kinds[i]:
            heads = plan.attn_heads.get(i)
            idx(f"attn_heads[{i}]", heads, config.num_attention_heads)
            grouped(
                f"attn_heads[{i}] (per KV head)",
                heads,
                config.num_attention_heads,
                config.num_key_value_heads,
            )
        if "mamba" in kinds[i]:
            H, P, G, _ = _mamba_dims(config)
            heads, channels = plan.mamba.get(i, (None, None))
            idx(f"mamba[{i}] heads", heads, H)
            idx(f"mamba[{i}] channels", channels, P)
            if not plan.mamba_regroup:
                grouped(f"mamba[{i}] heads", heads, H, G)
            elif len(heads) % config.n_groups:
                raise ValueError(
                    f"plan: mamba[{i}] keeps {len(heads)} heads, not a multiple of n_groups"
                )


def _rows(w, idx):
    return w.index_select(0, idx)


def _cols(w, idx):
    return w.index_select(1, idx)


def _slice_mamba(sd, out, m, n, cfg, hid, heads, channels):
    H, P, G, N = _mamba_dims(cfg)
    d_in = H * P
    gn = G * N
    idx = (heads[:, None] * P + channels[None, :]).reshape(-1)  # I = {h·P + p}
    bc = torch.arange(2 * d_in, 2 * d_in + 2 * gn)
    in_rows = torch.cat([idx, d_in + idx, bc, 2 * d_in + 2 * gn + heads])  # z[I] x[I] B C dt[H']
    out[n + "in_proj.weight"] = _cols(_rows(sd[m + "in_proj.weight"], in_rows), hid)
    if m + "in_proj.bias" in sd:
        out[n + "in_proj.bias"] = _rows(sd[m + "in_proj.bias"], in_rows)
    conv_rows = torch.cat([idx, torch.arange(d_in, d_in + 2 * gn)])  # conv channels are [x | B | C]
    out[n + "conv1d.weight"] = _rows(sd[m + "conv1d.weight"], conv_rows)
    if m + "conv1d.bias" in sd:
        out[n + "conv1d.bias"] = _rows(sd[m + "conv1d.bias"], conv_rows)
    for name in ("A_log", "dt_bias", "D"):
        out[n + name] = _rows(sd[m + name], heads)
    out[n + "norm.weight"] = _rows(sd[m + "norm.weight"], idx)
    out[n + "out_proj.weight"] = _cols(_rows(sd[m + "out_proj.weight"], hid), idx)
    if m + "out_proj.bias" in sd:
        out[n + "out_proj.bias"] = _rows(sd[m + "out_proj.bias"], hid)


def _slice_attention(sd, out, m, n, hd, hid, heads):
    q = (heads[:, None] * hd + torch.arange(hd)).reshape(-1)
    out[n + "q_proj.weight"] = _cols(_rows(sd[m + "q_proj.weight"], q), hid)
    out[n + "k_proj.weight"] = _cols(sd[m + "k_proj.weight"], hid)
    out[n + "v_proj.weight"] = _cols(sd[m + "v_proj.weight"], hid)
    out[n + "o_proj.weight"] = _cols(_rows(sd[m + "o_proj.weight"], hid), q)
    if m + "q_proj.bias" in sd:
        out[n + "q_proj.bias"] = _rows(sd[m + "q_proj.bias"], q)
    for name in ("k_proj.bias", "v_proj.bias"):
        if m + name in sd:
            out[n + name] = sd[m + name].clone()
    if m + "o_proj.bias" in sd:
        out[n + "o_proj.bias"] = _rows(sd[m + "o_proj.bias"], hid)


def _slice_mlp(sd, out, m, n, hid, f):
    ups = [
        name for name in ("gate_proj", "up_proj") if m + name + ".weight" in sd
    ]  # Llama gates, NemotronH not
    for name in ups:
        out[n + name + ".weight"] = _cols(_rows(sd[m + name + ".weight"], f), hid)
        if m + name + ".bias" in sd:
            out[n + name + ".bias"] = _rows(sd[m + name + ".bias"], f)
    out[n + "down_proj.weight"] = _cols(_rows(sd[m + "down_proj.weight"], hid), f)
    if m + "down_proj.bias" in sd:
        out[n + "down_proj.bias"] = _rows(sd[m + "down_proj.bias"], hid)


@torch.no_grad()
def apply_plan(model: nn.Module, plan: Plan) -> nn.Module:
    """A new model of ``model``'s class from the edited config and the sliced weights.

    Index lists are used in the order given (a permutation within a head, a group or the embedding
    is exact; heads must stay listed group by group). The teacher is not modified.
    """
    family = _family(model)
    cfg = model.config
    _check_plan(cfg, plan)
    new_cfg = _plan_config(cfg, plan)
    sd = model.state_dict()
    hid = plan.hidden
    if family != "mamba2":
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    out: dict[str, torch.Tensor] = {}
    root = "backbone" if family == "mamba2" else "model"
    emb, final = {
        "nemotron_h": ("model.embeddings", "model.norm_f"),
        "mamba2": ("backbone.embeddings", "backbone.norm_f"),
        "llama": ("model.embed_tokens", "model.norm"),
    }[family]
    out[emb + ".weight"] = _cols(sd[emb + ".weight"], hid)
    out[final + ".weight"] = _rows(sd[final + ".weight"], hid)
    if "lm_head.weight" in sd:
        out["lm_head.weight"] = _cols(sd["lm_head.weight"], hid)
    for j, i in enumerate(plan.layers):
        src, dst = f"{root}.layers.{i}.", f"{root}.layers.{j}."
        if family == "llama":
            for norm in ("input_layernorm", "post_attention_layernorm"):
                out[dst + norm + ".weight"] = _rows(sd[src + norm + ".weight"], hid)
            _slice_attention(
                sd, out, src + "self_attn.", dst + "self_attn.", hd, hid, plan.attn_heads[i]
            )
            _slice_mlp(sd, out, src + "mlp.", dst + "mlp.", hid, plan.ffn[i])
            continue
        out[dst + "norm.weight"] = _rows(sd[src + "norm.weight"], hid)
        m, n = src + "mixer.", dst + "mixer."
        kind = "linear_attention" if family == "mamba2" else cfg.layers_block_type[i]
        if kind == "mlp":
            _slice_mlp(sd, out, m, n, hid, plan.ffn[i])
        elif kind == "full_attention":
            _slice_attention(sd, out, m, n, hd, hid, plan.attn_heads[i])
        else:
            _slice_mamba(sd, out, m, n, cfg, hid, *plan.mamba[i])
    ref = next(model.parameters())
    student = type(model)(new_cfg).to(device=ref.device, dtype=ref.dtype)
    missing, unexpected = student.load_state_dict(out, strict=False)
    tied = {"lm_head.weight"} if new_cfg.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(
            f"apply_plan: sliced state dict does not fit the new model: missing {missing}, unexpected {unexpected}"
        )
    student.train(model.training)
    return student


def prune(
    model: nn.Module,
    importance: Importance,
    target: PruneTarget,
    *,
    mamba_strategy: str = "group_aware",
    seed: int = 0,
) -> nn.Module:
    """Prune a ``NemotronHForCausalLM`` (Minitron-SSM) or a ``LlamaForCausalLM``/``Qwen2ForCausalLM``
    (attention-only Minitron: the same code without Mamba2 layers) or a ``Mamba2ForCausalLM``
    (Mamba2 and embedding and depth only) to ``target`` by importance.

    Embedding channels, FFN neurons, attention heads (within each KV group) and, with
    ``mamba_strategy="group_aware"``, Mamba2 head channels (one set shared by all heads) and heads
    (the same number in every B/C group) are ranked by ``importance``; the blocks with the lowest
    depth importance are dropped. ``mamba_strategy="none"`` keeps every Mamba2 head and channel
    (the paper's "FFN + embedding + depth only" comparison). Baselines: ``"heads_only"`` (group-aware
    heads, every channel kept), ``"head_dim_only"`` (channels, every head kept), ``"random"`` (the same
    per-group counts at random, seeded by ``seed`` + block index) and ``"group_agnostic"`` (one global
    head ranking; kept heads are reassigned to groups by position, so they read other groups' B/C and
    the gated norm groups straddle the original groups) and ``"flat_channel"`` (a mask baseline:
    every Mamba2 layer stays dense and keeps the top ``mamba_num_heads * mamba_head_dim`` of its
    H·P channels ranked as one flat vector, ignoring heads and groups; the others are zeroed and
    held at zero by gradient hooks, see ``hybridprune.masks``; no speed-up). Returns a new model
    of the same class built from an edited config; ``model`` is not modified.

    Raises:
        TypeError: ``model`` is not one of those, or ``target``/``importance`` have the wrong type.
        ValueError: a target field is below 1 or above the model's size, ``mamba_num_heads`` is not a
            multiple of ``n_groups``, ``num_attention_heads`` not a multiple of the KV heads, or
            ``importance`` does not fit the model.
    """
    plan = make_plan(model, importance, target, mamba_strategy=mamba_strategy, seed=seed)
    student = apply_plan(model, plan)
    if mamba_strategy == "flat_channel" and plan.mamba:
        from hybridprune.masks import apply_masks, flat_channel_masks

        t = _check_target(model.config, target)
        keep = t["mamba_num_heads"] * t["mamba_head_dim"]
        x = {j: importance.mamba_x[i] for j, i in enumerate(plan.layers) if i in plan.mamba}
        apply_masks(student, flat_channel_masks(student, x, keep))
    return student


def count_params(config) -> int:
    """The exact parameter count of a NemotronH, Llama/Qwen2 or Mamba2 causal LM built from ``config``
    (the analytic formula; tied embeddings counted once, where the model class really ties them).

    Example:
        >>> from transformers import LlamaConfig
        >>> count_params(
        ...     LlamaConfig(
        ...         vocab_size=32,
        ...         hidden_size=16,
        ...         intermediate_size=24,
        ...         num_hidden_layers=2,
        ...         num_attention_heads=4,
        ...         num_key_value_heads=2,
        ...     )
        ... )
        4944
    """
    from transformers import PretrainedConfig

    if not isinstance(config, PretrainedConfig):
        raise TypeError(f"config: expected a transformers config, got {type(config).__name__}")
    mt = config.model_type
    d, V = config.hidden_size, config.vocab_size
    tied = bool(config.tie_word_embeddings)
    if mt == "nemotron_h":
        from transformers import NemotronHForCausalLM

        # transformers 5.24's NemotronHForCausalLM declares no tied weights (``_tied_weights_keys = {}``):
        # tie_word_embeddings=True still builds a separate lm_head
        tied = tied and bool(NemotronHForCausalLM._tied_weights_keys)
    total = V * d + d + (0 if tied else V * d)  # embeddings, final norm, lm_head

    def mamba(H, P, G, N, W, bias, conv_bias):
        d_in = H * P
        conv = d_in + 2 * G * N
        proj = d_in + conv + H
        return (
            d * proj
            + (proj if bias else 0)
            + conv * W
            + (conv if conv_bias else 0)
            + 3 * H
            + d_in
            + d_in * d
            + (d if bias else 0)
        )

    if mt == "nemotron_h":
        hd = config.head_dim
        for kind in config.layers_block_type:
            total += d  # block pre-norm
            if kind == "linear_attention":
                total += mamba(
                    config.mamba_num_heads,
                    config.mamba_head_dim,
                    config.n_groups,
                    config.ssm_state_size,
                    config.conv_kernel,
                    config.use_bias,
                    config.use_conv_bias,
                )
            elif kind == "full_attention":  # NemotronHAttention has no biases
                total += d * hd * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
            elif kind == "mlp":
                f = config.intermediate_size
                total += 2 * d * f + ((f + d) if config.mlp_bias else 0)
            else:
                raise ValueError(f"config: block type {kind!r} is not supported (MoE)")
        return total
    if mt in ("llama", "qwen2"):
        hd = getattr(config, "head_dim", None) or d // config.num_attention_heads
        nq, nkv, f = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.intermediate_size,
        )
        per = d * hd * (2 * nq + 2 * nkv) + 3 * d * f + 2 * d
        if mt == "qwen2":
            per += hd * (nq + 2 * nkv)  # q/k/v biases
        else:
            per += (hd * (nq + 2 * nkv) + d) if config.attention_bias else 0
            per += (2 * f + d) if config.mlp_bias else 0
        return total + config.num_hidden_layers * per
    if mt == "mamba2":
        per = d + mamba(
            config.num_heads,
            config.head_dim,
            config.n_groups,
            config.state_size,
            config.conv_kernel,
            config.use_bias,
            config.use_conv_bias,
        )
        return total + config.num_hidden_layers * per
    raise TypeError(
        f"config: expected a NemotronH, Llama, Qwen2 or Mamba2 config, got {type(config).__name__}"
    )
