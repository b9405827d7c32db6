"""Which mixer each layer of a hybrid gets, what its cache costs, and SMART / uniform placement.

* :class:`HybridLayout` — a Llama config plus the MLA / GQA / Mamba2 layer lists (checked: no
  duplicates, in range, no overlap, a partition of the layers).
* :func:`kv_cache_bytes` — bytes of per-token cache for ``seq_len`` tokens of one sequence: GQA
  2·n_kv·d_h, MLA r_kv + d_rope, Mamba2 0 per token (its constant state is
  :func:`recurrent_state_bytes`). The ratio of a hybrid to its Llama reproduces the official 3.91 %
  (1B: 4 MLA + 12 Mamba2), 2.01 % (3B: 6 + 22) and 2.73 % (8B: 8 + 24, r_kv 160).
* :func:`smart_select` — SMART's placement (paper Algorithm 2): N near-equal contiguous segments,
  layer 0 always ("terminal preservation"), each other segment its argmax-sensitivity layer.
* :func:`uniform_select` — N evenly spaced layers starting at 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .mla import MLAAttention, MLAConfig, _llama_shape

__all__ = [
    "HybridLayout",
    "kv_cache_bytes",
    "recurrent_state_bytes",
    "smart_select",
    "uniform_select",
]


def _layer_list(name: str, layers, num_layers: int) -> tuple[int, ...]:
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence):
        raise TypeError(
            f"{name}: expected a sequence of layer indices, got {type(layers).__name__}"
        )
    out = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"{name}: expected int layer indices, got {i!r}")
        if not 0 <= i < num_layers:
            raise ValueError(f"{name}: layer {i} is out of range for {num_layers} layers")
        out.append(i)
    if len(set(out)) != len(out):
        dup = sorted({i for i in out if out.count(i) > 1})
        raise ValueError(f"{name}: duplicate layers {dup}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class HybridLayout:
    """The mixer of every layer of a hybrid built from ``llama_config``.

    Args:
        llama_config: the teacher's ``LlamaConfig`` (L, n_h, n_kv, d_h).
        mla_layers: layers that become MLA.
        mla_config: their ranks (required when ``mla_layers`` is non-empty).
        mamba_layers: layers that become Mamba2; None: every layer not in ``mla_layers`` or
            ``gqa_layers``.
        gqa_layers: layers that keep the original attention (the MambaInLlama baseline).

    The three lists must be disjoint and (when ``mamba_layers`` is given) cover every layer.

    Example:
        >>> from transformers import LlamaConfig
        >>> llama = LlamaConfig(
        ...     hidden_size=64,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ...     num_hidden_layers=8,
        ...     intermediate_size=192,
        ...     vocab_size=256,
        ... )
        >>> layout = HybridLayout(llama, mla_layers=[0, 4], mla_config=MLAConfig(48, 16, 8, 8, 16))
        >>> layout.kinds
        ('mla', 'mamba2', 'mamba2', 'mamba2', 'mla', 'mamba2', 'mamba2', 'mamba2')
    """

    llama_config: object
    mla_layers: Sequence[int] = ()
    mla_config: MLAConfig | None = None
    mamba_layers: Sequence[int] | None = None
    gqa_layers: Sequence[int] = ()

    def __post_init__(self):
        _llama_shape(self.llama_config)
        L = self.llama_config.num_hidden_layers
        mla = _layer_list("mla_layers", self.mla_layers, L)
        gqa = _layer_list("gqa_layers", self.gqa_layers, L)
        if set(mla) & set(gqa):
            raise ValueError(
                f"mla_layers, gqa_layers: overlapping layers {sorted(set(mla) & set(gqa))}"
            )
        if self.mamba_layers is None:
            mamba = tuple(i for i in range(L) if i not in mla and i not in gqa)
        else:
            mamba = _layer_list("mamba_layers", self.mamba_layers, L)
            both = set(mamba) & (set(mla) | set(gqa))
            if both:
                raise ValueError(
                    f"mamba_layers: layers {sorted(both)} are also in mla_layers or gqa_layers"
                )
            missing = sorted(set(range(L)) - set(mla) - set(gqa) - set(mamba))
            if missing:
                raise ValueError(
                    f"mamba_layers: layers {missing} are in no list (mla_layers, gqa_layers, mamba_layers)"
                )
        if mla and not isinstance(self.mla_config, MLAConfig):
            raise TypeError(
                f"mla_config: expected an MLAConfig for mla_layers {list(mla)}, got {type(self.mla_config).__name__}"
            )
        object.__setattr__(self, "mla_layers", mla)
        object.__setattr__(self, "gqa_layers", gqa)
        object.__setattr__(self, "mamba_layers", mamba)

    @property
    def kinds(self) -> tuple[str, ...]:
        """``"mla"``, ``"gqa"`` or ``"mamba2"`` per layer."""
        L = self.llama_config.num_hidden_layers
        return tuple(
            "mla" if i in self.mla_layers else "gqa" if i in self.gqa_layers else "mamba2"
            for i in range(L)
        )


def _dtype_size(dtype) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype: expected a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def _per_token_widths(model_or_config) -> list[int]:
    """Cached numbers per token for every layer."""
    if isinstance(model_or_config, HybridLayout):
        _, _, n_kv, d_h = _llama_shape(model_or_config.llama_config)
        c = model_or_config.mla_config
        widths = {"gqa": 2 * n_kv * d_h, "mamba2": 0, "mla": c.cache_width if c is not None else 0}
        return [widths[k] for k in model_or_config.kinds]
    layers = getattr(getattr(model_or_config, "model", None), "layers", None)
    if layers is not None:  # a LlamaForCausalLM (possibly with swapped mixers)
        out = []
        for layer in layers:
            mixer = getattr(layer, "self_attn", None)
            if isinstance(mixer, MLAAttention):
                out.append(mixer.mla_config.cache_width)
            elif mixer is not None and hasattr(mixer, "k_proj") and hasattr(mixer, "v_proj"):
                out.append(mixer.k_proj.out_features + mixer.v_proj.out_features)
            else:
                out.append(0)
        return out
    if hasattr(model_or_config, "num_hidden_layers") and hasattr(
        model_or_config, "num_key_value_heads"
    ):
        _, _, n_kv, d_h = _llama_shape(model_or_config)
        return [2 * n_kv * d_h] * model_or_config.num_hidden_layers
    raise TypeError(
        "model_or_config: expected a LlamaForCausalLM, a LlamaConfig or a HybridLayout, "
        f"got {type(model_or_config).__name__}"
    )


def kv_cache_bytes(model_or_config, seq_len: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of per-token cache (KV or latents) for ``seq_len`` tokens of one sequence, all layers.

    GQA layers count 2·n_kv·d_h numbers per token, MLA layers r_kv + d_rope, other mixers
    (Mamba2) 0 — their constant state is :func:`recurrent_state_bytes`.

    Args:
        model_or_config: a ``LlamaForCausalLM`` (its layers' ``self_attn`` are inspected), a
            ``LlamaConfig`` (all GQA) or a :class:`HybridLayout`.
        seq_len: tokens cached (≥ 0).
        dtype: the cache dtype.

    Example:
        >>> from transformers import LlamaConfig
        >>> llama = LlamaConfig(
        ...     hidden_size=2048,
        ...     num_attention_heads=32,
        ...     num_key_value_heads=8,
        ...     num_hidden_layers=16,
        ...     intermediate_size=8192,
        ... )  # Llama-3.2-1B shapes
        >>> zebra = HybridLayout(
        ...     llama, mla_layers=[0, 5, 10, 14], mla_config=MLAConfig(1344, 128, 32, 32, 64)
        ... )
        >>> round(100 * kv_cache_bytes(zebra, 4096) / kv_cache_bytes(llama, 4096), 2)
        3.91
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"seq_len: expected an int >= 0, got {seq_len!r}")
    size = _dtype_size(dtype)
    return sum(_per_token_widths(model_or_config)) * seq_len * size


def recurrent_state_bytes(
    layout: HybridLayout, dtype: torch.dtype = torch.bfloat16, d_conv: int = 4
) -> int:
    """Constant decode state of the Mamba2 layers of ``layout`` for one sequence.

    Per Mamba2 layer (d_state = headdim = d_h, nheads = n_h): the SSM state n_h·d_h·d_h plus the
    conv window d_conv·(d_inner + 2·d_xb), with d_inner = n_h·d_h and d_xb = n_kv·d_h.
    """
    if not isinstance(layout, HybridLayout):
        raise TypeError(f"layout: expected a HybridLayout, got {type(layout).__name__}")
    if isinstance(d_conv, bool) or not isinstance(d_conv, int) or d_conv < 1:
        raise ValueError(f"d_conv: expected a positive int, got {d_conv!r}")
    _, n_h, n_kv, d_h = _llama_shape(layout.llama_config)
    per_layer = n_h * d_h * d_h + d_conv * (n_h * d_h + 2 * n_kv * d_h)
    return len(layout.mamba_layers) * per_layer * _dtype_size(dtype)


def _n_layers(name: str, value, num_layers: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if not 1 <= value <= num_layers:
        raise ValueError(
            f"{name}: expected 1 <= {name} <= {num_layers} (the number of layers), got {value}"
        )
    return value


def _segments(num_layers: int, n: int) -> list[range]:
    """``n`` contiguous near-equal segments (the first ``num_layers % n`` one layer longer)."""
    base, extra = divmod(num_layers, n)
    starts = [i * base + min(i, extra) for i in range(n + 1)]
    return [range(starts[i], starts[i + 1]) for i in range(n)]


def smart_select(sensitivity, n_mla: int) -> list[int]:
    """SMART placement: layer 0, then the argmax-sensitivity layer of each other segment.

    The L layers are split into ``n_mla`` contiguous near-equal segments (sizes differ by at most
    one, longer first). Segment 0 takes layer 0 (terminal preservation); every other segment takes
    its layer of largest sensitivity, ties to the lower index.

    Args:
        sensitivity: s_ℓ per layer, 1-D (a tensor or a sequence of floats), finite.
        n_mla: N, the number of MLA layers (1 ≤ N ≤ L).

    Example:
        >>> smart_select([0.0, 1, 3, 2, 5, 5, 1, 0], 2)  # segments [0..3] and [4..7]; 4 and 5 tie
        [0, 4]
    """
    s = (
        torch.as_tensor(sensitivity, dtype=torch.float64)
        if not isinstance(sensitivity, torch.Tensor)
        else sensitivity
    )
    if s.dim() != 1 or s.numel() == 0:
        raise ValueError(
            f"sensitivity: expected a non-empty 1-D sequence, got shape {list(s.shape)}"
        )
    s = s.detach().double().cpu()
    if not bool(torch.isfinite(s).all()):
        raise ValueError("sensitivity: expected finite values")
    n = _n_layers("n_mla", n_mla, s.numel())
    chosen = [0]
    for seg in _segments(s.numel(), n)[1:]:
        values = s[seg.start : seg.stop]
        best = int(
            torch.nonzero(values == values.max())[0]
        )  # first maximum: ties to the lower index
        chosen.append(seg.start + best)
    return chosen


def uniform_select(num_layers: int, n_mla: int) -> list[int]:
    """N evenly spaced layers starting at 0: ⌊i·L/N⌋ for i < N.

    Example:
        >>> uniform_select(8, 2), uniform_select(8, 4), uniform_select(32, 8)[-1]
        ([0, 4], [0, 2, 4, 6], 28)
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected a positive int, got {num_layers!r}")
    n = _n_layers("n_mla", n_mla, num_layers)
    return [i * num_layers // n for i in range(n)]
