"""The language stand-in: stdlib families as sources, a held-out target family, the arms."""

import sys

import pytest
import torch
from cads.language import (
    _window_text,
    byte_llama_factory,
    deploy_language,
    dsir_language,
    select_language,
    stdlib_families,
)

from neurips25_core.dsir import dsir_available

needs_dsir = pytest.mark.skipif(
    not dsir_available(),
    reason="data-selection (cads's peers extra) is not installed: uv sync --all-packages --extra peers",
)


@pytest.fixture
def root(tmp_path):
    for pkg, files in {"alpha": 3, "beta": 2, "gamma": 4}.items():
        (tmp_path / pkg).mkdir()
        for i in range(files):
            (tmp_path / pkg / f"m{i}.py").write_text(f"# {pkg} {i}\n" + f"x_{i} = '{pkg}'\n" * 20)
    (tmp_path / "single.py").write_text("import os\n" * 30)
    return tmp_path


def test_families_are_sources_and_the_target_is_held_out(root):
    d = stdlib_families(
        target="gamma", per_source=5, seq_len=16, val_windows=3, test_windows=4, root=str(root)
    )
    assert d.families == ("<modules>", "alpha", "beta")
    assert d.x.shape == (15, 16) and torch.equal(d.sources, torch.arange(3).repeat_interleave(5))
    assert torch.equal(d.x[:, 1:], d.y[:, :-1])
    text = [bytes(w.tolist()).decode() for w in d.x]
    assert all("gamma" not in t for t in text)
    family_text = {
        1: "".join(f.read_text() + "\n" for f in sorted((root / "alpha").glob("*.py"))),
        2: "".join(f.read_text() + "\n" for f in sorted((root / "beta").glob("*.py"))),
    }
    for t, y, s in zip(text, d.y, d.sources.tolist()):
        if s in family_text:  # each window (and its next byte) is a slice of its own family
            assert t + chr(int(y[-1])) in family_text[s]
    val = [bytes(w.tolist()).decode() for w in d.val[0]]
    assert d.val[0].shape == (3, 16) and d.test[0].shape == (4, 16)
    assert all("gamma 1" not in t and "gamma 3" not in t for t in val), "odd files are test files"
    sizes = [
        sum(len(f.read_bytes()) + 1 for f in (root / p).glob("*.py")) for p in ("alpha", "beta")
    ]
    assert d.family_bytes[1:].tolist() == sizes
    again = stdlib_families(
        target="gamma", per_source=5, seq_len=16, val_windows=3, test_windows=4, root=str(root)
    )
    assert torch.equal(d.x, again.x)


def test_bad_input_names_the_argument(root):
    with pytest.raises(ValueError, match="target"):
        stdlib_families(target="delta", root=str(root))
    (root / "solo").mkdir()
    (root / "solo" / "only.py").write_text("y = 1\n" * 40)
    with pytest.raises(ValueError, match="target"):
        stdlib_families(target="solo", seq_len=8, root=str(root))
    with pytest.raises(ValueError, match="per_source"):
        stdlib_families(per_source=0, root=str(root))


def test_arms_and_deployment(root):
    d = stdlib_families(
        target="gamma", per_source=4, seq_len=8, val_windows=3, test_windows=3, root=str(root)
    )
    factory = byte_llama_factory(0, hidden=8, layers=1, seq_len=8)
    a, b = factory(), factory()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert select_language("uniform", factory, d, 3, 4, 0, 1, 2).tolist() == [1.0, 1.0, 1.0]
    prop = select_language("size_proportional", factory, d, 3, 4, 0, 1, 2)
    torch.testing.assert_close(prop, d.family_bytes / d.family_bytes.sum())
    best = select_language("best_single", factory, d, 3, 4, 0, 1, 2)
    scores = []
    for g in range(3):
        w = torch.zeros(3, dtype=torch.float64)
        w[g] = 1.0
        scores.append(deploy_language(factory, d, w, 2, 4, 0)["val_bpb"])
    assert best.tolist() == [
        1.0 if g == min(range(3), key=scores.__getitem__) else 0.0 for g in range(3)
    ]
    w = select_language("cads_s", factory, d, 5, 4, 0, 2, 2)
    assert w.shape == (3,) and ((w >= 0) & (w <= 1)).all()
    out = deploy_language(factory, d, w, 3, 4, seed=1)
    assert out == deploy_language(factory, d, w, 3, 4, seed=1) and out["test_bpb"] > 0
    with pytest.raises(ValueError, match="arm"):
        select_language("bogus", factory, d, 3, 4, 0, 1, 2)


def test_window_text_is_lossless():
    x = torch.tensor([[0, 10, 65, 200, 255], [32, 33, 127, 128, 9]])
    assert [t.encode("latin-1") for t in _window_text(x)] == [bytes(r) for r in x.tolist()]


@needs_dsir
def test_dsir_arm_is_dsir_select_on_the_windows_and_deploys_its_windows(root):
    from neurips25_core.dsir import dsir_select

    d = stdlib_families(
        target="gamma", per_source=6, seq_len=8, val_windows=3, test_windows=3, root=str(root)
    )
    factory = byte_llama_factory(0, hidden=8, layers=1, seq_len=8)
    idx = select_language("dsir", factory, d, 2, 4, 3, 1, 2)
    ref, log_w = dsir_select(_window_text(d.x), _window_text(d.val[0]), 8, seed=3)
    assert torch.equal(idx, ref) and idx.dtype == torch.long and log_w.shape == (18,)
    assert dsir_language(d, 100, 4, 3)[0].numel() == 9  # k capped at half the pool
    mask = torch.zeros(18, dtype=torch.bool)
    mask[idx] = True
    assert deploy_language(factory, d, idx, 3, 4, seed=1) == deploy_language(
        factory, d, mask, 3, 4, seed=1
    )


def test_dsir_bad_input_and_missing_peer(root, monkeypatch):
    d = stdlib_families(
        target="gamma", per_source=2, seq_len=8, val_windows=2, test_windows=2, root=str(root)
    )
    with pytest.raises(ValueError, match="steps"):
        dsir_language(d, 0, 4, 0)
    with pytest.raises(ValueError, match="batch_size"):
        dsir_language(d, 1, 0, 0)
    monkeypatch.setitem(sys.modules, "data_selection", None)
    with pytest.raises(ImportError, match="peers"):
        dsir_language(d, 1, 4, 0)
