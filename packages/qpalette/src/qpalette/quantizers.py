"""The Q-Palette quantizers: TCQ (bitshift trellis), half-TCQ, NUQ (Lloyd-Max) and 2-D VQ.

Every quantizer works on a rotated weight W_r (d_out, d_in): rows are normalised by
σ_i = RMS(W_r[i]) / (c·ρ) (TCQ: c = 0.9, ρ = RMS of τ; NUQ/VQ: c = ρ = 1), the normalised rows are
quantized data-free against codebooks fitted to N(0, 1), and ``dequantize()`` returns σ ⊙ Q(W_r/σ).

TCQ: each 16×16 tile (row-major, pairs = adjacent columns) is one length-T = 128 sequence of pairs
encoded by a tail-biting Viterbi over the 2**L states s_t = ((s_{t-1} << KV) | u_t) mod 2**L, and
stored as 128·KV bits (state i = the circular L-bit window at bit offset i·KV, MSB first).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import torch

from neurips25_core.bench import single_thread

from .codebooks import gaussian_vq, lloyd_max_gaussian, trellis_lut, trellis_q, trellis_tau

__all__ = [
    "DEFAULT_PALETTE",
    "KINDS",
    "QuantizedMatrix",
    "QuantizerSpec",
    "pack_bitplanes",
    "pack_tiles",
    "parse_spec",
    "quantize",
    "storage_bytes",
    "unpack_bitplanes",
    "unpack_tiles",
    "viterbi",
    "viterbi_tailbiting",
]

KINDS = ("tcq", "nuq", "vq")
TILE = 16
T_PAIRS = TILE * TILE // 2  # 128 pairs per tile
TCQ_C = 0.9


@dataclasses.dataclass(frozen=True)
class QuantizerSpec:
    """One quantizer of the palette.

    Args:
        kind: ``"tcq"`` (bits in 1..5 by 0.25: half-integer multiples are plain TCQ with KV = 2·bits,
            the others half-TCQ with KV = (⌊2b⌋, ⌊2b⌋+1)), ``"nuq"`` (bits 1..8), ``"vq"``
            (2-D, bits in 0.5..6 by 0.5).
        bits: bits per weight of the codes.
        L: trellis state bits (TCQ only; KV < L required).

    Example:
        >>> QuantizerSpec("tcq", 3.25).kv
        (6, 7)
        >>> QuantizerSpec("tcq", 3.0, L=8).name
        'tcq-3-L8'
    """

    kind: str
    bits: float
    L: int = 16

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.bits, (int, float)) or isinstance(self.bits, bool):
            raise TypeError(f"bits: expected a number, got {type(self.bits).__name__}")
        b = float(self.bits)
        object.__setattr__(self, "bits", b)
        if self.kind == "tcq":
            if not (1.0 <= b <= 5.0 and abs(4 * b - round(4 * b)) < 1e-9):
                raise ValueError(f"bits: tcq supports 1..5 in steps of 0.25, got {b}")
            if not isinstance(self.L, int) or not 2 <= self.L <= 20:
                raise ValueError(f"L: expected an int in 2..20, got {self.L!r}")
            if max(self.kv) >= self.L:
                raise ValueError(
                    f"L: KV={max(self.kv)} bits per step needs KV < L, got L={self.L} "
                    f"(for tcq-{b:g})"
                )
        elif self.kind == "nuq":
            if not (abs(b - round(b)) < 1e-9 and 1 <= round(b) <= 8):
                raise ValueError(f"bits: nuq supports integer bits 1..8, got {b}")
        else:
            if not (abs(2 * b - round(2 * b)) < 1e-9 and 1 <= round(2 * b) <= 12):
                raise ValueError(f"bits: vq supports 0.5..6 in steps of 0.5, got {b}")

    @property
    def kv(self) -> tuple[int, int]:
        """TCQ bits per step for the first and the second half of the input columns."""
        a = math.floor(2 * self.bits + 1e-9)
        return (a, a) if abs(2 * self.bits - a) < 1e-9 else (a, a + 1)

    @property
    def half(self) -> bool:
        """True for half-TCQ (two KVs)."""
        return self.kind == "tcq" and self.kv[0] != self.kv[1]

    @property
    def name(self) -> str:
        s = f"{self.kind}-{self.bits:g}"
        return s + (f"-L{self.L}" if self.kind == "tcq" and self.L != 16 else "")

    def __str__(self) -> str:
        return self.name

    def codebook_numel(self) -> int:
        """Values stored in the codebook (kept as fp16)."""
        if self.kind == "tcq":
            return 2 ** trellis_q(max(self.kv)) * 2
        if self.kind == "nuq":
            return 2 ** round(self.bits)
        return 2 ** round(2 * self.bits) * 2


def parse_spec(text: str | QuantizerSpec, L: int | None = None) -> QuantizerSpec:
    """Parse ``"tcq-3.25"``, ``"tcq-2-L10"``, ``"nuq-4"`` or ``"vq-1.5"`` into a QuantizerSpec.

    Args:
        text: the spec string (or a QuantizerSpec, returned as is unless ``L`` is given).
        L: trellis bits overriding the string's (TCQ only).

    Example:
        >>> parse_spec("tcq-3.25")
        QuantizerSpec(kind='tcq', bits=3.25, L=16)
        >>> parse_spec("tcq-3.3")
        Traceback (most recent call last):
        ...
        ValueError: spec: 'tcq-3.3' is not a palette quantizer (bits: tcq supports 1..5 in steps of 0.25, got 3.3)
    """
    if isinstance(text, QuantizerSpec):
        return text if L is None or text.kind != "tcq" else dataclasses.replace(text, L=L)
    if not isinstance(text, str):
        raise TypeError(f"spec: expected a str like 'tcq-3.25', got {type(text).__name__}")
    parts = text.strip().lower().split("-")
    if len(parts) not in (2, 3) or parts[0] not in KINDS:
        raise ValueError(
            f"spec: expected '<kind>-<bits>[-L<n>]' with kind in {KINDS}, got {text!r}"
        )
    try:
        bits = float(parts[1])
        ell = int(parts[2][1:]) if len(parts) == 3 and parts[2].startswith("l") else None
    except ValueError:
        raise ValueError(f"spec: could not parse bits / L in {text!r}") from None
    if len(parts) == 3 and ell is None:
        raise ValueError(f"spec: the third field must be 'L<n>', got {text!r}")
    ell = L if L is not None else (ell if ell is not None else 16)
    try:
        return QuantizerSpec(parts[0], bits, L=ell)
    except ValueError as e:
        raise ValueError(f"spec: {text!r} is not a palette quantizer ({e})") from None


def _default_palette() -> tuple[QuantizerSpec, ...]:
    tcq = [QuantizerSpec("tcq", b / 4) for b in range(6, 21)]  # 1.5 .. 5.0 (official memory MSQ)
    nuq = [QuantizerSpec("nuq", b) for b in range(2, 9)]
    vq = [QuantizerSpec("vq", b / 2) for b in range(3, 13)]
    return tuple(tcq + nuq + vq)


#: The full palette of the official latency MSQ: TCQ/half-TCQ 1.5-5, NUQ 2-8, VQ 1.5-6.
DEFAULT_PALETTE = _default_palette()


# --------------------------------------------------------------------------------------------
# Viterbi


def viterbi(
    X: torch.Tensor,
    lut: torch.Tensor,
    L: int,
    KV: int,
    start_top: torch.Tensor | None = None,
    end_low: torch.Tensor | None = None,
    chunk_bytes: int = 1 << 26,
) -> torch.Tensor:
    """Squared-error Viterbi over the bitshift trellis (tiles processed in chunks).

    Args:
        X: (B, T, 2) sequences of pairs (the compute dtype; float64 for exact tests).
        lut: (2**L, 2) state reconstructions (:func:`trellis_lut`).
        L, KV: state bits and bits per step (1 <= KV < L).
        start_top: optional (B,) values forcing the first state's top L-KV bits.
        end_low: optional (B,) values forcing the last state's low L-KV bits.
        chunk_bytes: backpointer memory per chunk (T·B·2**(L-KV) bytes).

    Returns:
        (B, T) int64 states; s_t >> KV == s_{t-1} mod 2**(L-KV) for every t.
    """
    if X.ndim != 3 or X.shape[-1] != 2:
        raise ValueError(f"X: expected shape (B, T, 2), got {tuple(X.shape)}")
    if not 1 <= KV < L:
        raise ValueError(f"KV: expected 1 <= KV < L={L}, got KV={KV}")
    if lut.shape != (2**L, 2):
        raise ValueError(f"lut: expected shape ({2**L}, 2), got {tuple(lut.shape)}")
    B, T, _ = X.shape
    P = 2 ** (L - KV)
    per_tile = T * P * (2 if KV > 8 else 1)
    step = max(1, chunk_bytes // per_tile)
    out = torch.empty(B, T, dtype=torch.int64)
    # Many small ops: one thread is several times faster than two on a loaded machine.
    with single_thread():
        for s in range(0, B, step):
            sl = slice(s, min(B, s + step))
            out[sl] = _viterbi_chunk(
                X[sl],
                lut,
                L,
                KV,
                None if start_top is None else start_top[sl],
                None if end_low is None else end_low[sl],
            )
    return out


def _viterbi_chunk(X, lut, L, KV, start_top, end_low):
    B, T, _ = X.shape
    S, P, J = 2**L, 2 ** (L - KV), 2**KV
    lut = lut.to(X.dtype)
    lx, ly = lut[:, 0], lut[:, 1]
    bp_dtype = torch.uint8 if KV <= 8 else torch.int16
    bp = torch.empty(T, B, P, dtype=bp_dtype)
    inf = torch.tensor(math.inf, dtype=X.dtype)

    x0 = X[:, :, 0].T.contiguous()  # (T, B)
    x1 = X[:, :, 1].T.contiguous()

    def err(t):
        return (lx[None, :] - x0[t][:, None]).square_() + (ly[None, :] - x1[t][:, None]).square_()

    states = torch.arange(S)
    cost = err(0)
    if start_top is not None:
        cost = torch.where((states[None, :] >> KV) == start_top[:, None].to(torch.int64), cost, inf)
    for t in range(1, T):
        # predecessors of s are p = j·P + (s >> KV), j < 2**KV: take the min over j
        best, arg = cost.view(B, J, P).min(dim=1)
        bp[t] = arg.to(bp_dtype)
        cost = (err(t).view(B, P, J) + best[:, :, None]).view(B, S)
    if end_low is not None:
        cost = torch.where((states[None, :] % P) == end_low[:, None].to(torch.int64), cost, inf)
    path = torch.empty(B, T, dtype=torch.int64)
    cur = cost.argmin(dim=1)
    path[:, T - 1] = cur
    for t in range(T - 1, 0, -1):
        r = cur >> KV
        j = bp[t].gather(1, r[:, None])[:, 0].to(torch.int64)
        cur = j * P + r
        path[:, t - 1] = cur
    return path


def viterbi_tailbiting(
    X: torch.Tensor, lut: torch.Tensor, L: int, KV: int, chunk_bytes: int = 1 << 26
) -> torch.Tensor:
    """Tail-biting Viterbi: the last state's low L-KV bits equal the first state's top L-KV bits.

    Pass 1 runs on the sequence rotated by T/2 and reads the top L-KV bits of the state at the
    original start; pass 2 forces them at both ends.

    Args:
        X: (B, T, 2) sequences.
        lut, L, KV: as in :func:`viterbi`.

    Returns:
        (B, T) int64 states, circularly consistent (so they pack into T·KV bits).
    """
    _B, T, _ = X.shape
    h = T // 2
    rolled = torch.roll(X, shifts=-h, dims=1)  # rolled[t] = X[(t + h) % T]
    first = viterbi(rolled, lut, L, KV, chunk_bytes=chunk_bytes)
    overlap = first[:, T - h] >> KV  # state at original t = 0
    return viterbi(X, lut, L, KV, start_top=overlap, end_low=overlap, chunk_bytes=chunk_bytes)


# --------------------------------------------------------------------------------------------
# packing


def _bits_to_words(bits: torch.Tensor) -> torch.Tensor:
    """(..., 32·w) 0/1 -> (..., w) int32, MSB first."""
    w = bits.reshape(*bits.shape[:-1], -1, 32).to(torch.int64)
    shifts = torch.arange(31, -1, -1, dtype=torch.int64)
    v = (w << shifts).sum(-1)
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def _words_to_bits(words: torch.Tensor) -> torch.Tensor:
    v = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(31, -1, -1, dtype=torch.int64)
    return ((v[..., None] >> shifts) & 1).reshape(*words.shape[:-1], -1)


def pack_tiles(states: torch.Tensor, L: int, KV: int) -> torch.Tensor:
    """(B, T) circularly consistent states -> (B, T·KV/32) int32 words (the top KV bits of each).

    Example:
        >>> s = torch.tensor(
        ...     [
        ...         [
        ...             0b1011,
        ...             0b1110,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...             0b1010,
        ...         ]
        ...     ]
        ... )
        >>> bool((unpack_tiles(pack_tiles(s, 4, 2), 4, 2, 16) == s).all())
        True
    """
    B, T = states.shape
    if (T * KV) % 32:
        raise ValueError(f"states: T·KV must be a multiple of 32, got T={T}, KV={KV}")
    top = states.to(torch.int64) >> (L - KV)
    shifts = torch.arange(KV - 1, -1, -1, dtype=torch.int64)
    bits = ((top[..., None] >> shifts) & 1).reshape(B, T * KV)
    return _bits_to_words(bits)


def unpack_tiles(words: torch.Tensor, L: int, KV: int, T: int) -> torch.Tensor:
    """Inverse of :func:`pack_tiles`: state i = the circular L-bit window at offset i·KV.

    Each window spans at most two 32-bit words (L <= 32): s = ((hi << 32 | lo) >> (64-L-b0)) & mask.
    """
    nw = words.shape[-1]
    if nw * 32 != T * KV:
        raise ValueError(f"words: expected {T * KV // 32} words per tile, got {nw}")
    w = words.to(torch.int64) & 0xFFFFFFFF
    off = torch.arange(T) * KV
    w0, b0 = off // 32, off % 32
    hi, lo = w[:, w0], w[:, (w0 + 1) % nw]
    return (((hi << 32) | lo) >> (64 - L - b0)) & ((1 << L) - 1)


def pack_bitplanes(codes: torch.Tensor, b: int) -> torch.Tensor:
    """(N, C) b-bit codes -> (N, ⌈C/32⌉, b) int32 bit-planes: word j holds bit j of 32 codes.

    Bit i of a word (LSB = 0) belongs to code 32·g + i; C is zero-padded to a multiple of 32.

    Example:
        >>> c = torch.randint(0, 8, (3, 40))
        >>> bool((unpack_bitplanes(pack_bitplanes(c, 3), 3, 40) == c).all())
        True
    """
    N, C = codes.shape
    G = -(-C // 32)
    c = torch.zeros(N, G * 32, dtype=torch.int64)
    c[:, :C] = codes.to(torch.int64)
    c = c.view(N, G, 32)
    planes = (c[..., None] >> torch.arange(b)) & 1  # (N, G, 32, b)
    v = (planes << torch.arange(32)[None, None, :, None]).sum(2)
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def unpack_bitplanes(planes: torch.Tensor, b: int, C: int) -> torch.Tensor:
    """Inverse of :func:`pack_bitplanes` -> (N, C) int64 codes."""
    v = planes.to(torch.int64) & 0xFFFFFFFF  # (N, G, b)
    bits = (v[:, :, None, :] >> torch.arange(32)[None, None, :, None]) & 1  # (N, G, 32, b)
    codes = (bits << torch.arange(b)).sum(-1).reshape(planes.shape[0], -1)
    return codes[:, :C]


# --------------------------------------------------------------------------------------------
# quantized matrix


@functools.cache
def _tcq_tables(L: int, Q: int) -> tuple[torch.Tensor, torch.Tensor]:
    tau = trellis_tau(Q)
    return tau, trellis_lut(L, Q, tau)


def _check_shape(shape: Sequence[int], spec: QuantizerSpec) -> None:
    n, k = shape
    if n % TILE or k % TILE:
        raise ValueError(
            f"weight: both dims must be multiples of {TILE}, got shape ({n}, {k}) for {spec.name}"
        )
    if spec.half and (k // 2) % TILE:
        raise ValueError(
            f"weight: half-TCQ needs d_in/2 to be a multiple of {TILE}, got d_in={k} for {spec.name}"
        )
    if spec.kind == "vq" and k % 2:
        raise ValueError(f"weight: vq needs an even d_in, got {k}")


def storage_bytes(spec: QuantizerSpec | str, shape: Sequence[int], codebook: bool = True) -> int:
    """Bytes stored for a (d_out, d_in) matrix: codes (+ the fp16 codebook); row scales excluded.

    The codebooks are data-free constants shared by every layer using them, so a model stores
    each distinct one once; the solvers therefore constrain the codes (``codebook=False``).

    Example:
        >>> storage_bytes("tcq-2", (128, 128)), storage_bytes("nuq-4", (128, 128))
        (6144, 8224)
    """
    spec = parse_spec(spec)
    n, k = shape
    if spec.kind == "tcq":
        kv = spec.kv
        tiles = (n // TILE) * (k // TILE)
        code_bits = tiles // 2 * T_PAIRS * (kv[0] + kv[1]) if spec.half else tiles * T_PAIRS * kv[0]
        code_bytes = code_bits // 8
    elif spec.kind == "nuq":
        code_bytes = n * -(-k // 32) * round(spec.bits) * 4
    else:
        code_bytes = n * -(-(k // 2) // 32) * round(2 * spec.bits) * 4
    return code_bytes + (2 * spec.codebook_numel() if codebook else 0)


@dataclasses.dataclass
class QuantizedMatrix:
    """A quantized (d_out, d_in) rotated weight.

    Attributes:
        spec: the quantizer.
        shape: (d_out, d_in).
        scales: (d_out,) float32 row scales σ (stored as fp16: 2 bytes each).
        codes: TCQ: tuple of (tiles, 4·KV) int32 words per column half; NUQ/VQ: one
            (d_out, ⌈C/32⌉, b) int32 bit-plane tensor.
        codebook: TCQ: τ (2**Q, 2); NUQ: levels (2**b,); VQ: (2**(2b), 2) points.
    """

    spec: QuantizerSpec
    shape: tuple[int, int]
    scales: torch.Tensor
    codes: tuple[torch.Tensor, ...]
    codebook: torch.Tensor

    @property
    def nbytes(self) -> int:
        """Every stored byte: codes + fp16 codebook + fp16 row scales."""
        return storage_bytes(self.spec, self.shape) + 2 * self.shape[0]

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.nbytes / (self.shape[0] * self.shape[1])

    def normalized(self) -> torch.Tensor:
        """Q(W_r/σ): the (d_out, d_in) float32 codeword matrix without the row scales."""
        n, k = self.shape
        spec = self.spec
        if spec.kind == "tcq":
            lut = trellis_lut(spec.L, self.codebook.shape[0].bit_length() - 1, self.codebook)
            halves = []
            kh = k // 2 if spec.half else k
            for words, kv in zip(self.codes, spec.kv if spec.half else spec.kv[:1]):
                states = unpack_tiles(words, spec.L, kv, T_PAIRS)
                halves.append(_untile(lut[states], n, kh))
            return torch.cat(halves, dim=1) if spec.half else halves[0]
        if spec.kind == "nuq":
            codes = unpack_bitplanes(self.codes[0], round(spec.bits), k)
            return self.codebook.to(torch.float32)[codes]
        codes = unpack_bitplanes(self.codes[0], round(2 * spec.bits), k // 2)
        return self.codebook.to(torch.float32)[codes].reshape(n, k)

    def dequantize(self) -> torch.Tensor:
        """σ ⊙ Q(W_r/σ): the (d_out, d_in) float32 approximation of the rotated weight."""
        return self.normalized() * self.scales[:, None]


def _tile(w: torch.Tensor) -> torch.Tensor:
    """(n, k) -> (tiles, 128, 2): 16×16 tiles row-major, pairs of adjacent columns."""
    n, k = w.shape
    t = w.reshape(n // TILE, TILE, k // TILE, TILE).permute(0, 2, 1, 3)
    return t.reshape(-1, T_PAIRS, 2)


def _untile(x: torch.Tensor, n: int, k: int) -> torch.Tensor:
    t = x.reshape(n // TILE, k // TILE, TILE, TILE).permute(0, 2, 1, 3)
    return t.reshape(n, k)


def _scales(w: torch.Tensor, target_rms: float) -> tuple[torch.Tensor, torch.Tensor]:
    rms = w.square().mean(dim=1).sqrt()
    sigma = rms / target_rms
    safe = torch.where(sigma > 0, sigma, torch.ones_like(sigma))  # zero rows: σ stored as 0
    return sigma, safe


def quantize(
    weight: torch.Tensor, spec: QuantizerSpec | str, compute_dtype: torch.dtype = torch.float32
) -> QuantizedMatrix:
    """Quantize a rotated (d_out, d_in) weight with one palette quantizer (data-free).

    Args:
        weight: (d_out, d_in) rotated weight; both dims multiples of 16.
        spec: a QuantizerSpec or a spec string such as ``"tcq-3.25"``.
        compute_dtype: Viterbi dtype (float64 for exact comparisons).

    Returns:
        The QuantizedMatrix (``.dequantize()``, ``.nbytes``).

    Example:
        >>> w = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
        >>> q = quantize(w, "nuq-3")
        >>> q.nbytes, round(float((q.dequantize() - w).square().sum() / w.square().sum()), 2)
        (848, 0.03)
    """
    spec = parse_spec(spec)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise ValueError("weight: expected a 2-D (d_out, d_in) tensor")
    _check_shape(weight.shape, spec)
    w = weight.detach().to(torch.float64).cpu()
    n, k = w.shape
    if spec.kind == "tcq":
        kv = spec.kv
        Q = trellis_q(max(kv))
        tau, lut = _tcq_tables(spec.L, Q)
        rho = float(tau.square().mean().sqrt())
        sigma, safe = _scales(w, TCQ_C * rho)
        wn = (w / safe[:, None]).to(compute_dtype)
        parts = [wn[:, : k // 2], wn[:, k // 2 :]] if spec.half else [wn]
        codes = []
        for part, kvi in zip(parts, kv if spec.half else kv[:1]):
            states = viterbi_tailbiting(_tile(part), lut.to(compute_dtype), spec.L, kvi)
            codes.append(pack_tiles(states, spec.L, kvi))
        return QuantizedMatrix(spec, (n, k), sigma.float(), tuple(codes), tau.half().float())
    if spec.kind == "nuq":
        b = round(spec.bits)
        levels = lloyd_max_gaussian(b)
        sigma, safe = _scales(w, 1.0)
        wn = w / safe[:, None]
        mids = 0.5 * (levels[1:] + levels[:-1])
        codes = torch.bucketize(wn, mids)
        cb = levels.half().float()
        return QuantizedMatrix(spec, (n, k), sigma.float(), (pack_bitplanes(codes, b),), cb)
    kb = round(2 * spec.bits)
    cb = gaussian_vq(spec.bits).half().float()
    sigma, safe = _scales(w, 1.0)
    pairs = (w / safe[:, None]).reshape(-1, 2).to(torch.float32)
    cn = cb.square().sum(1)
    codes = torch.empty(pairs.shape[0], dtype=torch.int64)
    step = max(1, (1 << 22) // cb.shape[0])
    for s in range(0, pairs.shape[0], step):
        p = pairs[s : s + step]
        codes[s : s + step] = (cn[None, :] - 2 * p @ cb.T).argmin(1)
    return QuantizedMatrix(
        spec, (n, k), sigma.float(), (pack_bitplanes(codes.view(n, k // 2), kb),), cb
    )
