"""The peft-style adapter: ``get_peft_model(model, LoPEConfig(...)) -> LoPEModel``.

Called the way peft's LoRA is called::

    model = lope.get_peft_model(base, lope.LoPEConfig(r=4, target_modules=["gate_proj", "up_proj"]))
    params = model.set_stage("stage1")  # then a fresh optimizer over params, noisy data
    params = model.set_stage("stage2")  # fresh optimizer, original data
    model.set_stage("inference")  # poisoning experts masked and compensated
    model.save_pretrained("adapter")  # adapter_config.json + adapter_model.safetensors
    model = lope.LoPEModel.from_pretrained(base, "adapter")

The matching ``nn.Linear`` modules are replaced in place by :class:`AsymmetricLoRALinear` (as
peft does); ``unload()`` puts the originals back. Only the adapter's tensors train and are saved.
"""

from __future__ import annotations

import os
import re

import torch
from torch import nn

from .config import LoPEConfig
from .layer import MODES, AsymmetricLoRALinear

__all__ = ["ADAPTER_WEIGHTS_NAME", "LoPEModel", "get_peft_model"]

ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"


def _matches(name: str, target) -> bool:
    if isinstance(target, str):
        return re.fullmatch(target, name) is not None
    return name.split(".")[-1] in target


class LoPEModel(nn.Module):
    """A frozen transformers model whose target ``nn.Linear`` modules carry LoPE adapters.

    Attributes:
        base_model: the wrapped model (its target modules replaced in place).
        peft_config: the :class:`LoPEConfig` (or :class:`HydraLoRAConfig`).
        adapted: ``{module name: AsymmetricLoRALinear}``.
    """

    def __init__(self, model: nn.Module, config: LoPEConfig) -> None:
        super().__init__()
        if not isinstance(config, LoPEConfig):
            raise TypeError(f"config: expected a LoPEConfig, got {type(config).__name__}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
        names = [
            n
            for n, m in model.named_modules()
            if isinstance(m, nn.Linear) and _matches(n, config.target_modules)
        ]
        if not names:
            raise ValueError(
                f"target_modules: {config.target_modules!r} matches no nn.Linear of "
                f"{type(model).__name__}"
            )
        model.requires_grad_(False)
        self.base_model = model
        self.peft_config = config
        self.adapted: dict[str, AsymmetricLoRALinear] = {}
        for name in names:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            layer = AsymmetricLoRALinear(
                getattr(parent, child),
                rank=config.r,
                num_experts=config.num_experts,
                poison=config.poison_experts,
                alpha=config.lora_alpha,
                dropout=config.lora_dropout,
                router_input=config.router_input,
                compensation_k=config.compensation_k,
                compensation_beta=config.compensation_beta,
            )
            setattr(parent, child, layer)
            self.adapted[name] = layer
        self.set_stage("stage1" if config.poison_experts else "all")

    def forward(self, *args, **kwargs):
        return self.base_model(*args, **kwargs)

    def set_stage(self, stage: str) -> list[nn.Parameter]:
        """Set every adapter's mode (``stage1``, ``stage2``, ``inference``, ``all``).

        Returns the parameters that train in that stage, for a fresh optimizer.
        """
        if stage not in MODES:
            raise ValueError(f"stage: expected one of {MODES}, got {stage!r}")
        params: list[nn.Parameter] = []
        for layer in self.adapted.values():
            params += layer.set_mode(stage)
        return params

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """``{"<module>.lora_A" | ".lora_B" | ".router": tensor}``: the adapter's tensors only."""
        state = {}
        for name, layer in self.adapted.items():
            for key in ("lora_A", "lora_B", "router"):
                state[f"{name}.{key}"] = getattr(layer, key)
        return state

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """``(trainable, all)`` parameter counts, adapter included in ``all`` (as peft counts)."""
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return trainable, sum(p.numel() for p in self.parameters())

    def print_trainable_parameters(self) -> None:
        trainable, total = self.get_nb_trainable_parameters()
        print(
            f"trainable params: {trainable:,d} || all params: {total:,d} || "
            f"trainable%: {100 * trainable / total:.4f}"
        )

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (A, every B, routers)."""
        from safetensors.torch import save_file

        self.peft_config.save_pretrained(save_directory)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.adapter_state_dict().items()}
        save_file(
            tensors, os.path.join(save_directory, ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"}
        )

    @classmethod
    def from_pretrained(
        cls, model: nn.Module, model_id: str | os.PathLike, is_trainable: bool = False
    ) -> LoPEModel:
        """Load a saved adapter onto ``model`` (a fresh base of the same architecture).

        A checkpoint that does not fit is refused with ``ValueError``: missing or extra tensors
        (other target modules, another depth) or another shape (other rank, expert count or
        width). As in peft, the adapter is in ``inference`` mode unless ``is_trainable``.
        """
        from safetensors.torch import load_file

        config = LoPEConfig.from_pretrained(model_id)
        path = os.path.join(model_id, ADAPTER_WEIGHTS_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"model_id: no {ADAPTER_WEIGHTS_NAME} in {os.fspath(model_id)!r}")
        state = load_file(path)
        wrapped = cls(model, config)
        own = wrapped.adapter_state_dict()
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or extra:
            wrapped.unload()
            raise ValueError(
                f"model_id: adapter tensors do not fit the model: missing {missing[:4]}"
                f"{'…' if len(missing) > 4 else ''}, unexpected {extra[:4]}"
                f"{'…' if len(extra) > 4 else ''}"
            )
        for k, v in state.items():
            if v.shape != own[k].shape:
                wrapped.unload()
                raise ValueError(
                    f"model_id: tensor {k!r} has shape {tuple(v.shape)}, the model needs "
                    f"{tuple(own[k].shape)}"
                )
        with torch.no_grad():
            for k, v in state.items():
                own[k].copy_(v)
        if not is_trainable:
            wrapped.set_stage("inference" if config.poison_experts else "all")
            if not config.poison_experts:
                for p in own.values():
                    p.requires_grad_(False)
            wrapped.eval()
        return wrapped

    def unload(self) -> nn.Module:
        """Put the original ``nn.Linear`` modules back and return the base model (still frozen)."""
        for name, layer in self.adapted.items():
            parent_name, _, child = name.rpartition(".")
            parent = self.base_model.get_submodule(parent_name) if parent_name else self.base_model
            setattr(parent, child, layer.base_layer)
        self.adapted = {}
        return self.base_model

    def merge_and_unload(self) -> nn.Module:
        """Refused: a token-dependent mixture ``Σ ω_i(x) B_i A`` has no single weight to merge."""
        raise NotImplementedError(
            "merge_and_unload: LoPE/HydraLoRA gates depend on each token, so the adapter cannot "
            "be merged into W0; use unload() to get the base model back"
        )


def get_peft_model(model: nn.Module, peft_config: LoPEConfig) -> LoPEModel:
    """Wrap a transformers model with LoPE (or HydraLoRA) adapters; the base model is frozen.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> base = LlamaForCausalLM(
        ...     LlamaConfig(
        ...         vocab_size=32,
        ...         hidden_size=16,
        ...         num_hidden_layers=1,
        ...         num_attention_heads=2,
        ...         num_key_value_heads=2,
        ...         intermediate_size=24,
        ...     )
        ... )
        >>> model = get_peft_model(base, LoPEConfig(r=2, target_modules=["up_proj"]))
        >>> model.print_trainable_parameters()  # doctest: +ELLIPSIS
        trainable params: 224 || all params: ... || trainable%: ...
        >>> model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 32])
    """
    return LoPEModel(model, peft_config)
