"""Two gloo processes (DDP, all-gathered scores, all-reduced BN moments) = one process, global batch."""

from __future__ import annotations

import pytest
import torch
from multibitq import MultiBitConfig, convert_, resnet_multibit, train_multibit

from neurips25_core.bench import single_thread
from neurips25_core.distributed import run_distributed


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models: a second intra-op thread only spin-waits (and costs CPU on a shared machine)
    with single_thread():
        yield


def _run(rank, world_size, method, coreset, bn, epochs):
    cfg = MultiBitConfig(
        bits=(2, 4, 32),
        bn=bn,
        correction="mean_var" if bn == "shared" else "none",
        prune_rate=0.5,
        rescore_every=1,
    )
    torch.manual_seed(0)
    model = convert_(resnet_multibit(8, 1, 10, 4), cfg).double()
    g = torch.Generator().manual_seed(3)
    x = torch.rand(40, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.arange(40) % 10
    hist = train_multibit(model, (x, y), cfg, method, epochs=epochs, batch_size=10, coreset=coreset)
    subsets = [{b: s.clone() for b, s in d.items()} for d in hist.subsets]
    return {k: v.clone() for k, v in model.state_dict().items()}, subsets, hist.steps


def _check(method, coreset, bn, epochs):
    single = _run(0, 1, method, coreset, bn, epochs)
    ranks = run_distributed(_run, world_size=2, args=(method, coreset, bn, epochs))
    for state, subsets, steps in ranks:
        assert steps == single[2]
        for a, b in zip(subsets, single[1], strict=True):  # scores gathered: same subsets
            assert all(torch.equal(a[bits], b[bits]) for bits in b)
        for name, value in single[0].items():
            torch.testing.assert_close(state[name], value, rtol=1e-6, atol=1e-6, msg=name)
    return single[2]


def test_ddp_ours_equals_single_process():
    # 10 optimizer steps: 5 epochs of k = 20 samples per child, global batch 10 (5 per rank)
    assert _check("ours", "bitwise", "shared", epochs=5) == 10


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "coreset", "bn"),
    [
        ("anyprecision", "bitwise", "switchable"),
        ("ours", "forgetting", "shared"),
        ("ours", "moderate", "shared"),
        ("joint", "bitwise", "shared"),
    ],
)
def test_ddp_other_methods_equal_single_process(method, coreset, bn):
    _check(method, coreset, bn, epochs=3)
