import re
from types import SimpleNamespace

import pytest
import torch
from mambaspectrum.eval import NEEDLE, QUESTION, passkey, passkey_batch

FILLER = torch.randint(97, 123, (5000,), generator=torch.Generator().manual_seed(0))


class KeyReader(torch.nn.Module):
    """A perfect retriever: reads the key from the needle and predicts it after the question
    (teacher-forced: position t predicts the digit the answer needs at t + 1). ``offset`` shifts
    every digit by one to make a model that always fails."""

    def __init__(self, offset=0):
        super().__init__()
        self.offset = offset

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, 256)
        for r, row in enumerate(ids.tolist()):
            text = bytes(row).decode()
            key = re.search(r"pass key is (\d+)\.", text).group(1)
            q = text.rindex(QUESTION.strip()) + len(QUESTION.strip())  # the space before the key
            for i, digit in enumerate(key):
                pos = q + i
                if pos < ids.shape[1]:
                    logits[r, pos, (ord(digit) - 48 + self.offset) % 10 + 48] = 1.0
        return SimpleNamespace(logits=logits)


def test_passkey_batch_layout():
    g = torch.Generator().manual_seed(1)
    for depth in (0.0, 0.5, 1.0):
        ids, k = passkey_batch(FILLER, 300, depth, 3, g)
        assert ids.shape == (3, 300) and k == 5
        for row in ids.tolist():
            text = bytes(row).decode()
            key = text[-k:]
            assert key.isdigit()
            needle = NEEDLE.format(key=key)
            at = text.index(needle)
            fill = 300 - len(needle) - len(QUESTION) - k
            assert at == round(depth * fill)
            assert text[:-k].endswith(QUESTION)
    # the mask marks exactly the needle, the question and the answer (not the filler)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ids, k = passkey_batch(FILLER, 300, 0.4, 2, g1)
    ids_m, k_m, mask = passkey_batch(FILLER, 300, 0.4, 2, g2, return_mask=True)
    assert torch.equal(ids, ids_m) and k == k_m and mask.shape == ids.shape
    for row, m in zip(ids.tolist(), mask.tolist(), strict=True):
        text = bytes(row).decode()
        needle = NEEDLE.format(key=text[-k:])
        marked = bytes(t for t, on in zip(row, m, strict=True) if on).decode()
        assert marked == needle + QUESTION + text[-k:]


def test_passkey_scores_a_perfect_and_a_broken_retriever():
    acc = passkey(KeyReader(), [200, 400], [0.0, 0.5, 1.0], FILLER, n=3)
    assert set(acc) == {(t, d) for t in (200, 400) for d in (0.0, 0.5, 1.0)}
    assert all(v == 1.0 for v in acc.values())
    assert all(v == 0.0 for v in passkey(KeyReader(1), [200], [0.5], FILLER, n=3).values())
    # seeded: the same prompts twice
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(
        passkey_batch(FILLER, 250, 0.3, 2, g1)[0], passkey_batch(FILLER, 250, 0.3, 2, g2)[0]
    )


def test_passkey_bad_input():
    model = KeyReader()
    with pytest.raises(ValueError, match="filler_ids"):
        passkey(model, [200], [0.5], FILLER.float())
    with pytest.raises(ValueError, match="filler_ids"):
        passkey(model, [200], [0.5], FILLER[None])
    with pytest.raises(ValueError, match="filler_ids"):
        passkey(model, [6000], [0.5], FILLER)
    with pytest.raises(ValueError, match="depths"):
        passkey(model, [200], [1.5], FILLER)
    with pytest.raises(ValueError, match="lengths"):
        passkey(model, [50], [0.5], FILLER)
    with pytest.raises(ValueError, match="n"):
        passkey(model, [200], [0.5], FILLER, n=0)
