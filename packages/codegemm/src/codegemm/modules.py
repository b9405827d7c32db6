"""``CodebookLinear`` (an ``nn.Linear`` replacement) and ``quantize_`` for transformers models."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from .config import CodebookConfig
from .format import check_format
from .ops import BACKENDS, IMPLS, codebook_matmul
from .psumbook import PsumbookPlan, dequantize, make_plan
from .quantizer import QuantizeResult, quantize_weight

__all__ = ["CodebookLinear", "default_filter", "fit_group", "quantize_", "quantize_linear"]

_FORMAT_BUFFERS = ("codes", "codebooks", "scales")


class CodebookLinear(nn.Module):
    """A linear layer whose weight is stored in the codebook format: ``y = x Ŵᵀ + b``.

    Buffers (all in ``state_dict``): ``codes`` uint8 ``[M, K/v, m]``, ``codebooks`` fp16
    ``[m, C, v]``, ``scales`` fp16 ``[M, K/g]``; ``bias`` is a float32 parameter or None.

    Args:
        in_features: K.
        out_features: M.
        config: the format (``CodebookConfig.m1v4()``, ``.m2v8()``, ...).
        bias: whether the layer has a bias.
        backend: ``codebook_matmul``'s algorithm (``"auto"``, ``"psumbook"``, ``"dequant"``,
            ``"psumbook_splitk"``, ``"dequant_fused"``, ``"reference"``).
        impl: ``"auto"``, ``"torch"``, ``"triton"`` or ``"numba"`` (the CPU kernel; ``auto``
            picks it for CPU psumbook when numba is installed).
        tile_k: K-tile of the torch Psumbook (None: one tile over K).

    Example:
        >>> import torch, codegemm
        >>> lin = torch.nn.Linear(256, 64)
        >>> q = codegemm.quantize_linear(
        ...     lin, codegemm.CodebookConfig.m2v8(kmeans_iters=2, refine_rounds=0)
        ... )
        >>> q(torch.randn(3, 256)).shape
        torch.Size([3, 64])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        config: CodebookConfig,
        bias: bool = True,
        backend: str = "auto",
        impl: str = "auto",
        tile_k: int | None = 1024,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(config, CodebookConfig):
            raise TypeError(f"config: expected a CodebookConfig, got {type(config).__name__}")
        if in_features % config.group_size:
            raise ValueError(
                f"in_features: expected a multiple of group_size={config.group_size}, got {in_features}"
            )
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if impl not in IMPLS:
            raise ValueError(f"impl: expected one of {IMPLS}, got {impl!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.config = config
        self.backend = backend
        self.impl = impl
        self.tile_k = tile_k
        m, v, size = config.num_codebooks, config.vector_size, config.codebook_size
        self.register_buffer(
            "codes",
            torch.zeros(out_features, in_features // v, m, dtype=torch.uint8, device=device),
        )
        self.register_buffer(
            "codebooks", torch.zeros(m, size, v, dtype=torch.float16, device=device)
        )
        self.register_buffer(
            "scales",
            torch.ones(
                out_features, in_features // config.group_size, dtype=torch.float16, device=device
            ),
        )
        self.bias = nn.Parameter(torch.zeros(out_features, device=device)) if bias else None
        self._plan: PsumbookPlan | None = None
        self._plan_key: tuple | None = None
        self._checked_key: tuple | None = None
        self._layout = None
        self._layout_key: tuple | None = None

    @classmethod
    def from_quantized(
        cls,
        codes: torch.Tensor,
        codebooks: torch.Tensor,
        scales: torch.Tensor,
        bias: torch.Tensor | None = None,
        **kwargs,
    ) -> CodebookLinear:
        """Wrap an existing (codes, codebooks, scales) triple (checked) into a layer."""
        shape = check_format(codes, codebooks, scales)
        config = CodebookConfig(
            num_codebooks=shape.num_codebooks,
            vector_size=shape.vector_size,
            codebook_bits=shape.codebook_size.bit_length() - 1,
            group_size=shape.group_size,
        )
        layer = cls(
            shape.in_features,
            shape.out_features,
            config,
            bias=bias is not None,
            device=codes.device,
            **kwargs,
        )
        layer.codes.copy_(codes)
        layer.codebooks.copy_(codebooks)
        layer.scales.copy_(scales)
        if bias is not None:
            layer.bias.data.copy_(bias.detach())
        return layer

    def _codes_key(self) -> tuple:
        return (self.codes.data_ptr(), self.codes._version, self.codes.device)

    def check(self) -> None:
        """Check the buffers against the layer's config: shapes, dtypes and every code ``< C``.

        Runs once after every change of ``codes`` (a version counter; ``forward`` then calls it
        only when the codes changed), so the kernels themselves skip the check: an out-of-range
        code would be an out-of-bounds read in the Triton paths.

        Raises:
            ValueError, TypeError: the buffers do not form a valid codebook weight of this layer.
        """
        shape = check_format(self.codes, self.codebooks, self.scales)
        self._check_shape(shape, "layer")
        self._checked_key = self._codes_key()

    def _check_shape(self, shape, what: str) -> None:
        c = self.config
        want = (self.out_features, self.in_features, c.num_codebooks, c.codebook_size)
        want += (c.vector_size, c.group_size)
        got = (shape.out_features, shape.in_features, shape.num_codebooks, shape.codebook_size)
        got += (shape.vector_size, shape.group_size)
        if got != want:
            names = ("M", "K", "m", "C", "v", "g")
            raise ValueError(
                f"{what}: a codebook weight with "
                + ", ".join(f"{n}={g}" for n, g in zip(names, got))
                + " does not fit this CodebookLinear ("
                + ", ".join(f"{n}={w}" for n, w in zip(names, want))
                + ")"
            )

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # Validate the incoming codes once, here, before anything is copied: codes out of the
        # codebook's range, non-uint8 codes (copy_ would wrap them silently) or a format of another
        # shape are refused with a ValueError/TypeError naming the checkpoint key.
        incoming = {n: state_dict.get(prefix + n, getattr(self, n)) for n in _FORMAT_BUFFERS}
        if all(isinstance(t, torch.Tensor) for t in incoming.values()):
            where = f"state_dict[{prefix + 'codes'!r}]"
            values = not any(t.is_meta for t in incoming.values())
            try:
                shape = check_format(*incoming.values(), check_values=values)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{where}: does not load into this CodebookLinear: {exc}") from None
            self._check_shape(shape, where)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if not error_msgs and all(prefix + n in state_dict for n in _FORMAT_BUFFERS):
            self._checked_key = self._codes_key()

    def plan(self) -> PsumbookPlan:
        """The torch paths' gather indices, rebuilt only when the codes change."""
        key = (self.codes.data_ptr(), self.codes._version, self.codes.device, self.tile_k)
        if self._plan is None or self._plan_key != key:
            c = self.config
            self._plan = make_plan(
                self.codes, c.codebook_size, c.vector_size, c.group_size, self.tile_k
            )
            self._plan_key = key
        return self._plan

    def cpu_layout(self):
        """The numba kernel's :class:`~codegemm.cpu.CpuLayout` (uint8 codes ``[M/R, K/v, m, R]``, float32
        scales ``[M/R, K/g, R]``, row tiles of R = 256), derived from the buffers and rebuilt only when one of them changes;
        never part of the state dict."""
        from .cpu import cpu_layout

        key = tuple((t.data_ptr(), t._version) for t in (self.codes, self.codebooks, self.scales))
        if self._layout is None or self._layout_key != key:
            self._layout = cpu_layout(self.codes, self.codebooks, self.scales)
            self._layout_key = key
        return self._layout

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``Ŵ [M, K]`` in ``dtype``."""
        return dequantize(self.codes, self.codebooks, self.scales, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., K]`` -> ``[..., M]`` in x's dtype."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dim {self.in_features}, got shape {tuple(x.shape)}")
        if self._checked_key != self._codes_key():
            self.check()
        uses_torch = (
            x.device.type != "cuda"
            and self.impl not in ("triton", "numba")
            and self.backend != "reference"
        )
        from .cpu import numba_available

        uses_numba = (
            x.device.type == "cpu"
            and x.dtype != torch.float64
            and self.impl in ("auto", "numba")
            and self.backend in ("auto", "psumbook")
            and numba_available()
        )
        y = codebook_matmul(
            x,
            self.codes,
            self.codebooks,
            self.scales,
            backend=self.backend,
            impl=self.impl,
            plan=self.plan() if uses_torch else None,
            validate=False,
            layout=self.cpu_layout() if uses_numba else None,
        )
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, m={c.num_codebooks}, "
            f"v={c.vector_size}, b={c.codebook_bits}, g={c.group_size}, bias={self.bias is not None}, "
            f"backend={self.backend!r}"
        )


def _channel_weights(calib: torch.Tensor, in_features: int) -> torch.Tensor:
    if not isinstance(calib, torch.Tensor) or calib.shape[-1] != in_features:
        raise ValueError(
            f"calib: expected a tensor [..., {in_features}], got {getattr(calib, 'shape', type(calib))}"
        )
    flat = calib.detach().reshape(-1, in_features).double()
    return (flat * flat).mean(dim=0)


def quantize_linear(
    linear: nn.Linear,
    config: CodebookConfig,
    calib: torch.Tensor | None = None,
    return_result: bool = False,
    **layer_kwargs,
) -> CodebookLinear | tuple[CodebookLinear, QuantizeResult]:
    """Quantize one ``nn.Linear`` into a :class:`CodebookLinear`.

    Args:
        linear: the layer (its weight ``[M, K]``, K a multiple of ``config.group_size``).
        config: the format and iteration counts.
        calib: calibration inputs ``[..., K]``; the error is then weighted per input channel by
            ``diag(XᵀX)/N``. None: plain weight error.
        return_result: also return the :class:`~codegemm.quantizer.QuantizeResult` (errors, history).
        **layer_kwargs: ``backend``, ``impl``, ``tile_k`` of the new layer.
    """
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
    h = None if calib is None else _channel_weights(calib, linear.in_features).float()
    result = quantize_weight(linear.weight.detach(), config, h)
    layer = CodebookLinear(
        linear.in_features,
        linear.out_features,
        config,
        bias=linear.bias is not None,
        **layer_kwargs,
    )
    layer.codes.copy_(result.codes)
    layer.codebooks.copy_(result.codebooks)
    layer.scales.copy_(result.scales)
    if linear.bias is not None:
        layer.bias.data.copy_(linear.bias.detach().float())
    layer.to(linear.weight.device)
    return (layer, result) if return_result else layer


def default_filter(module: nn.Module, fqn: str) -> bool:
    """Every ``nn.Linear`` except the output head ``lm_head``."""
    return isinstance(module, nn.Linear) and fqn.rsplit(".", 1)[-1] != "lm_head"


def quantize_(
    model: nn.Module,
    config: CodebookConfig,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    calibration: torch.Tensor | None = None,
    progress: bool = False,
    fit_group_size: bool = False,
    **layer_kwargs,
) -> dict:
    """Replace, in place, every ``nn.Linear`` that passes ``filter_fn`` by a :class:`CodebookLinear`.

    Args:
        model: e.g. a transformers ``LlamaForCausalLM``.
        config: the format and iteration counts.
        filter_fn: ``(module, fully_qualified_name) -> bool``; default :func:`default_filter`
            (all linears but ``lm_head``; embeddings are not linears and stay).
        calibration: input ids ``[B, T]`` run once through the unquantized model; each layer's
            error is then weighted by ``diag(XᵀX)/N`` of its own inputs.
        progress: show a progress bar over layers (``neurips25_core.progress``: quiet off a
            terminal).
        fit_group_size: for a layer whose in_features K is not a multiple of ``config.group_size``,
            use the largest multiple of v that divides K and is at most g (instead of skipping it).
        **layer_kwargs: ``backend``, ``impl``, ``tile_k`` of the new layers.

    Returns:
        ``{"quantized": {fqn: QuantizeResult}, "configs": {fqn: CodebookConfig},
        "skipped": {fqn: reason}}``; without ``fit_group_size``, layers whose in_features is not a
        multiple of ``config.group_size`` are skipped.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, CodebookConfig):
        raise TypeError(f"config: expected a CodebookConfig, got {type(config).__name__}")
    keep = filter_fn or default_filter
    targets, configs, skipped = {}, {}, {}
    for fqn, module in model.named_modules():
        if isinstance(module, nn.Linear) and keep(module, fqn):
            fitted = fit_group(module.in_features, config) if fit_group_size else None
            if fitted is not None:
                targets[fqn], configs[fqn] = module, fitted
            elif module.in_features % config.group_size:
                skipped[fqn] = (
                    f"in_features={module.in_features} is not a multiple of group_size={config.group_size}"
                )
            else:
                targets[fqn], configs[fqn] = module, config
    energy: dict[str, torch.Tensor] = {}
    if calibration is not None:
        hooks = []
        for fqn, module in targets.items():

            def hook(mod, args, _out, name=fqn):
                x = args[0].detach().reshape(-1, mod.in_features).double()
                energy[name] = energy.get(name, 0) + (x * x).sum(dim=0)
                energy[name + ".count"] = energy.get(name + ".count", 0) + x.shape[0]

            hooks.append(module.register_forward_hook(hook))
        try:
            with torch.no_grad():
                model(calibration)
        finally:
            for handle in hooks:
                handle.remove()
    items = list(targets.items())
    if progress:
        from neurips25_core.progress import progress_bar

        items = progress_bar(items, desc=f"quantize m{config.num_codebooks}v{config.vector_size}")
    quantized = {}
    for fqn, module in items:
        h = None
        if fqn in energy:
            h = (energy[fqn] / energy[fqn + ".count"]).float()
        result = quantize_weight(module.weight.detach(), configs[fqn], h)
        layer = CodebookLinear(
            module.in_features,
            module.out_features,
            configs[fqn],
            bias=module.bias is not None,
            **layer_kwargs,
        )
        layer.codes.copy_(result.codes)
        layer.codebooks.copy_(result.codebooks)
        layer.scales.copy_(result.scales)
        if module.bias is not None:
            layer.bias.data.copy_(module.bias.detach().float())
        layer.to(module.weight.device)
        parent_name, _, child = fqn.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer)
        quantized[fqn] = result
    return {"quantized": quantized, "configs": configs, "skipped": skipped}


def fit_group(in_features: int, config: CodebookConfig) -> CodebookConfig | None:
    """``config`` with the largest group size <= g that divides K and is a multiple of v (None if none)."""
    v = config.vector_size
    if in_features % v:
        return None
    if in_features % config.group_size == 0:
        return config
    best = max(
        (d for d in range(v, config.group_size + 1, v) if in_features % d == 0), default=None
    )
    return None if best is None else dataclasses.replace(config, group_size=best)
