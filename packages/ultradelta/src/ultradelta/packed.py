"""The packed format: Rice-coded gaps between kept positions, b-bit codes (or fp16 values) and
(lo, hi, scale) per tensor, every byte counted by ``CompressedDelta.nbits("packed")``."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import zlib

import numpy as np
import torch

from .stages import dequantize_codes, entropy_bits

__all__ = ["CompressedDelta", "CompressedTensor", "rice_decode", "rice_encode"]

MAGIC = b"UDLT"
VERSION = 1


def _rice_parameter(gaps: np.ndarray) -> int:
    if gaps.size == 0:
        return 0
    best, best_bits = 0, None
    for k in range(0, 32):
        bits = int((gaps >> k).sum()) + gaps.size * (k + 1)
        if best_bits is None or bits < best_bits:
            best, best_bits = k, bits
    return best


def rice_encode(gaps: np.ndarray) -> tuple[int, bytes, bytes]:
    """Golomb-Rice code of non-negative ints with the best parameter k: a unary stream (q ones then
    a zero per value) and a k-bit remainder stream (the same bits as interleaved Rice).

    Example:
        >>> import numpy as np
        >>> k, unary, rem = rice_encode(np.array([0, 5, 2, 9]))
        >>> rice_decode(k, unary, rem, 4).tolist()
        [0, 5, 2, 9]
    """
    gaps = np.asarray(gaps, dtype=np.int64)
    k = _rice_parameter(gaps)
    q = gaps >> k
    n_unary = int(q.sum()) + gaps.size
    unary = np.ones(n_unary, dtype=np.uint8)
    ends = np.cumsum(q + 1) - 1
    unary[ends] = 0
    if k > 0:
        r = gaps & ((1 << k) - 1)
        shifts = np.arange(k - 1, -1, -1, dtype=np.int64)
        rem = ((r[:, None] >> shifts[None, :]) & 1).astype(np.uint8).reshape(-1)
    else:
        rem = np.zeros(0, dtype=np.uint8)
    return k, np.packbits(unary).tobytes(), np.packbits(rem).tobytes()


def rice_decode(k: int, unary: bytes, rem: bytes, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ubits = np.unpackbits(np.frombuffer(unary, dtype=np.uint8))
    ends = np.flatnonzero(ubits == 0)[:n]
    if ends.size != n:
        raise ValueError("data: truncated Rice stream")
    q = np.diff(ends, prepend=-1) - 1
    if k > 0:
        rbits = np.unpackbits(np.frombuffer(rem, dtype=np.uint8))[: n * k].reshape(n, k)
        weights = 1 << np.arange(k - 1, -1, -1, dtype=np.int64)
        r = (rbits.astype(np.int64) * weights).sum(1)
    else:
        r = 0
    return (q.astype(np.int64) << k) + r


@dataclasses.dataclass
class CompressedTensor:
    """One compressed tensor: flat kept positions plus b-bit codes (``bits`` set) or fp16 values.

    The dense tensor is ``scale * (lo + code * (hi - lo) / (2^b - 1))`` at ``indices`` (fp32),
    or ``scale * values`` when ``codes`` is None; zero elsewhere.
    """

    shape: tuple[int, ...]
    indices: torch.Tensor  # int64, sorted flat positions of the kept entries
    codes: torch.Tensor | None = None  # uint8, one per kept entry
    values: torch.Tensor | None = None  # float16, one per kept entry
    bits: int = 16
    lo: float = 0.0
    hi: float = 0.0
    scale: float = 1.0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def kept(self) -> int:
        return int(self.indices.numel())

    def kept_values(self) -> torch.Tensor:
        if self.codes is not None:
            return dequantize_codes(self.codes, self.lo, self.hi, self.bits) * torch.tensor(
                self.scale, dtype=torch.float32
            )
        return self.values.float() * torch.tensor(self.scale, dtype=torch.float32)

    def to_dense(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        out = torch.zeros(self.numel, dtype=torch.float32)
        out[self.indices] = self.kept_values()
        return out.reshape(self.shape).to(dtype)

    def value_bits(self) -> int:
        return self.bits if self.codes is not None else 16

    def nbits(self, accounting: str = "entropy") -> float:
        """Bits of this tensor: ``entropy`` = n((1-s) b + H2(1-s)) with s its measured sparsity,
        ``ideal`` = n (1-s) b (positions free, the v2 accounting), plus 48 bits of (lo, hi, scale)
        in fp16 for both."""
        density = self.kept / self.numel
        b = self.value_bits()
        side = 48 if self.codes is not None else 16
        if accounting == "entropy":
            return self.numel * (density * b + entropy_bits(density)) + side
        if accounting == "ideal":
            return self.numel * density * b + side
        raise ValueError(f"accounting: expected 'entropy', 'ideal' or 'packed', got {accounting!r}")


@dataclasses.dataclass
class CompressedDelta:
    """One task's compressed delta: a dict of :class:`CompressedTensor` plus the config used."""

    tensors: dict[str, CompressedTensor]
    config: dict = dataclasses.field(default_factory=dict)

    def to_dense(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        return {k: v.to_dense(dtype) for k, v in self.tensors.items()}

    def numel(self) -> int:
        return sum(v.numel for v in self.tensors.values())

    def nbits(self, accounting: str = "entropy") -> float:
        """Total bits under ``entropy``, ``ideal`` or ``packed`` (8 x the serialized bytes)."""
        if accounting == "packed":
            return 8.0 * len(self.serialize())
        return sum(v.nbits(accounting) for v in self.tensors.values())

    def ratio(self, accounting: str = "entropy") -> float:
        """Compression ratio against the dense fp16 delta (16 bits per parameter)."""
        return 16.0 * self.numel() / self.nbits(accounting)

    def serialize(self) -> bytes:
        """Bytes: magic, version, zlib'd JSON of (config, names, shapes), then per tensor a binary
        header (count, Rice k, bits, lo/hi/scale fp32, stream lengths) and its byte streams."""
        meta = {
            "config": self.config,
            "names": list(self.tensors),
            "shapes": [list(v.shape) for v in self.tensors.values()],
        }
        head = zlib.compress(json.dumps(meta, separators=(",", ":")).encode(), 9)
        parts = [MAGIC, struct.pack("<BI", VERSION, len(head)), head]
        for v in self.tensors.values():
            idx = v.indices.numpy().astype(np.int64)
            gaps = np.diff(idx, prepend=-1) - 1
            k, unary, rem = rice_encode(gaps)
            if v.codes is not None:
                c = v.codes.numpy().astype(np.uint8)
                shifts = np.arange(v.bits - 1, -1, -1, dtype=np.uint8)
                payload = np.packbits(((c[:, None] >> shifts[None, :]) & 1).reshape(-1)).tobytes()
            else:
                payload = v.values.to(torch.float16).numpy().tobytes()
            is_codes = v.codes is not None
            parts.append(
                struct.pack(
                    "<IBBBfffIII",
                    v.kept,
                    k,
                    int(is_codes),
                    v.bits,
                    v.lo,
                    v.hi,
                    v.scale,
                    len(unary),
                    len(rem),
                    len(payload),
                )
            )
            parts += [unary, rem, payload]
        return b"".join(parts)

    @classmethod
    def deserialize(cls, data: bytes) -> CompressedDelta:
        """Inverse of :meth:`serialize`; refuses bytes of another format or version."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data: expected bytes, got {type(data).__name__}")
        if data[:4] != MAGIC:
            raise ValueError(f"data: not an UltraDelta blob (magic {bytes(data[:4])!r})")
        version, hlen = struct.unpack_from("<BI", data, 4)
        if version != VERSION:
            raise ValueError(f"data: format version {version}, this package reads {VERSION}")
        pos = 9
        meta = json.loads(zlib.decompress(data[pos : pos + hlen]))
        pos += hlen
        tensors = {}
        fmt = "<IBBBfffIII"
        for name, shape in zip(meta["names"], meta["shapes"]):
            kept, k, is_codes, bits, lo, hi, scale, nu, nr, npay = struct.unpack_from(
                fmt, data, pos
            )
            pos += struct.calcsize(fmt)
            unary = data[pos : pos + nu]
            rem = data[pos + nu : pos + nu + nr]
            payload = data[pos + nu + nr : pos + nu + nr + npay]
            pos += nu + nr + npay
            gaps = rice_decode(k, unary, rem, kept)
            idx = torch.from_numpy(np.cumsum(gaps + 1) - 1)
            codes = values = None
            if is_codes:
                b = np.unpackbits(np.frombuffer(payload, dtype=np.uint8))[: kept * bits]
                w = 1 << np.arange(bits - 1, -1, -1, dtype=np.int64)
                codes = torch.from_numpy((b.reshape(kept, bits).astype(np.int64) * w).sum(1)).to(
                    torch.uint8
                )
            else:
                values = torch.from_numpy(np.frombuffer(payload, dtype=np.float16).copy())
            tensors[name] = CompressedTensor(
                tuple(shape), idx.long(), codes, values, bits, lo, hi, scale
            )
        if pos != len(data):
            raise ValueError(f"data: {len(data) - pos} trailing bytes after the last tensor")
        return cls(tensors, meta["config"])
