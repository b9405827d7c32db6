"""The multibitq benchmark suite (``neurips25 bench multibitq``).

Every case runs in every mode (smoke / quick / full) and sizes itself with ``ctx.pick``; the
workspace tests run each case in smoke mode on an empty checkpoint cache.

Built so far: ``correction_overhead`` (speed), the per-step cost of the weight bias correction.
Not built yet: the reduced reproduction on digits, the epoch-time / sample-pass comparison with
Any-Precision, and the brevitas peer (see the README).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="multibitq",
    paper="Efficient Multi-bit Quantization Network Training via Weight Bias Correction and Bit-wise Coreset Sampling",
    url="https://arxiv.org/abs/2510.20673",
)


@SUITE.case(
    "correction_overhead",
    kind="speed",
    description="one training step (forward + backward) of a low-bit child, shared BN, with the "
    "weight bias correction against the same step without it (plain joint training)",
)
def correction_overhead(ctx: Context) -> None:
    """Step time of ours (correction) / joint without correction, same weights and batch."""
    from multibitq.modules import MultiBitConfig, convert_, resnet_multibit, using_bits

    width = ctx.pick(smoke=4, quick=16, full=16)
    batch = ctx.pick(smoke=8, quick=64, full=64)
    bits = 2
    torch.manual_seed(0)
    float_model = resnet_multibit(depth=8, in_channels=1, num_classes=10, width=width)
    models = {
        "joint (no correction)": convert_(
            copy.deepcopy(float_model), MultiBitConfig(bits=(2, 4, 32), correction="none")
        ),
        "ours (mean_var correction)": convert_(
            copy.deepcopy(float_model), MultiBitConfig(bits=(2, 4, 32), correction="mean_var")
        ),
    }
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    # The two compute the same thing at 32 bits (the correction is skipped there): check first.
    with torch.no_grad():
        a, b = (m.eval()(x) for m in models.values())
    if not torch.equal(a, b):
        raise AssertionError("the two models differ at 32 bits; the comparison would be unfair")
    for m in models.values():
        m.train()

    def step(model):
        def run():
            model.zero_grad(set_to_none=True)
            with using_bits(model, bits):
                F.cross_entropy(model(x), y).backward()

        return run

    with single_thread():
        result = compare(
            {name: step(m) for name, m in models.items()},
            baseline="joint (no correction)",
            min_time=ctx.pick(smoke=0.02, quick=1.0, full=3.0),
            cpu_time=True,
        )
    ctx.log(str(result))
    params = sum(p.numel() for p in float_model.parameters())
    result.record(ctx, metric="step_time", bits=bits, batch=batch, width=width, parameters=params)
