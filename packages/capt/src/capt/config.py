"""``CapsuleConfig``: the adapter's settings, saved as ``adapter_config.json`` like a peft config."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from .ops import FUSIONS, INSTANCE_SOURCES, check_alpha

__all__ = ["CONFIG_NAME", "CapsuleConfig"]

CONFIG_NAME = "adapter_config.json"
INITS = ("zeros", "normal", "vocab")


@dataclass
class CapsuleConfig:
    """Settings of a CaPT adapter (spec, section 3).

    Attributes:
        layers: ``"all"`` or a list of layer indices (decoder layers; T5: encoder blocks) that get a capsule.
        instance_source: ``"embedding"`` (masked mean of the input embeddings), ``"hidden"``
            (of the layer-normed state entering each layer) or ``"none"`` (deep prompt tuning).
        fusion: ``"add"`` (``p + α s``), ``"concat"`` (``[p; α s]``, one more slot) or
            ``"prepend"`` (``[α s; p]``: Finding II's instance token in front of prompt slots).
        alpha: α, finite.
        capsule_length: k >= 1 slots per layer.
        deep: False writes the capsule once, before layer 0 (``layers`` must then be ``"all"``
            or ``[0]``).
        init: ``"zeros"`` (training starts from the pure instance token), ``"normal"``, or
            ``"vocab"`` (every slot starts as the embedding of a uniformly drawn token, as peft's
            ``PromptTuningInit.SAMPLE_VOCAB``).
        init_std: std of ``"normal"``.
        hidden_size: filled in from the model; a saved adapter is refused by a model of another
            width.
        num_layers: filled in from the model, likewise.
    """

    layers: str | list[int] = "all"
    instance_source: str = "embedding"
    fusion: str = "add"
    alpha: float = 1.0
    capsule_length: int = 1
    deep: bool = True
    init: str = "zeros"
    init_std: float = 0.02
    hidden_size: int | None = None
    num_layers: int | None = None
    peft_type: str = "CAPSULE"

    def __post_init__(self) -> None:
        if self.layers != "all":
            if isinstance(self.layers, (str, bytes)) or not isinstance(self.layers, (list, tuple)):
                raise TypeError(f"layers: expected 'all' or a list of ints, got {self.layers!r}")
            if not self.layers or any(
                isinstance(i, bool) or not isinstance(i, int) for i in self.layers
            ):
                raise TypeError(f"layers: expected a non-empty list of ints, got {self.layers!r}")
            if list(self.layers) != sorted(set(self.layers)) or min(self.layers) < 0:
                raise ValueError(
                    f"layers: expected sorted unique non-negative indices, got {self.layers}"
                )
            self.layers = list(self.layers)
        if self.instance_source not in INSTANCE_SOURCES:
            raise ValueError(
                f"instance_source: expected one of {INSTANCE_SOURCES}, got {self.instance_source!r}"
            )
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion: expected one of {FUSIONS}, got {self.fusion!r}")
        if self.fusion != "add" and self.instance_source == "none":
            raise ValueError(
                f"fusion: {self.fusion!r} needs an instance source, not instance_source='none'"
            )
        self.alpha = check_alpha(self.alpha)
        if isinstance(self.capsule_length, bool) or not isinstance(self.capsule_length, int):
            raise TypeError(f"capsule_length: expected an int, got {self.capsule_length!r}")
        if self.capsule_length < 1:
            raise ValueError(f"capsule_length: expected >= 1, got {self.capsule_length}")
        if not isinstance(self.deep, bool):
            raise TypeError(f"deep: expected a bool, got {self.deep!r}")
        if not self.deep and self.layers not in ("all", [0]):
            raise ValueError(f"layers: deep=False writes layer 0 only, got layers={self.layers}")
        if self.init not in INITS:
            raise ValueError(f"init: expected one of {INITS}, got {self.init!r}")
        if self.peft_type != "CAPSULE":
            raise ValueError(f"peft_type: expected 'CAPSULE', got {self.peft_type!r}")

    def layer_ids(self, num_layers: int) -> list[int]:
        """The selected layer indices of a model with ``num_layers`` layers (range-checked)."""
        if not self.deep:
            return [0]
        ids = list(range(num_layers)) if self.layers == "all" else list(self.layers)
        if ids[-1] >= num_layers:
            raise ValueError(
                f"layers: layer {ids[-1]} out of range for a model with {num_layers} layers"
            )
        return ids

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write ``adapter_config.json`` into ``save_directory`` (created if missing)."""
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> CapsuleConfig:
        """Read ``adapter_config.json``; unknown keys (another adapter's config) are refused."""
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise ValueError(f"directory: no {CONFIG_NAME} in {os.fspath(directory)!r}")
        with open(path) as f:
            data = json.load(f)
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"directory: {CONFIG_NAME} has keys a CapsuleConfig lacks: {extra}")
        return cls(**data)
