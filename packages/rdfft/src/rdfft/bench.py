"""The rdfft benchmark suite (``neurips25 bench rdfft``).

* ``transform`` (speed, CPU, one thread): forward + inverse round trip of rows × N fp32, the
  in-place torch path against ``torch.fft.rfft`` + pack (and back), and pyFFTW's in-place r2c/c2r
  when the ``peers`` extra is installed. Outputs are checked equal first. Also the extra bytes per
  row each needs beyond the input buffer.
* ``finetune`` (quality): the core's pretrained tiny Llama fine-tuned to classify 256-byte stdlib
  snippets by package, adapters on q_proj/v_proj: BCA-rdfft, BCA-rfft (ours, p = 32), and from the
  ``peers`` extra peft C3A (block 32), LoRA r = 4 and (full only) FourierFT n = 1000. Accuracy,
  adapter bytes saved for backward (``saved_tensors_hooks``), model-level saved bytes, the
  model-level peak of live tensor memory over one training step
  (:class:`neurips25_core.bench.LivePeak`), s/step;
  also the bytes one BCA op saves on an input that requires grad (rfft vs rdfft), and BCA-rdfft
  without the shared q/v spectrum.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from neurips25_core.bench import Context, Suite, compare, peak_live_bytes, plot_bars, single_thread
from rdfft.layers import BCAdapter, apply_bca, bca_parameter_groups
from rdfft.layout import complex_to_hc, hc_to_complex
from rdfft.ops import irdfft_, rdfft, rdfft_

SUITE = Suite(
    name="rdfft",
    paper="Memory-Efficient Training with In-Place FFT Implementation (rdFFT)",
    url="https://arxiv.org/abs/2511.01385",
)


def _pyfftw():
    try:
        import pyfftw

        return pyfftw
    except ImportError:
        return None


@SUITE.case("transform", kind="speed")
def transform(ctx: Context) -> None:
    """Round trip rows × N fp32: in-place torch rdFFT vs torch.fft.rfft + pack vs pyFFTW r2c."""
    rows = ctx.pick(smoke=64, quick=4096, full=4096)
    sizes = ctx.pick(smoke=[64], quick=[64, 256, 1024], full=[64, 256, 1024])
    fftw = _pyfftw()
    if fftw is None:
        ctx.log("transform: pyfftw not installed (install the 'peers' extra); skipping that peer")
    for n in sizes:
        x = torch.randn(rows, n)
        buf = x.clone()

        def ours(buf=buf):
            irdfft_(rdfft_(buf, backend="torch"), backend="torch")

        def torch_fft(x=x, n=n):
            h = complex_to_hc(torch.fft.rfft(x), n)
            return torch.fft.irfft(hc_to_complex(h), n=n)

        fns = {"torch.fft.rfft+pack": torch_fft, "rdfft_ (torch, in place)": ours}
        expected = complex_to_hc(torch.fft.rfft(x), n)
        got = rdfft(x, backend="torch")
        assert (got - expected).abs().max() <= 1e-4 * n, "rdfft differs from packed rfft"
        extra = {"torch.fft.rfft+pack": (n + 2) * 4, "rdfft_ (torch, in place)": 0}
        if fftw is not None:
            padded = fftw.empty_aligned((rows, n + 2), dtype="float32")
            real = padded[:, :n]
            spec = padded.view("complex64")
            fwd = fftw.FFTW(real, spec, axes=(-1,), direction="FFTW_FORWARD", threads=1)
            bwd = fftw.FFTW(spec, real, axes=(-1,), direction="FFTW_BACKWARD", threads=1)
            real[:] = x.numpy()
            fwd()
            check = complex_to_hc(torch.from_numpy(spec.copy()), n)
            assert (check - expected).abs().max() <= 1e-4 * n, "pyfftw differs from rfft"
            real[:] = x.numpy()
            fns["pyfftw r2c (in place, N+2)"] = lambda fwd=fwd, bwd=bwd: (fwd(), bwd())
            extra["pyfftw r2c (in place, N+2)"] = 8
        with single_thread():
            result = compare(fns, baseline="torch.fft.rfft+pack", min_time=ctx.pick(0.01, 0.1, 1.0))
        result.record(ctx, metric="round_trip_time", rows=rows, n=n)
        for name, b in extra.items():
            ctx.record("extra_bytes_per_row", b, "B", impl=name, rows=rows, n=n)
        ctx.log(str(result))


class Classifier(nn.Module):
    """A decoder backbone, mean-pooled, then a linear head."""

    def __init__(self, backbone: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.config.hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(input_ids=x).last_hidden_state.mean(1))


ARMS = ("bca_rdfft", "bca_rfft", "c3a", "lora_r4", "fourierft")
LRS = {"bca_rdfft": 3e-2, "bca_rfft": 3e-2, "c3a": 3e-3, "lora_r4": 3e-3, "fourierft": 3e-3}


def attach(arm: str, backbone: nn.Module, block_size: int, fourier_n: int) -> nn.Module:
    """Put the arm's adapters on q_proj/v_proj of ``backbone`` (frozen first)."""
    for p in backbone.parameters():
        p.requires_grad_(False)
    if arm.startswith("bca_"):
        return apply_bca(backbone, ("q_proj", "v_proj"), block_size, backend=arm[4:])
    from peft import C3AConfig, FourierFTConfig, LoraConfig, inject_adapter_in_model

    targets = ["q_proj", "v_proj"]
    config = {
        "c3a": lambda: C3AConfig(block_size=block_size, target_modules=targets),
        "lora_r4": lambda: LoraConfig(r=4, lora_alpha=8, target_modules=targets),
        "fourierft": lambda: FourierFTConfig(n_frequency=fourier_n, target_modules=targets),
    }[arm]()
    return inject_adapter_in_model(config, backbone)


def _is_adapter(m: nn.Module) -> bool:
    if isinstance(m, BCAdapter):
        return True
    return hasattr(m, "base_layer") and hasattr(m, "active_adapters")


def saved_bytes(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(adapter-op, whole-model) bytes of unique non-parameter storages saved for backward."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    state = {"adapter": 0, "base": 0}
    seen_adapter: dict[int, int] = {}
    seen_all: dict[int, int] = {}
    handles = []
    for m in model.modules():
        if _is_adapter(m):
            base = m.base if isinstance(m, BCAdapter) else m.base_layer
            for mod, key in ((m, "adapter"), (base, "base")):
                handles.append(
                    mod.register_forward_pre_hook(
                        lambda *a, k=key: state.__setitem__(k, state[k] + 1)
                    )
                )
                handles.append(
                    mod.register_forward_hook(lambda *a, k=key: state.__setitem__(k, state[k] - 1))
                )

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params:
            seen_all[ptr] = st.nbytes()
            if state["adapter"] > 0 and state["base"] == 0:
                seen_adapter[ptr] = st.nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return sum(seen_adapter.values()), sum(seen_all.values())


def peak_step_bytes(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor) -> int:
    """Peak extra live tensor bytes of one forward + backward + optimizer step (after a warm-up
    step, so the optimizer state already exists)."""

    def step():
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    return peak_live_bytes(step)


def op_saved_bytes(backend: str, shape=(16, 256, 128), block_size: int = 32) -> int:
    """Bytes one BCA op saves for backward on an input that requires grad (the op alone)."""
    from rdfft.layers import block_circulant_matmul

    x = torch.randn(*shape, requires_grad=True)
    h = x * 1.0  # a non-leaf input, as a hidden state is
    q = shape[-1] // block_size
    c = torch.zeros(q, q, block_size, requires_grad=True)
    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block_circulant_matmul(h, c, backend)
    return sum(seen.values())


def _peft_available() -> bool:
    try:
        import peft  # noqa: F401

        return True
    except ImportError:
        return False


@SUITE.case("finetune", kind="quality")
def finetune(ctx: Context) -> None:
    """Tiny Llama snippet classification: BCA-rdfft vs BCA-rfft vs peft C3A / LoRA / FourierFT.

    Runs on one thread (pretraining included): on the shared 2-core machine two threads made the
    many small ops of the rdfft stages ~18x slower per step (4.65 s vs 0.26 s for rfft).
    """
    with single_thread():
        _finetune(ctx)


def _finetune(ctx: Context) -> None:
    from neurips25_core.models import pretrained_tiny_llama_for, tiny_llama_config, train
    from rdfft.tasks import snippet_task

    steps = ctx.pick(smoke=3, quick=40, full=400)
    seeds = ctx.pick(smoke=[0], quick=[0], full=[0, 1, 2])
    length = ctx.pick(smoke=64, quick=256, full=256)
    batch = ctx.pick(smoke=4, quick=8, full=16)
    n_eval = ctx.pick(smoke=16, quick=128, full=1024)
    arms = list(ctx.pick(smoke=ARMS, quick=ARMS[:4], full=ARMS))
    if not _peft_available():
        ctx.log(
            "finetune: peft not installed (install the 'peers' extra); skipping C3A/LoRA/FourierFT"
        )
        arms = [a for a in arms if a.startswith("bca_")]
    # quick fits 60 s on an empty cache with a smaller backbone than the (hidden 64,
    # 2 layers, pretrained 200 steps of 8 x 128 bytes instead of the core's default hidden 128,
    # 4 layers, 600 steps of 16 x 128, whose pretraining alone takes ~76 s); full uses the default
    quick_backbone = dict(
        config=tiny_llama_config(hidden_size=64, num_layers=2),
        steps=200,
        batch_size=8,
        seq_len=128,
    )
    pretrained = pretrained_tiny_llama_for(
        ctx.mode, progress=False, **ctx.pick(smoke={}, quick=quick_backbone, full={})
    )
    task = snippet_task(length=length)
    xt, yt = task.batch("test", n_eval, seed=12345)
    block = 32
    fourier_n = ctx.pick(smoke=64, quick=1000, full=1000)
    summary: dict[str, dict[str, float]] = {}
    curves: dict[str, list[float]] = {}
    op_shape = (batch, length, pretrained.config.hidden_size)
    op_bytes = {b: op_saved_bytes(b, op_shape, block) for b in ("rfft", "rdfft")}
    for b, v in op_bytes.items():
        ctx.record(
            "op_saved_bytes",
            v,
            "B",
            baseline="bca_rfft" if b == "rdfft" else None,
            baseline_value=op_bytes["rfft"] if b == "rdfft" else None,
            arm=f"bca_{b}",
            shape="x".join(map(str, op_shape)),
        )
    probe_x, probe_y = task.batch("train", batch, seed=7)
    for arm in arms:
        accs = []
        for seed in seeds:
            torch.manual_seed(seed)
            backbone = attach(arm, copy.deepcopy(pretrained.model), block, fourier_n)
            model = Classifier(backbone, task.num_classes)
            adapter_params = sum(
                p.numel() for n, p in backbone.named_parameters() if p.requires_grad
            )
            g = torch.Generator().manual_seed(seed)
            lr = LRS[arm]

            def opt(params, model=model, lr=lr, arm=arm):
                groups = bca_parameter_groups(model, lr) if arm.startswith("bca_") else params
                return torch.optim.AdamW(groups, lr=lr, weight_decay=0.0)

            res = train(
                model,
                lambda step, g=g: task.batch("train", batch, generator=g),
                steps,
                optimizer=opt,
                lr=lr,
                seed=seed,
                loss_fn=lambda m, x, y: F.cross_entropy(m(x), y),
                progress=False,
                desc=arm,
            )
            with torch.no_grad():
                acc = (
                    sum(
                        (model(xt[i : i + 64]).argmax(-1) == yt[i : i + 64]).sum().item()
                        for i in range(0, n_eval, 64)
                    )
                    / n_eval
                )
            accs.append(acc)
            if seed == seeds[0]:
                curves[arm] = res.losses
                model.train()
                adapter_b, model_b = saved_bytes(model, probe_x)
                trainable = [p for p in model.parameters() if p.requires_grad]
                peak = peak_step_bytes(model, opt(trainable), probe_x, probe_y)
                summary[arm] = {
                    "peak_step_bytes": peak,
                    "adapter_params": adapter_params,
                    "adapter_saved_bytes": adapter_b,
                    "model_saved_bytes": model_b,
                    "s_per_step": res.seconds / steps,
                    "final_loss": sum(res.losses[-10:]) / len(res.losses[-10:]),
                }
        summary[arm]["accuracy"] = sum(accs) / len(accs)
        s = summary[arm]
        params = dict(
            arm=arm,
            steps=steps,
            seeds=len(seeds),
            lr=LRS[arm],
            batch=batch,
            length=length,
            hidden=pretrained.config.hidden_size,
            layers=pretrained.config.num_hidden_layers,
        )
        ctx.record("accuracy", s["accuracy"], "frac", lower_is_better=False, **params)
        ctx.record("adapter_params", s["adapter_params"], "count", **params)
        ctx.record("final_train_loss", s["final_loss"], "nats", **params)
        base = summary.get("bca_rfft")
        ctx.record(
            "adapter_saved_bytes",
            s["adapter_saved_bytes"],
            "B",
            baseline="bca_rfft" if base and arm != "bca_rfft" else None,
            baseline_value=base["adapter_saved_bytes"] if base and arm != "bca_rfft" else None,
            **params,
        )
        ctx.record("model_saved_bytes", s["model_saved_bytes"], "B", **params)
        ctx.record("peak_step_bytes", s["peak_step_bytes"], "B", **params)
        ctx.record("s_per_step", s["s_per_step"], "s", **params)
    if "bca_rdfft" in summary:
        # the same trained adapters without the q/v shared spectrum: each adapter keeps its own X
        torch.manual_seed(0)
        backbone = copy.deepcopy(pretrained.model)
        for p in backbone.parameters():
            p.requires_grad_(False)
        apply_bca(backbone, ("q_proj", "v_proj"), block, backend="rdfft", share_spectra=False)
        unshared, _ = saved_bytes(Classifier(backbone, task.num_classes).train(), probe_x)
        ctx.record("adapter_saved_bytes", unshared, "B", arm="bca_rdfft_unshared", steps=0)
    if "bca_rdfft" in curves and "bca_rfft" in curves:
        diff = max(abs(a - b) for a, b in zip(curves["bca_rdfft"], curves["bca_rfft"]))
        ctx.record("max_loss_gap_rdfft_vs_rfft", diff, "nats", steps=steps)
    names = list(summary)
    plot_bars(
        names,
        {"accuracy": [summary[a]["accuracy"] for a in names]},
        ctx.path("finetune_accuracy.png"),
        ylabel="test accuracy",
        title=f"snippet classification, {steps} steps",
    )
    plot_bars(
        names,
        {
            "adapter saved KiB": [summary[a]["adapter_saved_bytes"] / 1024 for a in names],
            "model saved KiB / 10": [summary[a]["model_saved_bytes"] / 10240 for a in names],
            "model step peak KiB / 10": [summary[a]["peak_step_bytes"] / 10240 for a in names],
        },
        ctx.path("finetune_saved_bytes.png"),
        ylabel="KiB saved for backward",
        title="bytes saved for backward per forward; peak live bytes of one step",
    )
