"""``PTMoEConfig``: the adapter's settings, saved as ``adapter_config.json`` like a peft config."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

__all__ = ["CONFIG_NAME", "PEFT_TYPE", "PTMoEConfig"]

CONFIG_NAME = "adapter_config.json"
PEFT_TYPE = "PT_MOE"
ROUTINGS = ("topk", "soft", "uniform")
INITS = ("svd", "vocab_svd", "normal")
TASK_TYPES = ("CAUSAL_LM",)


@dataclass
class PTMoEConfig:
    """Settings of a PT-MoE prompt (routed low-rank prompt experts, ``P_i = A_i B``).

    Args:
        prompt_length: T, the number of prompt vectors prepended (one prompt, never N·T).
        num_experts: N, the number of per-expert factors ``A_i`` ``[T, R]``.
        rank: R, the rank of the shared ``B`` ``[R, H]``; ``svd`` inits need ``R <= min(T, H)``.
        top_k: experts kept per input under ``routing="topk"`` (weights not renormalised).
        routing: ``"topk"`` (softmax, keep the k largest), ``"soft"`` (all N weights) or
            ``"uniform"`` (weights 1/N, the router is unused).
        router_noise: σ of the multiplicative train-time noise ``l·(1 + σ·ε)``; 0 turns it off.
        router_bias: whether the router ``W x + b`` has the bias ``b``.
        init: ``"svd"`` (rank-R SVD of the embeddings of ``init_text``, or of sampled vocabulary
            tokens when there is no text), ``"vocab_svd"`` (always sampled tokens) or ``"normal"``
            (``N(0, std(embedding)²)`` entries of the product scale).
        init_text: the task description whose token embeddings seed the SVD init (repeated or
            truncated to T tokens); needs a tokenizer when wrapping a model.
        init_jitter: per-expert noise ``N(0, (init_jitter·std(A))²)`` added after the init, so
            identical SVD experts can separate under soft routing.
        task_type: ``"CAUSAL_LM"`` (the only one built).
        token_dim: the base's hidden size H; filled in when the adapter is created and checked
            when a saved adapter is loaded.

    Example:
        >>> PTMoEConfig(prompt_length=8, num_experts=3, rank=4).num_parameters(hidden_size=16)
        211
    """

    prompt_length: int = 40
    num_experts: int = 2
    rank: int = 36
    top_k: int = 1
    routing: str = "topk"
    router_noise: float = 1.0
    router_bias: bool = True
    init: str = "svd"
    init_text: str | None = None
    init_jitter: float = 0.0
    task_type: str = "CAUSAL_LM"
    token_dim: int | None = None
    peft_type: str = PEFT_TYPE

    def __post_init__(self) -> None:
        for name in ("prompt_length", "num_experts", "rank", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected >= 1, got {value}")
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k: expected 1 <= top_k <= num_experts = {self.num_experts}, got {self.top_k}"
            )
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing: expected one of {ROUTINGS}, got {self.routing!r}")
        if self.init not in INITS:
            raise ValueError(f"init: expected one of {INITS}, got {self.init!r}")
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type: expected one of {TASK_TYPES}, got {self.task_type!r}")
        if self.peft_type != PEFT_TYPE:
            raise ValueError(f"peft_type: expected {PEFT_TYPE!r}, got {self.peft_type!r}")
        for name in ("router_noise", "init_jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
            if not value >= 0:
                raise ValueError(f"{name}: expected >= 0, got {value}")
        if self.init_text is not None and not isinstance(self.init_text, str):
            raise TypeError(
                f"init_text: expected a str or None, got {type(self.init_text).__name__}"
            )
        if self.token_dim is not None and (
            isinstance(self.token_dim, bool)
            or not isinstance(self.token_dim, int)
            or self.token_dim < 1
        ):
            raise ValueError(f"token_dim: expected a positive int or None, got {self.token_dim!r}")
        if not isinstance(self.router_bias, bool):
            raise TypeError(f"router_bias: expected a bool, got {type(self.router_bias).__name__}")

    @property
    def k(self) -> int:
        """Experts with a non-zero weight per input: ``top_k`` for top-k routing, else N."""
        return self.top_k if self.routing == "topk" else self.num_experts

    def num_parameters(self, hidden_size: int) -> int:
        """``N·T·R + R·H + N·H (+ N with the router bias)``: the trainable parameter count.

        ``routing="uniform"`` has no router, so its count is ``N·T·R + R·H``.
        """
        n, t, r, h = self.num_experts, self.prompt_length, self.rank, hidden_size
        router = 0 if self.routing == "uniform" else n * h + (n if self.router_bias else 0)
        return n * t * r + r * h + router

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` into ``save_directory`` (created if missing)."""
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> PTMoEConfig:
        """Read ``adapter_config.json``; unknown keys are refused (a config of another adapter)."""
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"directory: no {CONFIG_NAME} in {os.fspath(directory)!r}")
        with open(path) as f:
            data = json.load(f)
        if data.get("peft_type") != PEFT_TYPE:
            raise ValueError(
                f"directory: {path} holds a {data.get('peft_type')!r} adapter, not {PEFT_TYPE!r}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"directory: {path} has unknown config keys {unknown}")
        return cls(**data)
