import sysconfig

import pytest
import torch

from neurips25_core.data import stdlib_corpus, stdlib_files


def test_corpus_is_the_stdlib_without_third_party_code():
    files = stdlib_files()
    assert len(files) > 500
    assert not any("site-packages" in f.parts for f in files)
    assert all(str(f).startswith(sysconfig.get_paths()["stdlib"]) for f in files)


def test_split_is_by_file_deterministic_and_disjoint():
    a = stdlib_corpus()
    b = stdlib_corpus(val_fraction=0.05, seed=0)
    assert a.fingerprint == b.fingerprint
    assert not set(a.train_files) & set(a.val_files)
    assert len(a.val_files) > 0
    assert 0.01 < a.val.numel() / (a.train.numel() + a.val.numel()) < 0.15
    other = stdlib_corpus(seed=1)
    assert set(other.val_files) != set(a.val_files)
    assert a.train.dtype == torch.uint8 and a.vocab_size == 256


def test_batches_are_next_byte_pairs_and_seeded():
    c = stdlib_corpus()
    g = torch.Generator().manual_seed(0)
    x, y = c.get_batch("val", 3, 17, generator=g)
    assert x.shape == y.shape == (3, 17) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    b1 = list(c.batches("train", 2, 8, seed=5, num_batches=2))
    b2 = list(c.batches("train", 2, 8, seed=5, num_batches=2))
    assert all(torch.equal(p[0], q[0]) for p, q in zip(b1, b2))


def test_bad_arguments_name_themselves():
    c = stdlib_corpus()
    with pytest.raises(ValueError, match="split"):
        c.get_batch("test", 1, 8)
    with pytest.raises(ValueError, match="batch_size"):
        c.get_batch("train", 0, 8)
    with pytest.raises(ValueError, match="val_fraction"):
        stdlib_corpus(val_fraction=1.5)
