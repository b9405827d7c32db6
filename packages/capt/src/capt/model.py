"""The peft-style adapter: ``get_peft_model(model, CapsuleConfig(...)) -> CapsuleModel``.

Called the way peft's prompt tuning is called (and the way ``ptmoe`` is)::

    model = capt.get_peft_model(base, capt.CapsuleConfig())
    model.print_trainable_parameters()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    model.save_pretrained("adapter")  # adapter_config.json + adapter_model.safetensors
    model = capt.CapsuleModel.from_pretrained(base, "adapter")

The k' capsule slots are prepended to the input embeddings (attention mask: k' leading ones;
labels: k' leading −100; position ids: the cumulative sum of the mask, so the capsule sits at
position 0 under left or right padding). Forward pre-hooks (``with_kwargs=True``) on the selected
decoder layers overwrite the slots with ``c_ℓ`` — only on a pass whose first column is position 0,
never on a KV-cache decode step. The returned logits include the slot positions, as in peft.

Supported: decoder-only models with ``model.model.layers`` (Llama, Qwen2, Mistral) and T5
(``T5ForConditionalGeneration``, ``T5EncoderModel``): there the capsules go into the encoder blocks
only (``model.encoder.block``), the slots are prepended to the encoder input (no position ids: the
relative position bias absorbs the shift), decoder labels are left as they are, and the default
instance is every non-padding encoder token.

Gradient checkpointing: transformers checkpoints a layer's ``forward`` (the pre-hook runs once,
outside the replay). A checkpoint wrapped around a layer's whole ``__call__`` replays the pre-hook
during backward, after ``forward`` returned; the hook then writes the slots of the *last* forward
pass again (kept until the next forward or ``unload()``), so the replay equals the first pass as
long as each backward follows its own forward (the usual training loop).
"""

from __future__ import annotations

import dataclasses
import os

import torch
from torch import nn

from .config import CapsuleConfig
from .ops import capsule_slots, instance_semantics, write_slots

__all__ = ["ADAPTER_WEIGHTS_NAME", "SUPPORTED", "CapsuleModel", "get_peft_model"]

ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
DECODERS = ("llama", "qwen2", "mistral")
ENCODER_DECODERS = ("t5",)
SUPPORTED = DECODERS + ENCODER_DECODERS


def _model_type(model: nn.Module) -> str:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED:
        raise ValueError(
            f"model: unsupported architecture {model_type or type(model).__name__!r}; "
            f"capt hooks the decoder layers of {DECODERS} and the encoder blocks of "
            f"{ENCODER_DECODERS}"
        )
    return model_type


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The hooked blocks: ``model.model.layers`` (decoder-only) or ``model.encoder.block`` (T5)."""
    if _model_type(model) in ENCODER_DECODERS:
        return model.encoder.block
    return model.model.layers


def _layer_norm(layer: nn.Module) -> nn.Module | None:
    """The norm in front of a block's self-attention (``instance_source="hidden"``)."""
    norm = getattr(layer, "input_layernorm", None)  # Llama, Qwen2, Mistral
    if norm is None and hasattr(layer, "layer"):  # T5Block: layer[0] is T5LayerSelfAttention
        norm = getattr(layer.layer[0], "layer_norm", None)
    return norm


def _in_backward() -> bool:
    """True while the autograd engine runs a backward pass (a checkpoint replay happens there)."""
    return torch._C._current_graph_task_id() != -1


class CapsuleModel(nn.Module):
    """A frozen causal LM with CaPT capsules at slot 0 of every selected layer.

    Attributes:
        base_model: the wrapped transformers causal LM (frozen, never modified).
        peft_config: the :class:`CapsuleConfig` (``hidden_size``, ``num_layers`` filled in).
        layer_ids: the selected decoder layers.
        capsules: ``[|layers|, k, d]`` trainable ``p_ℓ`` (the only trainable parameters).
    """

    def __init__(
        self, model: nn.Module, config: CapsuleConfig, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if not isinstance(config, CapsuleConfig):
            raise TypeError(f"config: expected a CapsuleConfig, got {type(config).__name__}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected a transformers model, got {type(model).__name__}")
        layers = _decoder_layers(model)
        d = model.get_input_embeddings().embedding_dim
        for name, want, got in (
            ("hidden_size", config.hidden_size, d),
            ("num_layers", config.num_layers, len(layers)),
        ):
            if want is not None and want != got:
                raise ValueError(f"model: the config is for {name}={want}, the model has {got}")
        self.peft_config = dataclasses.replace(config, hidden_size=d, num_layers=len(layers))
        self.layer_ids = config.layer_ids(len(layers))
        self.is_encoder_decoder = _model_type(model) in ENCODER_DECODERS
        # Block 0's norm, kept from hook time (a wrapper may later replace the list's entries).
        self._norm0 = (_layer_norm(layers[0]),)  # a tuple: not registered as a submodule
        for p in model.parameters():
            p.requires_grad_(False)
        self.base_model = model
        ref = model.get_input_embeddings().weight
        data = torch.zeros(len(self.layer_ids), config.capsule_length, d, dtype=ref.dtype)
        if config.init == "normal":
            data.normal_(0.0, config.init_std, generator=generator)
        elif config.init == "vocab":
            # peft's SAMPLE_VOCAB: every slot starts as the embedding of a uniformly drawn token.
            ids = torch.randint(0, ref.shape[0], data.shape[:2], generator=generator)
            data = ref.detach().cpu()[ids].clone()
        self.capsules = nn.Parameter(data.to(ref.device))
        self._state: dict | None = None
        self._replay: dict | None = None  # the last forward's state, for a checkpoint replay
        self._handles = [
            layers[ell].register_forward_pre_hook(
                self._make_hook(row, layers[ell]), with_kwargs=True
            )
            for row, ell in enumerate(self.layer_ids)
        ]

    # ------------------------------------------------------------------ the hook
    def _slots(
        self, st: dict, row: int, h_src: torch.Tensor, norm: nn.Module | None
    ) -> torch.Tensor:
        cfg = self.peft_config
        if cfg.instance_source == "none":
            s = None
        elif cfg.instance_source == "hidden":
            s = instance_semantics(norm(h_src), st["instance_mask"])
        else:
            s = st["semantics"]
        return capsule_slots(self.capsules[row], s, cfg.alpha, cfg.fusion)

    def _make_hook(self, row: int, layer: nn.Module):
        def hook(module, args, kwargs):
            state = self._state
            if state is None and _in_backward():
                state = self._replay  # a checkpoint around the layer's __call__ replays the hook
            if state is None:  # the base model called directly (not through this wrapper)
                return None
            positional = len(args) > 0
            h = args[0] if positional else kwargs["hidden_states"]
            pos = kwargs.get("position_ids")
            if pos is not None and bool((pos[..., 0] != 0).any()):
                return None  # a KV-cache decode step: slot 0 is in the cache already
            k = state["k"]
            h = write_slots(h, self._slots(state, row, h[:, k:], _layer_norm(layer)))
            if positional:
                return (h, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        return hook

    # ------------------------------------------------------------------ inputs
    def _prepare(self, input_ids, attention_mask, instance_mask, labels):
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point():
            raise TypeError("input_ids: expected an integer torch.Tensor (B, T)")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: expected shape (B, T), got {tuple(input_ids.shape)}")
        shape = tuple(input_ids.shape)
        checked = [("attention_mask", attention_mask), ("instance_mask", instance_mask)]
        if not self.is_encoder_decoder:  # T5 labels are the decoder's targets, of any length
            checked.append(("labels", labels))
        for name, x in checked:
            if x is not None and (not isinstance(x, torch.Tensor) or tuple(x.shape) != shape):
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name}: expected the shape of input_ids {shape}, got {got}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if instance_mask is None:
            # The instance is the source only: not padding, and not teacher-forced targets.
            instance_mask = attention_mask.bool()
            if labels is not None and not self.is_encoder_decoder:
                instance_mask = instance_mask & (labels == -100)
        instance_mask = instance_mask.long()
        if bool((instance_mask.bool() & ~attention_mask.bool()).any()):
            raise ValueError("instance_mask: selects padding positions (attention_mask is 0 there)")
        embeds = self.base_model.get_input_embeddings()(input_ids)
        cfg = self.peft_config
        semantics = None
        if cfg.instance_source != "none":
            # Refuses an all-zero row, naming the mask.
            try:
                semantics = instance_semantics(embeds, instance_mask)
            except ValueError as err:
                raise ValueError(f"instance_mask: {err}") from None
        norm0 = self._norm0[0]
        s0 = (
            instance_semantics(norm0(embeds), instance_mask)
            if cfg.instance_source == "hidden"
            else semantics
        )
        first = capsule_slots(self.capsules[0], s0, cfg.alpha, cfg.fusion)
        b, k = shape[0], first.shape[1]
        inputs_embeds = torch.cat([first.to(embeds.dtype).expand(b, -1, -1), embeds], 1)
        ones = attention_mask.new_ones(b, k)
        full_mask = torch.cat([ones, attention_mask], 1)
        if self.is_encoder_decoder:
            position_ids = None  # T5: relative position bias, the decoder labels stay as they are
        else:
            position_ids = (full_mask.long().cumsum(-1) - 1).clamp(min=0)
            if labels is not None:
                labels = torch.cat([labels.new_full((b, k), -100), labels], 1)
        self._state = {"semantics": semantics, "instance_mask": instance_mask, "k": k}
        self._replay = None
        return inputs_embeds, full_mask, position_ids, labels

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        instance_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ):
        """Run the base model with the capsule slots.

        Args:
            input_ids: ``[B, T]`` token ids.
            attention_mask: ``[B, T]`` 1 for tokens, 0 for padding (default all ones).
            instance_mask: ``[B, T]`` tokens averaged into ``s``; default: not padding and label
                −100, so targets never reach slot 0. An all-zero row is refused.
            labels: ``[B, T]`` next-token targets, −100 where no loss is taken.
            **kwargs: passed to the base model.

        Returns:
            The base model's output; logits are ``[B, k'+T, V]`` (slots included, as in peft).
        """
        inputs_embeds, mask, position_ids, labels = self._prepare(
            input_ids, attention_mask, instance_mask, labels
        )
        if position_ids is not None:
            kwargs["position_ids"] = position_ids
        if labels is not None:
            kwargs["labels"] = labels
        try:
            return self.base_model(inputs_embeds=inputs_embeds, attention_mask=mask, **kwargs)
        finally:
            if torch.is_grad_enabled():
                self._replay = self._state
            self._state = None

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        instance_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """``base_model.generate`` with the capsules.

        Decoder-only models: returns ``[input_ids; new tokens]``; the slots are written on the
        prefill pass only, decode steps reuse them from the cache. T5: the capsules enter the
        encoder (run once); returns the decoder's ids, as ``T5ForConditionalGeneration.generate``.
        """
        inputs_embeds, mask, _, _ = self._prepare(input_ids, attention_mask, instance_mask, None)
        try:
            new = self.base_model.generate(
                inputs_embeds=inputs_embeds, attention_mask=mask, **kwargs
            )
        finally:
            self._state = None
        if self.is_encoder_decoder:
            return new
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    # ------------------------------------------------------------------ peft conveniences
    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """``(trainable, all)`` parameter counts, the capsules included in ``all`` (as peft)."""
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return trainable, sum(p.numel() for p in self.parameters())

    def print_trainable_parameters(self) -> None:
        trainable, total = self.get_nb_trainable_parameters()
        print(
            f"trainable params: {trainable:,d} || all params: {total:,d} || "
            f"trainable%: {100 * trainable / total:.4f}"
        )

    def unload(self) -> nn.Module:
        """Remove the hooks and return the base model (never modified; its parameters stay frozen)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._state = self._replay = None
        return self.base_model

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (the capsules only)."""
        from safetensors.torch import save_file

        self.peft_config.save_pretrained(save_directory)
        save_file(
            {"capsules": self.capsules.detach().cpu().contiguous()},
            os.path.join(save_directory, ADAPTER_WEIGHTS_NAME),
            metadata={"format": "pt"},
        )

    @classmethod
    def from_pretrained(
        cls, model: nn.Module, model_id: str | os.PathLike, is_trainable: bool = False
    ) -> CapsuleModel:
        """Load a saved adapter onto ``model``; a checkpoint that does not fit is refused.

        Another hidden size or layer count (from the config), a missing or extra tensor, or a
        capsule tensor of another shape raises ``ValueError``. Frozen and in eval mode unless
        ``is_trainable``, as in peft.
        """
        from safetensors.torch import load_file

        config = CapsuleConfig.from_pretrained(model_id)
        wrapped = cls(model, config)
        path = os.path.join(model_id, ADAPTER_WEIGHTS_NAME)
        if not os.path.isfile(path):
            wrapped.unload()
            raise ValueError(f"model_id: no {ADAPTER_WEIGHTS_NAME} in {os.fspath(model_id)!r}")
        state = load_file(path)
        if set(state) != {"capsules"} or state["capsules"].shape != wrapped.capsules.shape:
            wrapped.unload()
            got = {k: tuple(v.shape) for k, v in state.items()}
            raise ValueError(
                f"model_id: adapter tensors {got} do not fit capsules {tuple(wrapped.capsules.shape)}"
            )
        with torch.no_grad():
            wrapped.capsules.copy_(state["capsules"])
        if not is_trainable:
            wrapped.capsules.requires_grad_(False)
            wrapped.eval()
        return wrapped


def get_peft_model(
    model: nn.Module, peft_config: CapsuleConfig, generator: torch.Generator | None = None
) -> CapsuleModel:
    """Wrap a transformers model (Llama, Qwen2, Mistral; T5 encoder) with CaPT capsules; base frozen."""
    return CapsuleModel(model, peft_config, generator=generator)
