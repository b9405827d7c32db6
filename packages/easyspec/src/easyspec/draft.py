"""The fuzzy (layer-parallel) draft executor with its own KV cache.

Layers 0 and L-1 run sequentially; layers 1..L-2 form consecutive groups of ``group_size``. In a
group every attention sublayer reads the group's input ``x`` (so they can run at once, on
different devices in the paper); then, in order, ``h <- h + a_l; h <- h + MLP_l(m_l(h))``
(``merge="interleave"``; ``group_size=1`` is the exact model) or ``h <- x + sum(a_l)`` followed by
the MLPs (``merge="sum_first"``, an ablation). Only attention is parallelised. Multi-token
forwards (:meth:`FuzzyDraft.prefill`, :meth:`FuzzyDraft.calibrate`) are always exact.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["SUPPORTED_MODEL_TYPES", "FuzzyDraft", "layer_groups"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
BACKENDS = ("sequential", "stacked", "streams", "gloo")


def layer_groups(
    num_layers: int, group_size: int, exclude_first_last: bool = True
) -> list[list[int]]:
    """The draft's layer groups.

    >>> layer_groups(10, 4)
    [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9]]
    >>> layer_groups(6, 4, exclude_first_last=False)
    [[0, 1, 2, 3], [4, 5]]
    """
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size: expected an int >= 1, got {group_size!r}")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected an int >= 1, got {num_layers!r}")
    if exclude_first_last and num_layers >= 2:
        head, middle, tail = [[0]], list(range(1, num_layers - 1)), [[num_layers - 1]]
    else:
        head, middle, tail = [], list(range(num_layers)), []
    chunks = [middle[i : i + group_size] for i in range(0, len(middle), group_size)]
    return head + chunks + tail


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama computes it (variance in float32, then back to the input dtype)."""
    dtype = x.dtype
    xf = x.float() if dtype != torch.float64 else x
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dtype)


class FuzzyDraft:
    """Run a Llama/Qwen2-family causal LM as a fuzzy layer-parallel draft, batch 1.

    Args:
        model: a transformers ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` / ``MistralForCausalLM``.
            Weights are read (not copied) from ``model.model.layers[i]``, ``model.model.norm``,
            ``model.lm_head``; RoPE comes from ``model.model.rotary_emb`` at true positions.
        group_size: N, the layer-parallel size (1 = the exact draft).
        exclude_first_last: keep layers 0 and L-1 sequential (the paper's choice).
        merge: ``"interleave"`` (our reading of the paper; N = 1 exact) or ``"sum_first"``.
        backend: ``"sequential"`` (reference), ``"stacked"`` (a group's projections as one batched
            matmul each, the single-device speed-up), ``"streams"`` (one CUDA stream per layer in a
            group; CUDA only) or ``"gloo"`` (one ``torch.distributed`` process per group slot:
            rank j runs the j-th attention of every fuzzy group and the ranks all-gather the
            outputs and K/V, so every rank holds the full cache and continues identically; the
            multi-device layout emulated on CPU processes, see :mod:`easyspec.dist`).
        max_length: capacity of the KV cache (default ``config.max_position_embeddings``).
        process_group: the group for ``backend="gloo"`` (default: the world); its size must be
            at least the largest group.

    >>> from neurips25_core.models import tiny_llama, tiny_llama_config
    >>> model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=6, num_heads=2))
    >>> d = FuzzyDraft(model, group_size=2)
    >>> d.groups
    [[0], [1, 2], [3, 4], [5]]
    >>> d.prefill(torch.tensor([[1, 2, 3]])).shape
    torch.Size([3, 256])
    >>> d.step(4).shape, d.length
    (torch.Size([256]), 4)
    """

    def __init__(
        self,
        model: nn.Module,
        group_size: int = 4,
        exclude_first_last: bool = True,
        merge: str = "interleave",
        backend: str = "sequential",
        max_length: int | None = None,
        process_group=None,
    ) -> None:
        config = getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES or not hasattr(model, "model"):
            raise TypeError(
                f"model: expected a transformers causal LM of type {SUPPORTED_MODEL_TYPES}, "
                f"got {type(model).__name__} (model_type={model_type!r})"
            )
        if merge not in ("interleave", "sum_first"):
            raise ValueError(f"merge: expected 'interleave' or 'sum_first', got {merge!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        self.model = model
        self.config = config
        self.layers = list(model.model.layers)
        self.groups = layer_groups(len(self.layers), group_size, exclude_first_last)
        self.group_size = group_size
        self.merge = merge
        self.backend = backend
        w = model.model.embed_tokens.weight
        self.device, self.dtype = w.device, w.dtype
        if backend == "streams" and self.device.type != "cuda":
            raise ValueError(f"backend: 'streams' needs a CUDA model, got device {self.device}")
        self.num_heads = config.num_attention_heads
        self.num_kv = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.eps = config.rms_norm_eps
        self.vocab_size = config.vocab_size
        self.capacity = int(max_length or config.max_position_embeddings)
        shape = (len(self.layers), self.num_kv, self.capacity, self.head_dim)
        self._k = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self._v = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.length = 0
        self.stats = {"forwards": 0, "stages": 0, "tokens": 0}
        self._stacked = [self._stack(g) for g in self.groups] if backend == "stacked" else None
        self._streams = None
        self.process_group = process_group
        if backend == "gloo":
            import torch.distributed as dist

            if not dist.is_available() or not dist.is_initialized():
                raise ValueError(
                    "backend: 'gloo' needs an initialised torch.distributed process group "
                    "(run under easyspec.dist.run_layer_parallel)"
                )
            world = dist.get_world_size(process_group)
            widest = max(len(g) for g in self.groups)
            if world < widest:
                raise ValueError(
                    f"backend: 'gloo' needs one process per group slot, expected a world size "
                    f">= {widest}, got {world}"
                )
            self._rank = dist.get_rank(process_group)
            self._world = world

    # ---------------------------------------------------------------- weights
    def _stack(self, group: list[int]):
        if len(group) == 1:
            return None
        attn = [self.layers[i].self_attn for i in group]

        def st(name):
            return torch.stack([getattr(a, name).weight.detach() for a in attn])

        def bias(name):
            bs = [getattr(a, name).bias for a in attn]
            return None if bs[0] is None else torch.stack([b.detach() for b in bs])

        norms = torch.stack([self.layers[i].input_layernorm.weight.detach() for i in group])
        return {
            "norm": norms[:, None, :],
            "q": st("q_proj").transpose(1, 2),
            "k": st("k_proj").transpose(1, 2),
            "v": st("v_proj").transpose(1, 2),
            "o": st("o_proj").transpose(1, 2),
            "qb": bias("q_proj"),
            "kb": bias("k_proj"),
            "vb": bias("v_proj"),
            "ob": bias("o_proj"),
            "slice": slice(group[0], group[-1] + 1),
        }

    # ---------------------------------------------------------------- cache
    def reset(self) -> None:
        """Empty the cache (keeps the buffers)."""
        self.length = 0

    def truncate(self, pos: int) -> None:
        """Keep cache positions ``< pos`` (entries beyond are ignored and later overwritten)."""
        if not isinstance(pos, int) or not 0 <= pos <= self.length:
            raise ValueError(f"pos: expected an int in [0, {self.length}], got {pos!r}")
        self.length = pos

    def cache(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s cached (K, V), each (num_kv_heads, length, head_dim), RoPE applied."""
        return self._k[layer, :, : self.length], self._v[layer, :, : self.length]

    # ---------------------------------------------------------------- forwards
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Reset the cache and run the exact draft over ``ids`` (1, T) or (T,): logits (T, V)."""
        self.reset()
        return self._forward(self._ids(ids), exact=True)

    def calibrate(self, ids: torch.Tensor) -> torch.Tensor:
        """Bonus calibration: an exact forward over ``ids`` appended at the current length.

        Call after :meth:`truncate` to the committed length; overwrites fuzzy K/V with exact ones.
        """
        return self._forward(self._ids(ids), exact=True)

    def extend(
        self,
        ids: torch.Tensor,
        exact: bool = False,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Append ``ids`` (T tokens) at cache slots ``length .. length+T-1``: logits (T, V).

        Args:
            ids: the tokens, (T,) or (1, T).
            exact: an exact forward (default: fuzzy).
            positions: the tokens' true positions for RoPE, (T,) ints (default: their slots).
                Token trees put siblings in different slots at the same position.
            mask: which cache slots each token attends to, (T, length + T) bool (default:
                causal over slots). A token tree's mask is "the committed prefix, the node's
                ancestors and itself" (see :func:`easyspec.tree.draft_tree`).
        """
        ids = self._ids(ids)
        t, s = ids.numel(), self.length + ids.numel()
        if positions is not None:
            positions = torch.as_tensor(positions, device=self.device)
            if positions.shape != (t,) or positions.is_floating_point():
                raise ValueError(
                    f"positions: expected {t} integer positions, got {tuple(positions.shape)} "
                    f"{positions.dtype}"
                )
            if int(positions.min()) < 0 or int(positions.max()) >= self.capacity:
                raise ValueError(f"positions: expected values in [0, {self.capacity})")
        if mask is not None:
            mask = torch.as_tensor(mask, device=self.device)
            if mask.dtype != torch.bool or mask.shape != (t, s):
                raise ValueError(
                    f"mask: expected a bool tensor of shape ({t}, {s}), got "
                    f"{mask.dtype} {tuple(mask.shape)}"
                )
            if not bool(mask.any(-1).all()):
                raise ValueError("mask: every token must attend to at least one slot")
        return self._forward(ids, exact=exact, positions=positions, mask=mask)

    def select(self, start: int, slots: list[int]) -> None:
        """Keep slots ``< start``, then move ``slots`` (in order) to ``start, start + 1, ...``.

        After a token-tree verification this keeps the accepted path's K/V (already rotated at
        their true positions, which a path's consecutive slots match) and drops its siblings.
        """
        if not isinstance(start, int) or not 0 <= start <= self.length:
            raise ValueError(f"start: expected an int in [0, {self.length}], got {start!r}")
        slots = [int(i) for i in slots]
        if any(not start <= i < self.length for i in slots):
            raise ValueError(f"slots: expected slots in [{start}, {self.length}), got {slots}")
        if slots:
            idx = torch.tensor(slots, device=self.device)
            end = start + len(slots)
            self._k[:, :, start:end] = self._k[:, :, idx].clone()
            self._v[:, :, start:end] = self._v[:, :, idx].clone()
        self.length = start + len(slots)

    def step(self, token: int | torch.Tensor) -> torch.Tensor:
        """One fuzzy decode step on ``token``: the next-token logits (V,)."""
        t = torch.as_tensor(token).reshape(1)
        return self._forward(self._ids(t), exact=False)[-1]

    def _ids(self, ids) -> torch.Tensor:
        ids = torch.as_tensor(ids)
        if ids.dim() == 2:
            if ids.shape[0] != 1:
                raise ValueError(f"ids: batch size 1 only, got shape {tuple(ids.shape)}")
            ids = ids[0]
        if ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(
                f"ids: expected a non-empty (T,) or (1, T) tensor, got {tuple(ids.shape)}"
            )
        if ids.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool):
            raise TypeError(f"ids: expected an integer tensor, got {ids.dtype}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(f"ids: expected ids in [0, {self.vocab_size}), got range [{lo}, {hi}]")
        if self.length + ids.numel() > self.capacity:
            raise ValueError(
                f"ids: {ids.numel()} tokens after {self.length} exceed max_length={self.capacity}"
            )
        return ids.to(self.device)

    @torch.no_grad()
    def _forward(
        self,
        ids: torch.Tensor,
        exact: bool,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        start, t = self.length, ids.numel()
        h = self.model.model.embed_tokens(ids)[None]  # (1, T, d)
        if positions is None:
            positions = torch.arange(start, start + t, device=self.device)
        cos, sin = self.model.model.rotary_emb(h, positions[None])
        rope = (cos[:, None], sin[:, None])  # (1, 1, T, hd)
        if mask is None and t > 1:  # causal over slots
            slot = torch.arange(start, start + t, device=self.device)[:, None]
            mask = torch.arange(start + t, device=self.device)[None, :] <= slot
        elif mask is not None and bool(mask.all()):
            mask = None  # attends everything: the unmasked kernel, as a chain step
        stages = 0
        for gi, group in enumerate(self.groups):
            if exact or len(group) == 1:
                for i in group:
                    layer = self.layers[i]
                    h = h + self._attn(
                        i, _rms(h, layer.input_layernorm.weight, self.eps), rope, start, mask
                    )
                    h = h + self._mlp(i, h)
                    stages += 1
                continue
            x = h
            if self.backend == "stacked":
                outs = self._attn_stacked(gi, x, rope, start, mask)
            elif self.backend == "streams":
                outs = self._attn_streams(group, x, rope, start, mask)
            elif self.backend == "gloo":
                outs = self._attn_gloo(group, x, rope, start, mask)
            else:
                outs = [
                    self._attn(
                        i,
                        _rms(x, self.layers[i].input_layernorm.weight, self.eps),
                        rope,
                        start,
                        mask,
                    )
                    for i in group
                ]
            if self.merge == "sum_first":
                h = x + sum(outs)
                for i in group:
                    h = h + self._mlp(i, h)
            else:
                for i, a in zip(group, outs):
                    h = h + a
                    h = h + self._mlp(i, h)
            stages += 1
        self.length = start + t
        self.stats["forwards"] += 1
        self.stats["stages"] += stages
        self.stats["tokens"] += t
        h = _rms(h, self.model.model.norm.weight, self.eps)
        return self.model.lm_head(h)[0]

    def _mlp(self, i: int, h: torch.Tensor) -> torch.Tensor:
        layer = self.layers[i]
        return layer.mlp(_rms(h, layer.post_attention_layernorm.weight, self.eps))

    def _sdpa(self, q, k, v, mask):
        """q (B, H, T, hd); k, v (B, Hkv, S, hd); mask None (attend all) or (T, S) bool."""
        rep = self.num_heads // self.num_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=-3)
            v = v.repeat_interleave(rep, dim=-3)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim)
        )

    def _attn(self, i: int, x: torch.Tensor, rope, start: int, mask) -> torch.Tensor:
        """Attention of layer ``i`` on normed input ``x`` (1, T, d); writes its K/V to the cache."""
        a = self.layers[i].self_attn
        t = x.shape[1]
        q = a.q_proj(x).view(1, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = a.k_proj(x).view(1, t, self.num_kv, self.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(1, t, self.num_kv, self.head_dim).transpose(1, 2)
        cos, sin = rope
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        self._k[i, :, start : start + t] = k[0]
        self._v[i, :, start : start + t] = v[0]
        kk = self._k[i, :, : start + t][None]
        vv = self._v[i, :, : start + t][None]
        o = self._sdpa(q, kk, vv, mask)
        return a.o_proj(o.transpose(1, 2).reshape(1, t, self.num_heads * self.head_dim))

    def _attn_stacked(self, gi: int, x: torch.Tensor, rope, start: int, mask) -> list[torch.Tensor]:
        """All attentions of group ``gi`` at once: one batched matmul per projection."""
        w = self._stacked[gi]
        n = w["norm"].shape[0]
        t = x.shape[1]
        xn = _rms(x.expand(n, t, x.shape[-1]), w["norm"], self.eps)  # (n, T, d)

        def proj(name):
            y = torch.bmm(xn, w[name])
            return y if w[name + "b"] is None else y + w[name + "b"][:, None]

        q = proj("q").view(n, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = proj("k").view(n, t, self.num_kv, self.head_dim).transpose(1, 2)
        v = proj("v").view(n, t, self.num_kv, self.head_dim).transpose(1, 2)
        cos, sin = rope
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        sl = w["slice"]
        self._k[sl, :, start : start + t] = k
        self._v[sl, :, start : start + t] = v
        o = self._sdpa(q, self._k[sl, :, : start + t], self._v[sl, :, : start + t], mask)
        o = o.transpose(1, 2).reshape(n, t, self.num_heads * self.head_dim)
        out = torch.bmm(o, w["o"])
        if w["ob"] is not None:
            out = out + w["ob"][:, None]
        return [out[j : j + 1] for j in range(n)]

    def _attn_streams(
        self, group: list[int], x: torch.Tensor, rope, start: int, mask
    ) -> list[torch.Tensor]:
        """One CUDA stream per attention of the group (CUDA only)."""
        if self._streams is None:
            self._streams = [torch.cuda.Stream(device=self.device) for _ in range(self.group_size)]
        main = torch.cuda.current_stream(self.device)
        outs = []
        for j, i in enumerate(group):
            s = self._streams[j]
            s.wait_stream(main)
            with torch.cuda.stream(s):
                xn = _rms(x, self.layers[i].input_layernorm.weight, self.eps)
                outs.append(self._attn(i, xn, rope, start, mask))
        for j in range(len(group)):
            main.wait_stream(self._streams[j])
        return outs

    def _attn_gloo(
        self, group: list[int], x: torch.Tensor, rope, start: int, mask
    ) -> list[torch.Tensor]:
        """Rank j computes the j-th attention of the group; one all-gather shares outputs + K/V."""
        import torch.distributed as dist

        t, d = x.shape[1], x.shape[-1]
        kv = self.num_kv * t * self.head_dim
        j = self._rank
        if j < len(group):
            i = group[j]
            a = self._attn(
                i, _rms(x, self.layers[i].input_layernorm.weight, self.eps), rope, start, mask
            )
            k = self._k[i, :, start : start + t]
            v = self._v[i, :, start : start + t]
            buf = torch.cat([a.reshape(-1), k.reshape(-1), v.reshape(-1)])
        else:  # an idle slot (the last group may be narrower than the world)
            buf = torch.zeros(d * t + 2 * kv, device=x.device, dtype=x.dtype)
        bufs = [torch.empty_like(buf) for _ in range(self._world)]
        dist.all_gather(bufs, buf.contiguous(), group=self.process_group)
        outs = []
        for jj, i in enumerate(group):
            b = bufs[jj]
            outs.append(b[: d * t].view(1, t, d))
            if jj != j:
                shape = (self.num_kv, t, self.head_dim)
                self._k[i, :, start : start + t] = b[d * t : d * t + kv].view(shape)
                self._v[i, :, start : start + t] = b[d * t + kv :].view(shape)
        return outs
