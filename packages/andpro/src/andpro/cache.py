"""``PressCache``: a transformers ``DynamicCache`` whose layers hold per-head compacted KV plus a mask.

After compression, each head of a layer keeps its own number of tokens. A layer stores them
compacted to the left in ``[B, H, L_max, d]`` (``L_max`` the largest per-head count), with

- ``valid``: ``[B, H, P]`` bool, False for padding slots (``P`` = physical length);
- ``positions``: ``[B, H, P]`` long, the original position of every slot, used for the causal /
  padding mask (RoPE is already applied to cached keys, so nothing is re-rotated);
- ``logical_length``: the number of tokens seen, which :meth:`get_seq_length` returns, so new
  tokens get positions ``L + t`` whatever was evicted.

The press's attention function (:mod:`andpro.attention`) masks invalid slots with ``-inf``, so
per-head budgets are exact and no fake keys are needed.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

__all__ = ["PressCache", "PressLayer"]


class PressLayer(DynamicLayer):
    """One layer of a :class:`PressCache` (see the module docstring)."""

    is_croppable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.valid: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.logical_length = 0
        self.query_head_repeat = 1  # > 1 once compressed per query head (keys repeated to H_q)
        self.compressed = False
        self.prefill_pending = False

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``[B, H_kv, q, d]`` new keys/values at positions ``logical_length + arange(q)``."""
        first = not self.is_initialized or self.logical_length == 0
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.query_head_repeat > 1:
            key_states = key_states.repeat_interleave(self.query_head_repeat, dim=1)
            value_states = value_states.repeat_interleave(self.query_head_repeat, dim=1)
        b, h, q, _ = key_states.shape
        pos = torch.arange(self.logical_length, self.logical_length + q, device=key_states.device)
        new_pos = pos.expand(b, h, q)
        new_valid = torch.ones(b, h, q, dtype=torch.bool, device=key_states.device)
        if self.valid is None:
            self.keys, self.values = key_states, value_states
            self.positions, self.valid = new_pos.clone(), new_valid
        else:
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
            self.positions = torch.cat([self.positions, new_pos], dim=-1)
            self.valid = torch.cat([self.valid, new_valid], dim=-1)
        self.logical_length += q
        if first:
            self.prefill_pending = True
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """The logical length: every token seen, evicted or not."""
        return self.logical_length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.logical_length + query_length, 0

    @property
    def physical_length(self) -> int:
        return 0 if self.keys is None or self.keys.dim() < 3 else self.keys.shape[-2]

    def kept_counts(self) -> torch.Tensor:
        """``[B, H]`` number of valid (kept) slots per head."""
        return self.valid.sum(-1)

    def keep_mask(self, length: int | None = None) -> torch.Tensor:
        """``[B, H, length]`` bool: which original positions each head still holds (default: all seen)."""
        length = self.logical_length if length is None else length
        b, h, _ = self.valid.shape
        mask = torch.zeros(b, h, length + 1, dtype=torch.bool, device=self.valid.device)
        pos = torch.where(self.valid & (self.positions < length), self.positions, length)
        mask.scatter_(-1, pos, True)
        return mask[..., :length]

    def compress(self, keep: torch.Tensor) -> None:
        """Keep, per head, the tokens where ``keep`` ([B, H', P] bool) is True, compacted to the left.

        ``H'`` is ``H_kv``, or ``H_q`` for per-query-head selection, in which case keys and values
        are first repeated to the query heads (``repeat_kv``) and later appends are repeated too.
        """
        b, h, p, d = self.keys.shape
        if keep.shape[0] != b or keep.shape[-1] != p or keep.shape[1] % h:
            raise ValueError(
                f"keep: expected [B={b}, H, P={p}] with H a multiple of {h}, got {tuple(keep.shape)}"
            )
        repeat = keep.shape[1] // h
        keys, values, positions, valid = self.keys, self.values, self.positions, self.valid
        if repeat > 1:
            keys, values = keys.repeat_interleave(repeat, 1), values.repeat_interleave(repeat, 1)
            positions, valid = (
                positions.repeat_interleave(repeat, 1),
                valid.repeat_interleave(repeat, 1),
            )
            self.query_head_repeat *= repeat
        keep = keep & valid
        counts = keep.sum(-1)
        l_max = int(counts.max())
        # Kept slots first, in their original order (stable sort on "not kept").
        order = torch.sort((~keep).to(torch.int8), dim=-1, stable=True).indices[..., :l_max]
        idx = order.unsqueeze(-1).expand(-1, -1, -1, d)
        self.keys = keys.gather(2, idx)
        self.values = values.gather(2, idx)
        self.positions = positions.gather(2, order)
        self.valid = torch.arange(l_max, device=keep.device) < counts.unsqueeze(-1)
        self.compressed = True

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.valid is not None:
            super().reorder_cache(beam_idx)
            self.valid = self.valid.index_select(0, beam_idx.to(self.valid.device))
            self.positions = self.positions.index_select(0, beam_idx.to(self.positions.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.valid is not None:
            super().batch_repeat_interleave(repeats)
            self.valid = self.valid.repeat_interleave(repeats, dim=0)
            self.positions = self.positions.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.valid is not None:
            super().batch_select_indices(indices)
            self.valid = self.valid[indices, ...]
            self.positions = self.positions[indices, ...]

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("PressCache layers cannot be cropped (evicted tokens are gone)")

    def reset(self) -> None:
        super().reset()
        self.valid = self.positions = None
        self.logical_length = 0
        self.query_head_repeat = 1
        self.compressed = False
        self.prefill_pending = False


class PressCache(DynamicCache):
    """A ``DynamicCache`` of :class:`PressLayer` (per-head compacted KV with a validity mask).

    Use it only inside the press's context (``with press(model) as cache``): outside it, the model's
    own attention would not apply the per-head mask, so :meth:`update` refuses compressed layers.
    """

    def __init__(self, num_layers: int | None = None) -> None:
        Cache.__init__(self, layer_class_to_replicate=PressLayer)
        if num_layers is not None:
            self.layers = [PressLayer() for _ in range(num_layers)]
        self.active = False

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if not self.active and layer_idx < len(self.layers) and self.layers[layer_idx].compressed:
            raise RuntimeError(
                "PressCache: this cache holds compressed layers and can only be used inside its press's "
                "context (`with press(model) as cache:`), where the attention applies its per-head mask"
            )
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def kept_counts_per_layer(self) -> list[list[list[int]]]:
        """Per layer, the ``[B, H]`` kept-token counts as nested lists."""
        return [layer.kept_counts().tolist() for layer in self.layers if layer.valid is not None]

    def memory(self) -> dict[str, int]:
        """Token counts: ``physical`` = sum over layers of B·H·P slots held, ``logical`` = valid slots."""
        phys = sum(layer.valid.numel() for layer in self.layers if layer.valid is not None)
        logical = sum(int(layer.valid.sum()) for layer in self.layers if layer.valid is not None)
        nbytes = sum(
            layer.keys.numel() * layer.keys.element_size() * 2
            for layer in self.layers
            if layer.valid is not None
        )
        return {"physical_slots": phys, "kept_slots": logical, "bytes": nbytes}
