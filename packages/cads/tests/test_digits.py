"""The noisy-digits data of the reduced reproduction and its MLP factory."""

import pytest
import torch
from cads.digits import KINDS, mlp_factory, noisy_digits


def test_noisy_digits_has_the_spec_split_and_kinds():
    d = noisy_digits()
    assert d.x.shape == (1200, 64) and d.val[0].shape == (150, 64) and d.test[0].shape == (447, 64)
    counts = torch.bincount(d.kind, minlength=4).tolist()
    assert counts == [420, 420, 180, 180]
    lab = d.kind == 2
    assert (d.y[lab] != d.y_clean[lab]).all() and torch.equal(d.y[~lab], d.y_clean[~lab])
    assert d.sources.min() >= 0 and d.sources.max() == 7
    assert torch.equal(d.sources % 4, d.kind) and torch.equal(d.sources // 4, (d.y >= 5).long())
    assert d.makeup(torch.arange(1200)) == pytest.approx(
        {"clean": 0.35, "blurred": 0.35, "label_noise": 0.15, "pixel_noise": 0.15}
    )
    w = torch.zeros(8, dtype=torch.float64)
    w[[2, 6]] = 1.0
    assert d.makeup(w)["label_noise"] == 1.0 and set(d.makeup(w)) == set(KINDS)
    again = noisy_digits()
    assert torch.equal(d.x, again.x) and torch.equal(d.y, again.y)


def test_blur_is_a_box_filter_and_pixel_noise_is_added_noise():
    d = noisy_digits(pool=200, val=10, test=10, seed=3)
    from sklearn.datasets import load_digits

    raw = torch.tensor(load_digits().data / 16.0, dtype=torch.float32)
    perm = torch.randperm(1797, generator=torch.Generator().manual_seed(3))[:200]
    clean = raw[perm]
    keep = d.kind == 0
    assert torch.equal(d.x[keep], clean[keep])
    blur = d.kind == 1
    want = torch.nn.functional.avg_pool2d(
        clean[blur].view(-1, 1, 8, 8), 3, 1, 1, count_include_pad=False
    ).view(-1, 64)
    assert torch.equal(d.x[blur], want)
    noise = d.x[d.kind == 3] - clean[d.kind == 3]
    assert 0.4 < noise.std().item() < 0.6


def test_mlp_factory_gives_the_same_weights_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    build = mlp_factory(4)
    a, b = build(), build()
    assert torch.equal(state, torch.random.get_rng_state())
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert [tuple(p.shape) for p in a.parameters()] == [(128, 64), (128,), (10, 128), (10,)]
    assert not torch.equal(a[0].weight, mlp_factory(5)()[0].weight)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"pool": 1700}, "pool"),
        ({"pool": 0}, "pool"),
        ({"label_noise": 1.0}, "label_noise"),
        ({"label_noise": 0.5, "pixel_noise": 0.3, "blurred": 0.3}, "blurred"),
        ({"pixel_std": 0.0}, "pixel_std"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        noisy_digits(**kwargs)
