"""transformers integration: swap a Llama's projections, and the one-call ``quantize_`` entry point."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import zlib
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from .modules import FusedGroup, FusedMember, QPaletteLinear
from .quantizers import DEFAULT_PALETTE, QuantizerSpec, parse_spec
from .rotation import random_signs

__all__ = ["QPaletteConfig", "llama_blocks", "llama_projections", "quantize_", "quantize_llama"]

ROLES = {
    "q_proj": "q",
    "k_proj": "k",
    "v_proj": "v",
    "o_proj": "o",
    "gate_proj": "gate",
    "up_proj": "up",
    "down_proj": "down",
}
_FAMILY = {"q": "attn_in", "k": "attn_in", "v": "attn_in", "gate": "mlp_in", "up": "mlp_in"}


def llama_projections(model: nn.Module) -> list[str]:
    """Names of every q/k/v/o/gate/up/down nn.Linear of a transformers Llama-like model."""
    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in ROLES
    ]


def llama_blocks(model: nn.Module) -> list[dict[str, str]]:
    """Per decoder block: role (q, k, v, o, gate, up, down) -> module name."""
    blocks: dict[str, dict[str, str]] = {}
    for n in llama_projections(model):
        parent, leaf = n.rsplit(".", 1)
        block = parent.rsplit(".", 1)[0]  # strip self_attn / mlp
        blocks.setdefault(block, {})[ROLES[leaf]] = n
    return list(blocks.values())


def _family(name: str) -> str:
    parent, leaf = name.rsplit(".", 1) if "." in name else ("", name)
    role = ROLES.get(leaf)
    fam = _FAMILY.get(role) if role else None
    return f"{parent}:{fam}" if fam else name


def families(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Same-input layer sets among ``names`` (q/k/v and gate/up of each block)."""
    out: dict[str, list[str]] = {}
    for n in names:
        out.setdefault(_family(n), []).append(n)
    return [tuple(v) for v in out.values()]


def _bytes(t: torch.Tensor) -> bytes:
    return t.cpu().contiguous().view(torch.uint8).numpy().tobytes()


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


@torch.no_grad()
def quantize_llama(
    model: nn.Module,
    assignment: Mapping[str, QuantizerSpec | str | None],
    groups: Sequence[Sequence[str]] = (),
    seed: int = 0,
    cache: dict | None = None,
) -> nn.Module:
    """Swap the assigned nn.Linear modules for QPaletteLinear (and fused groups), in place.

    Layers reading the same input (q/k/v, gate/up of one block) share one sign vector, drawn from
    ``seed`` and the family's name.

    Args:
        model: a transformers model (or any module tree of nn.Linear).
        assignment: module name -> quantizer spec (None keeps it unquantized but rotated).
        groups: sets of names to fuse; members must share an input and a spec.
        seed: seeds the sign vectors.
        cache: an optional dict reused across calls (a sweep over assignments of copies of one
            model): each quantized layer is stored under (name, spec, seed, a hash of the
            weight and bias) and later calls take a copy instead of running the encoder again.

    Returns:
        ``model``.
    """
    if cache is not None and not isinstance(cache, dict):
        raise TypeError(f"cache: expected a dict or None, got {type(cache).__name__}")
    modules = dict(model.named_modules())
    specs = {}
    for name, spec in assignment.items():
        if name not in modules:
            raise ValueError(f"assignment: the model has no module {name!r}")
        if not isinstance(modules[name], nn.Linear):
            raise TypeError(
                f"assignment: {name!r} is a {type(modules[name]).__name__}, not nn.Linear"
            )
        specs[name] = None if spec is None else parse_spec(spec)
    for g in groups:
        for m in g:
            if m not in specs:
                raise ValueError(f"groups: {m!r} is not in the assignment")
        if len({_family(m) for m in g}) != 1:
            raise ValueError(f"groups: {tuple(g)} do not read the same input")
        if len({specs[m] for m in g}) != 1:
            raise ValueError(
                f"groups: fused layers need identical codebooks, got "
                f"{[str(specs[m]) for m in g]} for {tuple(g)}"
            )
    signs = {}
    new = {}
    for name, spec in specs.items():
        lin = modules[name]
        fam = _family(name)
        if fam not in signs:
            signs[fam] = random_signs(
                lin.in_features, seed + zlib.crc32(fam.encode()), lin.weight.dtype
            )
        key = None
        if cache is not None:
            w = lin.weight.detach()
            digest = hashlib.blake2b(_bytes(w), digest_size=16)
            if lin.bias is not None:
                digest.update(_bytes(lin.bias.detach()))
            key = (
                name,
                None if spec is None else spec.name,
                seed,
                str(w.dtype),
                digest.hexdigest(),
            )
        if key is not None and key in cache:
            new[name] = copy.deepcopy(cache[key])
            new[name].signs = signs[fam]  # the family's one sign vector (equal values)
            continue
        new[name] = QPaletteLinear.from_linear(lin, spec, signs[fam])
        if key is not None:
            cache[key] = copy.deepcopy(new[name])
    for name, module in new.items():
        _set(model, name, module)
    for g in groups:
        fused = FusedGroup([new[m] for m in g])
        for m, proxy in zip(g, fused.proxies()):
            _set(model, m, proxy)
    model.qpalette_assignment = {n: (None if s is None else s.name) for n, s in specs.items()}
    model.qpalette_groups = [tuple(g) for g in groups]
    return model


@dataclasses.dataclass
class QPaletteConfig:
    """Configuration of :func:`quantize_`.

    Args:
        bits: average bits per weight b̄ (memory objective; code + codebook bytes).
        objective: ``"memory"`` (memory MSQ) or ``"latency"`` (latency MSQ on the proxy cost).
        palette: candidate quantizer specs (default: TCQ/half-TCQ 1.5-5 at ``L``, NUQ, VQ <= 4).
        L: trellis state bits of the TCQ quantizers (16 official; smaller is faster to encode).
        latency_budget: seconds per token for ``"latency"`` (default: the proxy latency of
            single-scheme TCQ at ``bits``, unfused).
        t: sensitivity perturbation size.
        tokens: token ids for the sensitivities (default: random ids).
        seed: seeds the sign vectors.
    """

    bits: float = 3.25
    objective: str = "memory"
    palette: Sequence[QuantizerSpec | str] | None = None
    L: int = 16
    latency_budget: float | None = None
    t: float = 0.01
    tokens: torch.Tensor | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.objective not in ("memory", "latency"):
            raise ValueError(f"objective: expected 'memory' or 'latency', got {self.objective!r}")
        if not isinstance(self.bits, (int, float)) or not 1 <= self.bits <= 16:
            raise ValueError(f"bits: expected a number in [1, 16], got {self.bits!r}")

    def resolved_palette(self) -> list[QuantizerSpec]:
        if self.palette is not None:
            return [parse_spec(q) for q in self.palette]
        out = []
        for q in DEFAULT_PALETTE:
            if q.kind == "tcq":
                q = dataclasses.replace(q, L=self.L)
                if max(q.kv) >= self.L:
                    continue
            if q.kind == "vq" and q.bits > 4:
                continue
            out.append(q)
        return out


def quantize_(model: nn.Module, config: QPaletteConfig) -> nn.Module:
    """Sensitivities, the MSQ solver and the swap, in one call (torchao-style, in place).

    Example:
        >>> from neurips25_core.models import tiny_llama, tiny_llama_config
        >>> m = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2))
        >>> cfg = QPaletteConfig(bits=3, palette=["nuq-2", "nuq-3", "nuq-4"])
        >>> _ = quantize_(m, cfg)
        >>> type(m.model.layers[0].mlp.down_proj).__name__
        'QPaletteLinear'
    """
    from .allocation import (
        estimate_sensitivities,
        gaussian_error_table,
        proxy_latency,
        solve_latency_msq,
        solve_memory_msq,
    )

    if not isinstance(config, QPaletteConfig):
        raise TypeError(f"config: expected a QPaletteConfig, got {type(config).__name__}")
    names = llama_projections(model)
    if not names:
        raise ValueError("model: found no q/k/v/o/gate/up/down nn.Linear projections")
    modules = dict(model.named_modules())
    shapes = {n: tuple(modules[n].weight.shape) for n in names}
    palette = config.resolved_palette()
    table = gaussian_error_table(palette)
    sens = estimate_sensitivities(model, names, tokens=config.tokens, t=config.t)
    if config.objective == "memory":
        assignment, groups = solve_memory_msq(
            sens, shapes, config.bits, table, palette, families=families(names)
        )
    else:
        budget = config.latency_budget
        if budget is None:
            ref = parse_spec(f"tcq-{config.bits:g}", L=config.L)
            budget = sum(proxy_latency(ref, s) for s in shapes.values())
        assignment, groups = solve_latency_msq(
            sens, shapes, llama_blocks(model), table, budget, palette
        )
    quantize_llama(model, assignment, groups, seed=config.seed)
    model.qpalette_sensitivities = sens
    return model


def is_quantized(module: nn.Module) -> bool:
    return isinstance(module, (QPaletteLinear, FusedMember))
