"""NBL on transformers Llama / Mistral / Qwen2 decoders: calibrate, score, select, swap, save/load.

The swapped module is called exactly like the attention it replaces (the decoder layer passes
``hidden_states``, ``position_embeddings``, ``attention_mask``, ``cache`` ...) and returns
``(W h + b, None)``. To keep the KV cache's length bookkeeping right when layer 0 is replaced
(transformers reads ``get_seq_length()`` from layer 0, and ``DynamicLayer`` reports 0 for an empty
tensor), it appends a one-head, width-1 zero K/V per token: B·T scalars, not B·n_kv·T·head_dim.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .cca import report as cca_report
from .lmmse import fit
from .stats import CovAccumulator, CovStats

__all__ = [
    "DroppedAttention",
    "LayerStats",
    "LinearizedAttention",
    "apply",
    "apply_drop",
    "calibrate",
    "layer_reports",
    "linearize",
    "load",
    "removed_parameters",
    "save",
    "select",
]

_SUPPORTED = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "LlamaModel",
    "MistralModel",
    "Qwen2Model",
)


def _layers(model) -> nn.ModuleList:
    name = type(model).__name__
    if name not in _SUPPORTED:
        raise TypeError(f"model: expected one of {', '.join(_SUPPORTED)}, got {name}")
    base = model.model if hasattr(model, "model") and hasattr(model.model, "layers") else model
    return base.layers


def _push_placeholder_kv(cache, layer_idx, hidden_states, kwargs):
    if cache is None:
        return
    b, t = hidden_states.shape[:2]
    z = hidden_states.new_zeros(b, 1, t, 1)
    cache.update(z, z, layer_idx)


class LinearizedAttention(nn.Module):
    """``h -> W h + b`` in place of a decoder layer's attention (one ``addmm``).

    ``weight`` [d, d] and ``bias`` [d] are parameters, so they are in the state dict.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, layer_idx: int):
        super().__init__()
        if weight.ndim != 2 or bias.shape != (weight.shape[0],):
            raise ValueError(
                f"weight/bias: expected [d_out, d_in] and [d_out], got "
                f"{tuple(weight.shape)} and {tuple(bias.shape)}"
            )
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = nn.Parameter(bias.detach().clone())
        self.layer_idx = layer_idx

    def forward(self, hidden_states, *args, cache=None, past_key_values=None, **kwargs):
        _push_placeholder_kv(
            cache if cache is not None else past_key_values, self.layer_idx, hidden_states, kwargs
        )
        return nn.functional.linear(hidden_states, self.weight, self.bias), None

    def extra_repr(self) -> str:
        return (
            f"d_in={self.weight.shape[1]}, d_out={self.weight.shape[0]}, layer_idx={self.layer_idx}"
        )


class DroppedAttention(nn.Module):
    """LLM-Drop's Attn-DROP: the attention output is zero (the layer keeps only its MLP)."""

    def __init__(self, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx

    def forward(self, hidden_states, *args, cache=None, past_key_values=None, **kwargs):
        _push_placeholder_kv(
            cache if cache is not None else past_key_values, self.layer_idx, hidden_states, kwargs
        )
        return torch.zeros_like(hidden_states), None


@dataclass
class LayerStats:
    """Calibration statistics of one decoder layer: (x, y₁) moments plus the mean cosine
    similarity between ``h`` and ``h + y₁`` (LLM-Drop's ranking signal)."""

    layer: int
    stats: CovStats
    cosine: float
    input_point: str = "residual"


def _check_ids(input_ids, attention_mask):
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids: expected a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.ndim != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(
            f"input_ids: expected a 2-D integer tensor [B, T], got shape "
            f"{tuple(input_ids.shape)} dtype {input_ids.dtype}"
        )
    if attention_mask is not None and (
        not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape
    ):
        got = (
            tuple(attention_mask.shape)
            if isinstance(attention_mask, torch.Tensor)
            else type(attention_mask).__name__
        )
        raise ValueError(f"attention_mask: expected shape {tuple(input_ids.shape)}, got {got}")


def _real_attention_layers(layers):
    return [
        i
        for i, lay in enumerate(layers)
        if not isinstance(lay.self_attn, (LinearizedAttention, DroppedAttention))
    ]


@torch.no_grad()
def calibrate(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    input_point: str = "residual",
    batch_size: int = 8,
    layers: list[int] | None = None,
) -> list[LayerStats]:
    """Run the calibration set through ``model`` and accumulate every layer's float64 statistics.

    Hooks: a forward pre-hook on ``input_layernorm`` records ``h`` (``input_point="residual"``, the
    official ``layer_drop_norm=True``) or a forward hook records ``RMSNorm(h)`` (``"normed"``); a
    forward hook on ``self_attn`` records ``y₁`` (the ``o_proj`` output). Padding positions
    (``attention_mask == 0``) are excluded. Batched ``batch_size`` sequences at a time; the model
    is not modified. ``layers`` restricts which layers are recorded (default: all with attention).
    """
    decoder = _layers(model)
    _check_ids(input_ids, attention_mask)
    if input_point not in ("residual", "normed"):
        raise ValueError(f"input_point: expected 'residual' or 'normed', got {input_point!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    todo = _real_attention_layers(decoder) if layers is None else _check_layers(decoder, layers)
    d = model.config.hidden_size
    accs = {i: CovAccumulator(d, d) for i in todo}
    cos_sum = {i: 0.0 for i in todo}
    count = {i: 0 for i in todo}
    state: dict = {}
    handles = []

    def pre_norm(i):
        def hook(mod, args):
            state[i] = args[0]

        return hook

    def post_norm(i):
        def hook(mod, args, out):
            state[("n", i)] = out

        return hook

    def post_attn(i):
        def hook(mod, args, kwargs, out):
            y1 = out[0] if isinstance(out, tuple) else out
            h = state.pop(i)
            x = state.pop(("n", i)) if input_point == "normed" else h
            mask = state["mask"]
            accs[i].update(x, y1, mask)
            hd, yd = h.double(), (h + y1).double()
            cos = torch.nn.functional.cosine_similarity(hd, yd, dim=-1)
            m = mask.to(cos.device)
            cos_sum[i] += float(cos[m].sum())
            count[i] += int(m.sum())

        return hook

    for i in todo:
        layer = decoder[i]
        handles.append(layer.input_layernorm.register_forward_pre_hook(pre_norm(i)))
        if input_point == "normed":
            handles.append(layer.input_layernorm.register_forward_hook(post_norm(i)))
        handles.append(layer.self_attn.register_forward_hook(post_attn(i), with_kwargs=True))
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        for s in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[s : s + batch_size].to(device)
            am = None if attention_mask is None else attention_mask[s : s + batch_size].to(device)
            state["mask"] = torch.ones_like(ids, dtype=torch.bool) if am is None else am.bool()
            model(input_ids=ids, attention_mask=am, use_cache=False)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return [
        LayerStats(i, accs[i].finalize(), cos_sum[i] / max(count[i], 1), input_point) for i in todo
    ]


def layer_reports(
    layer_stats: list[LayerStats], eig_floor: float = 0.0, ridge: float = 0.0
) -> list[dict]:
    """The CCA report of each layer plus ``layer`` and ``cosine`` (input to :func:`select`)."""
    out = []
    for ls in layer_stats:
        r = cca_report(ls.stats, eig_floor=eig_floor, ridge=ridge)
        r.update(layer=ls.layer, cosine=ls.cosine)
        out.append(r)
    return out


def select(reports: list[dict], k: int, criterion: str = "cca", seed: int = 0) -> list[int]:
    """The ``k`` layers to replace, best first.

    ``cca``: lowest score S (the paper); ``mse``: lowest predicted error; ``cosine``: highest mean
    cos(h, h + y₁) (LLM-Drop); ``random``: a seeded random order.
    """
    if not isinstance(reports, list) or not all(
        isinstance(r, dict) and "layer" in r for r in reports
    ):
        raise TypeError("reports: expected a list of dicts from layer_reports()")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= len(reports):
        raise ValueError(f"k: expected an int in [0, {len(reports)}] (layers scored), got {k!r}")
    if criterion == "cca":
        order = sorted(reports, key=lambda r: r["score"])
    elif criterion == "mse":
        order = sorted(reports, key=lambda r: r["mse"])
    elif criterion == "cosine":
        order = sorted(reports, key=lambda r: -r["cosine"])
    elif criterion == "random":
        order = list(reports)
        random.Random(seed).shuffle(order)
    else:
        raise ValueError(
            f"criterion: expected 'cca', 'mse', 'cosine' or 'random', got {criterion!r}"
        )
    return [r["layer"] for r in order[:k]]


def _check_layers(decoder, layers) -> list[int]:
    if not isinstance(layers, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in layers
    ):
        raise TypeError(f"layers: expected a list of ints, got {layers!r}")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers: duplicate indices in {list(layers)}")
    bad = [i for i in layers if not 0 <= i < len(decoder)]
    if bad:
        raise ValueError(f"layers: indices {bad} out of range [0, {len(decoder)})")
    done = [
        i
        for i in layers
        if isinstance(decoder[i].self_attn, (LinearizedAttention, DroppedAttention))
    ]
    if done:
        raise ValueError(f"layers: {done} already replaced")
    return list(layers)


def apply(model, layers: list[int], stats: list[LayerStats], ridge: float = 0.0):
    """Replace ``layers``' attention by the fitted LMMSE map (in place; returns ``model``).

    ``input_layernorm → Identity`` (for ``input_point="residual"``) and
    ``self_attn → LinearizedAttention(W, b)`` in the model's dtype and device.
    """
    decoder = _layers(model)
    layers = _check_layers(decoder, layers)
    if not isinstance(stats, (list, tuple)) or not all(isinstance(s, LayerStats) for s in stats):
        raise TypeError("stats: expected the list of LayerStats from calibrate()")
    by_layer = {s.layer: s for s in stats}
    missing = [i for i in layers if i not in by_layer]
    if missing:
        raise ValueError(f"stats: no calibration statistics for layers {missing}")
    fitted = {i: fit(by_layer[i].stats, ridge=ridge) for i in layers}  # all fits before any swap
    for i in layers:
        layer = decoder[i]
        ref = layer.self_attn.o_proj.weight
        w, b = fitted[i]
        layer.self_attn = LinearizedAttention(w.to(ref), b.to(ref), i)
        if by_layer[i].input_point == "residual":
            layer.input_layernorm = nn.Identity()
    _record(model, "nbl", layers, by_layer[layers[0]].input_point if layers else "residual")
    return model


def apply_drop(model, layers: list[int]):
    """Attn-DROP (LLM-Drop): remove ``layers``' attention sublayers (output ≡ 0); in place."""
    decoder = _layers(model)
    layers = _check_layers(decoder, layers)
    for i in layers:
        decoder[i].self_attn = DroppedAttention(i)
        decoder[i].input_layernorm = nn.Identity()
    _record(model, "drop", layers, "residual")
    return model


def _record(model, kind, layers, input_point):
    meta = getattr(model, "nbl_meta", {"layers": {}, "input_point": input_point})
    for i in layers:
        meta["layers"][str(i)] = kind
    meta["input_point"] = input_point
    model.nbl_meta = meta


def linearize(
    model,
    input_ids,
    k: int,
    criterion: str = "cca",
    sequential: bool = False,
    attention_mask=None,
    input_point: str = "residual",
    seed: int = 0,
    batch_size: int = 8,
    eig_floor: float = 0.0,
    ridge: float = 0.0,
) -> list[int]:
    """Calibrate, select ``k`` layers and apply NBL; returns the layers in the order chosen.

    ``sequential=False`` is the paper (one-shot: all statistics from the unmodified model).
    ``sequential=True`` is the ablation: replace one layer, recalibrate the modified model, repeat.
    """
    decoder = _layers(model)
    if not isinstance(k, int) or not 0 <= k <= len(_real_attention_layers(decoder)):
        raise ValueError(
            f"k: expected an int in [0, {len(_real_attention_layers(decoder))}], got {k!r}"
        )
    if not sequential:
        st = calibrate(model, input_ids, attention_mask, input_point, batch_size)
        chosen = select(layer_reports(st, eig_floor, ridge), k, criterion, seed)
        apply(model, chosen, st, ridge=ridge)
        return chosen
    chosen = []
    for _ in range(k):
        st = calibrate(model, input_ids, attention_mask, input_point, batch_size)
        best = select(layer_reports(st, eig_floor, ridge), 1, criterion, seed + len(chosen))
        apply(model, best, st, ridge=ridge)
        chosen += best
    return chosen


def removed_parameters(config, layers: list[int]) -> tuple[int, int]:
    """``(removed, total)``: per replaced layer q, k, v, o and the input norm go, ``d² + d`` come."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    decoder = _layers(model)
    removed = 0
    d = config.hidden_size
    for i in _check_layers(decoder, list(layers)):
        lay = decoder[i]
        removed += sum(p.numel() for p in lay.self_attn.parameters())
        removed += sum(p.numel() for p in lay.input_layernorm.parameters())
        removed -= d * d + d
    return removed, total


def _fingerprint(model) -> str:
    cfg = model.config.to_dict()
    for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures"):
        cfg.pop(key, None)
    return json.dumps({"class": type(model).__name__, "config": cfg}, sort_keys=True, default=str)


def save(model, path: str | Path) -> Path:
    """Save a linearized model: its full state dict plus which layers were replaced and how."""
    _layers(model)
    meta = getattr(model, "nbl_meta", None)
    if not meta:
        raise ValueError("model: no layers were replaced (apply / apply_drop first)")
    path = Path(path)
    torch.save(
        {"state_dict": model.state_dict(), "nbl_meta": meta, "fingerprint": _fingerprint(model)},
        path,
    )
    return path


def load(model, path: str | Path):
    """Rebuild the replacements of :func:`save` in an unmodified ``model`` of the same config and
    load the weights (strict). A model of another class/config is refused before it is touched."""
    decoder = _layers(model)
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if payload.get("fingerprint") != _fingerprint(model):
        raise ValueError("model: its class/config does not match the saved NBL checkpoint")
    meta = payload["nbl_meta"]
    layers = [int(i) for i in meta["layers"]]
    _check_layers(decoder, layers)
    d = model.config.hidden_size
    ref = next(model.parameters())
    for i in layers:
        if meta["layers"][str(i)] == "nbl":
            decoder[i].self_attn = LinearizedAttention(
                torch.zeros(d, d).to(ref), torch.zeros(d).to(ref), i
            )
            if meta["input_point"] == "residual":
                decoder[i].input_layernorm = nn.Identity()
        else:
            decoder[i].self_attn = DroppedAttention(i)
            decoder[i].input_layernorm = nn.Identity()
    model.load_state_dict(payload["state_dict"], strict=True)
    model.nbl_meta = meta
    return model
