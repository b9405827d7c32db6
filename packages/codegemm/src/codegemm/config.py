"""The codebook format's configuration: :class:`CodebookConfig` and its presets."""

from __future__ import annotations

import dataclasses

__all__ = ["CodebookConfig"]


@dataclasses.dataclass(frozen=True)
class CodebookConfig:
    """How a linear layer is codebook-quantized (the AQLM/CodeGEMM additive format).

    A weight ``W [M, K]`` is cut into sub-vectors of ``vector_size`` (v) consecutive inputs. Each
    sub-vector is the sum of one centroid from each of ``num_codebooks`` (m) codebooks of
    ``2**codebook_bits`` (C) centroids, times a per-row scale shared by ``group_size`` (g) inputs:
    ``Ŵ[r, jv:(j+1)v] = s[r, jv // g] · Σ_k B_k[codes[r, j, k]]``.

    Args:
        num_codebooks: m, the number of additive codebooks (the official kernels support 1 and 2).
        vector_size: v, inputs per sub-vector (official: 4 with m=1, 8 with m=2).
        codebook_bits: b, bits per code; codes are stored as uint8, so 1 <= b <= 8.
        group_size: g, inputs sharing one scale; a multiple of ``vector_size``.
        kmeans_iters: Lloyd iterations of the residual k-means initialisation.
        refine_rounds: rounds of (codes, codebooks, scales) alternating refinement.
        seed: seed of the k-means initialisation.

    Example:
        >>> from codegemm import CodebookConfig
        >>> CodebookConfig.m2v8().bits_per_weight
        2.125
    """

    num_codebooks: int = 2
    vector_size: int = 8
    codebook_bits: int = 8
    group_size: int = 128
    kmeans_iters: int = 30
    refine_rounds: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_codebooks", "vector_size", "codebook_bits", "group_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected >= 1, got {value}")
        if self.codebook_bits > 8:
            raise ValueError(
                f"codebook_bits: expected 1..8 (codes are stored as uint8), got {self.codebook_bits}"
            )
        if self.group_size % self.vector_size:
            raise ValueError(
                f"group_size: expected a multiple of vector_size={self.vector_size}, got {self.group_size}"
            )
        if self.kmeans_iters < 0:
            raise ValueError(f"kmeans_iters: expected >= 0, got {self.kmeans_iters}")
        if self.refine_rounds < 0:
            raise ValueError(f"refine_rounds: expected >= 0, got {self.refine_rounds}")

    @property
    def codebook_size(self) -> int:
        """C = 2**codebook_bits centroids per codebook."""
        return 1 << self.codebook_bits

    @property
    def bits_per_weight(self) -> float:
        """Bits per weight of codes and fp16 scales, m·b/v + 16/g (codebooks excluded)."""
        return self.num_codebooks * self.codebook_bits / self.vector_size + 16 / self.group_size

    def effective_bits_per_weight(self, out_features: int, in_features: int) -> float:
        """Bits per weight of an ``out_features × in_features`` layer, fp16 codebooks included."""
        codebook_bits = self.num_codebooks * self.codebook_size * self.vector_size * 16
        return self.bits_per_weight + codebook_bits / (out_features * in_features)

    @classmethod
    def m1v4(cls, **overrides) -> CodebookConfig:
        """One 256-entry codebook of 4-vectors, scales per 128 inputs: 2.125 bits/weight."""
        return cls(
            **{
                "num_codebooks": 1,
                "vector_size": 4,
                "codebook_bits": 8,
                "group_size": 128,
                **overrides,
            }
        )

    @classmethod
    def m2v8(cls, **overrides) -> CodebookConfig:
        """Two 256-entry codebooks of 8-vectors, scales per 128 inputs: 2.125 bits/weight."""
        return cls(
            **{
                "num_codebooks": 2,
                "vector_size": 8,
                "codebook_bits": 8,
                "group_size": 128,
                **overrides,
            }
        )
