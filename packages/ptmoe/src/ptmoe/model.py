"""The peft-style adapter: ``get_peft_model(model, PTMoEConfig(...)) -> PTMoEModel``.

Called the way peft's prompt tuning is called::

    model = ptmoe.get_peft_model(base, ptmoe.PTMoEConfig(prompt_length=40, num_experts=2, rank=36))
    model.print_trainable_parameters()
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    model.save_pretrained("adapter")  # adapter_config.json + adapter_model.safetensors
    model = ptmoe.PTMoEModel.from_pretrained(base, "adapter")

As in peft, the prompt is prepended to the input embeddings, the attention mask gets T leading ones,
the labels T leading −100, and the returned logits include the T prompt positions. Unlike peft,
position ids follow the attention mask (so left and right padding agree) and the router input is
the masked mean of the *source* tokens only (``source_mask``).
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import nn

from .config import PTMoEConfig
from .prompt import PromptMoE, PromptOutput

__all__ = ["ADAPTER_WEIGHTS_NAME", "PTMoEModel", "PromptTunedModel", "get_peft_model"]

ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"


def _hidden_size(model: nn.Module) -> int:
    return model.get_input_embeddings().embedding_dim


def _check_model(model) -> None:
    if not isinstance(model, nn.Module) or not hasattr(model, "get_input_embeddings"):
        raise TypeError(
            "model: expected a transformers causal LM (get_input_embeddings), "
            f"got {type(model).__name__}"
        )


class PromptTunedModel(nn.Module):
    """A frozen causal LM with a prompt encoder in front of its input embeddings.

    The prepend machinery shared by PT-MoE and the baselines (:mod:`ptmoe.baselines`): the
    encoder maps ``(inputs_embeds [b, S, H], source mask [b, S])`` to a :class:`PromptOutput`
    whose ``prompts [b, T, H]`` are prepended. The base model is frozen and never modified.

    Attributes:
        base_model: the wrapped transformers causal LM.
        prompt_encoder: the encoder (``prompt_length`` and ``num_experts`` attributes).
        last_routing: the :class:`PromptOutput` of the latest forward (detached).
    """

    def __init__(self, model: nn.Module, prompt_encoder: nn.Module) -> None:
        super().__init__()
        _check_model(model)
        for name in ("prompt_length", "num_experts"):
            if not isinstance(getattr(prompt_encoder, name, None), int):
                raise TypeError(f"prompt_encoder: expected an int attribute {name!r}")
        for p in model.parameters():
            p.requires_grad_(False)
        self.base_model = model
        self.prompt_encoder = prompt_encoder
        self.last_routing: PromptOutput | None = None
        self._stats = self._empty_stats()

    # ------------------------------------------------------------------ inputs
    def _prepare(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        labels: torch.Tensor | None,
        source_mask: torch.Tensor | None,
        domains: Sequence[str] | None,
    ):
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point():
            raise TypeError("input_ids: expected an integer torch.Tensor (b, S)")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: expected shape (b, S), got {tuple(input_ids.shape)}")
        shape = tuple(input_ids.shape)
        for name, x in (
            ("attention_mask", attention_mask),
            ("labels", labels),
            ("source_mask", source_mask),
        ):
            if x is not None and (not isinstance(x, torch.Tensor) or tuple(x.shape) != shape):
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name}: expected the shape of input_ids {shape}, got {got}")
        if domains is not None and len(domains) != shape[0]:
            raise ValueError(
                f"domains: expected {shape[0]} labels (one per example), got {len(domains)}"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if source_mask is None:
            # The router sees the source only: not padding, and not teacher-forced answer tokens.
            source_mask = attention_mask.bool()
            if labels is not None:
                source_mask = source_mask & (labels == -100)
        embeds = self.base_model.get_input_embeddings()(input_ids)
        routing = self.prompt_encoder(inputs_embeds=embeds, mask=source_mask)
        self._record(routing, domains)
        t = self.prompt_encoder.prompt_length
        prompts = routing.prompts.to(embeds.dtype)
        inputs_embeds = torch.cat([prompts, embeds], dim=1)
        ones = torch.ones(shape[0], t, dtype=attention_mask.dtype, device=attention_mask.device)
        full_mask = torch.cat([ones, attention_mask], dim=1)
        position_ids = (full_mask.long().cumsum(-1) - 1).clamp(min=0)
        if labels is not None:
            fill = torch.full((shape[0], t), -100, dtype=labels.dtype, device=labels.device)
            labels = torch.cat([fill, labels], dim=1)
        return inputs_embeds, full_mask, position_ids, labels

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        source_mask: torch.Tensor | None = None,
        domains: Sequence[str] | None = None,
        **kwargs,
    ):
        """Run the base model on ``[prompt; embeddings]``.

        Args:
            input_ids: ``[b, S]`` token ids.
            attention_mask: ``[b, S]`` 1 for tokens, 0 for padding (default all ones).
            labels: ``[b, S]`` next-token targets, −100 where no loss is taken.
            source_mask: ``[b, S]`` tokens the router averages; default: not padding and label
                −100, so teacher-forced answers never reach the router.
            domains: optional per-example domain names, counted in :meth:`routing_stats`.
            **kwargs: passed to the base model.

        Returns:
            The base model's output; its logits are ``[b, T + S, V]`` (prompt positions included,
            as in peft).
        """
        inputs_embeds, mask, position_ids, labels = self._prepare(
            input_ids, attention_mask, labels, source_mask, domains
        )
        return self.base_model(
            inputs_embeds=inputs_embeds,
            attention_mask=mask,
            position_ids=position_ids,
            labels=labels,
            **kwargs,
        )

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        source_mask: torch.Tensor | None = None,
        domains: Sequence[str] | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """``base_model.generate`` on ``[prompt; embeddings]``; returns ``[input_ids; new tokens]``.

        ``domains`` (one name per row) are counted in :meth:`routing_stats`, as in :meth:`forward`.
        """
        inputs_embeds, mask, _, _ = self._prepare(
            input_ids, attention_mask, None, source_mask, domains
        )
        new = self.base_model.generate(inputs_embeds=inputs_embeds, attention_mask=mask, **kwargs)
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    # ------------------------------------------------------------------ peft conveniences
    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """``(trainable, all)`` parameter counts, adapter included in ``all`` (as peft counts)."""
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.parameters())
        return trainable, total

    def print_trainable_parameters(self) -> None:
        trainable, total = self.get_nb_trainable_parameters()
        print(
            f"trainable params: {trainable:,d} || all params: {total:,d} || "
            f"trainable%: {100 * trainable / total:.4f}"
        )

    def unload(self) -> nn.Module:
        """The base model, unchanged (prompt tuning never edits it), with its grads as found frozen."""
        return self.base_model

    # ------------------------------------------------------------------ routing statistics
    def _empty_stats(self):
        n = self.prompt_encoder.num_experts
        return {
            "examples": 0,
            "load": torch.zeros(n, dtype=torch.float64),
            "top1": torch.zeros(n, dtype=torch.long),
            "entropy": 0.0,
            "histogram": defaultdict(lambda: torch.zeros(n, dtype=torch.long)),
        }

    def _record(self, routing: PromptOutput, domains: Sequence[str] | None) -> None:
        self.last_routing = PromptOutput(
            *(
                x.detach()
                for x in (routing.prompts, routing.weights, routing.logits, routing.experts)
            )
        )
        w = routing.weights.detach().double().cpu()
        top1 = routing.experts[:, 0].detach().cpu()
        probs = torch.softmax(routing.logits.detach().double().cpu(), -1)
        s = self._stats
        s["examples"] += w.shape[0]
        s["load"] += w.sum(0)
        s["top1"] += torch.bincount(top1, minlength=w.shape[1])
        s["entropy"] += float(-(probs * probs.clamp_min(1e-300).log()).sum(-1).sum())
        if domains is not None:
            for d, e in zip(domains, top1.tolist()):
                s["histogram"][d][e] += 1

    def routing_stats(self, reset: bool = False) -> dict:
        """Routing since the last reset: per-expert load, top-1 counts, mean entropy, domain × expert.

        Returns:
            ``{"examples", "load" [N] (mean weight), "top1" [N] (counts), "entropy" (mean of the
            router's pre-noise distribution, nats), "histogram" {domain: [N] top-1 counts}}``.
        """
        s = self._stats
        count = max(s["examples"], 1)
        out = {
            "examples": s["examples"],
            "load": (s["load"] / count).tolist(),
            "top1": s["top1"].tolist(),
            "entropy": s["entropy"] / count,
            "histogram": {d: v.tolist() for d, v in sorted(s["histogram"].items())},
        }
        if reset:
            self._stats = self._empty_stats()
        return out


class PTMoEModel(PromptTunedModel):
    """A frozen causal LM with a PT-MoE prompt in front of its input embeddings.

    Build it with :func:`get_peft_model` or :meth:`from_pretrained`. Only ``prompt_encoder``
    (``A``, ``B``, the router) is trainable; the base model is frozen and never modified.

    Attributes:
        base_model: the wrapped transformers causal LM.
        prompt_encoder: the :class:`PromptMoE`.
        peft_config: the :class:`PTMoEConfig` (``token_dim`` filled in).
        last_routing: the :class:`PromptOutput` of the latest forward (detached).
    """

    def __init__(
        self,
        model: nn.Module,
        config: PTMoEConfig,
        tokenizer=None,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(config, PTMoEConfig):
            raise TypeError(f"config: expected a PTMoEConfig, got {type(config).__name__}")
        _check_model(model)
        hidden = _hidden_size(model)
        if config.token_dim is not None and config.token_dim != hidden:
            raise ValueError(
                f"model: the config is for hidden size token_dim={config.token_dim}, the model has {hidden}"
            )
        config = dataclasses.replace(config, token_dim=hidden)
        init_ids = None
        if config.init_text is not None and config.init == "svd":
            if tokenizer is None:
                raise ValueError("tokenizer: init_text needs a tokenizer to turn it into token ids")
            init_ids = torch.as_tensor(tokenizer(config.init_text)["input_ids"]).flatten()
        encoder = PromptMoE(
            model.get_input_embeddings(), config, init_ids=init_ids, generator=generator
        )
        super().__init__(model, encoder)
        self.peft_config = config

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (A, B, router only)."""
        from safetensors.torch import save_file

        self.peft_config.save_pretrained(save_directory)
        tensors = {
            k: v.detach().cpu().contiguous() for k, v in self.prompt_encoder.state_dict().items()
        }
        save_file(
            tensors, os.path.join(save_directory, ADAPTER_WEIGHTS_NAME), metadata={"format": "pt"}
        )

    @classmethod
    def from_pretrained(
        cls, model: nn.Module, model_id: str | os.PathLike, is_trainable: bool = False
    ) -> PTMoEModel:
        """Load a saved adapter onto ``model`` (a fresh base of the same hidden size).

        A checkpoint that does not fit is refused: another hidden size (``token_dim``), another
        shape or a missing/extra tensor raises ``ValueError``. As in peft, the adapter is frozen
        and in eval mode unless ``is_trainable``.
        """
        from safetensors.torch import load_file

        config = PTMoEConfig.from_pretrained(model_id)
        hidden = _hidden_size(model)
        if config.token_dim is not None and config.token_dim != hidden:
            raise ValueError(
                f"model: the adapter in {os.fspath(model_id)!r} was saved for hidden size "
                f"{config.token_dim}, the base model has {hidden}"
            )
        path = os.path.join(model_id, ADAPTER_WEIGHTS_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"model_id: no {ADAPTER_WEIGHTS_NAME} in {os.fspath(model_id)!r}")
        state = load_file(path)
        # Build without the (text-dependent) init, then overwrite every tensor from the file.
        wrapped = cls(model, dataclasses.replace(config, init="normal", init_jitter=0.0))
        wrapped.peft_config = config
        wrapped.prompt_encoder.config = config
        own = wrapped.prompt_encoder.state_dict()
        missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or extra:
            raise ValueError(
                f"model_id: adapter tensors do not match: missing {missing}, unexpected {extra}"
            )
        for k, v in state.items():
            if v.shape != own[k].shape:
                raise ValueError(
                    f"model_id: tensor {k!r} has shape {tuple(v.shape)}, the adapter expects {tuple(own[k].shape)}"
                )
        wrapped.prompt_encoder.load_state_dict(state)
        if not is_trainable:
            wrapped.prompt_encoder.requires_grad_(False)
            wrapped.eval()
        return wrapped


def get_peft_model(
    model: nn.Module,
    peft_config: PTMoEConfig,
    tokenizer=None,
    generator: torch.Generator | None = None,
) -> PTMoEModel:
    """Wrap a transformers causal LM with a PT-MoE prompt; the base model is frozen.

    Args:
        model: e.g. a ``LlamaForCausalLM``.
        peft_config: a :class:`PTMoEConfig`.
        tokenizer: turns ``init_text`` into token ids for the SVD init (``tokenizer(text)
            ["input_ids"]``); needed only with ``init_text``.
        generator: the RNG of the init; global RNG if None.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> base = LlamaForCausalLM(
        ...     LlamaConfig(
        ...         vocab_size=32,
        ...         hidden_size=16,
        ...         num_hidden_layers=1,
        ...         num_attention_heads=2,
        ...         num_key_value_heads=2,
        ...         intermediate_size=32,
        ...     )
        ... )
        >>> model = get_peft_model(base, PTMoEConfig(prompt_length=4, num_experts=2, rank=3))
        >>> model.print_trainable_parameters()  # doctest: +ELLIPSIS
        trainable params: 106 || all params: ... || trainable%: ...
        >>> model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 7, 32])
    """
    return PTMoEModel(model, peft_config, tokenizer=tokenizer, generator=generator)
