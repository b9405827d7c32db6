"""The reduced reproduction's data: families, corruption, encoding, exact match = greedy decoding."""

from __future__ import annotations

import pytest
import torch
from lope.tasks import (
    FAMILIES,
    IGNORE,
    PAD,
    corrupt_examples,
    encode,
    evaluate,
    make_instructions,
    render,
)


def test_families_in_equal_shares_and_answers_are_right():
    data = make_instructions(60, seed=3)
    assert [d[0] for d in data[:6]] == list(FAMILIES)
    assert all(sum(d[0] == f for d in data) == 10 for f in FAMILIES)
    for family, instruction, response in data:
        payload = instruction.split(": ", 1)[1]
        if family == "upper":
            assert response == payload.upper()
        elif family == "reverse":
            assert response.split() == payload.split()[::-1]
        elif family == "sort":
            assert response == "".join(sorted(payload))
        elif family == "add":
            a, b = payload.split("+")
            assert int(response) == int(a) + int(b)
        elif family == "defname":
            assert payload.startswith("def " + response + "(")
        else:
            assert int(response) == len(payload.split(", "))
    assert make_instructions(60, seed=3) == data
    assert make_instructions(60, seed=4) != data


def test_corruption_touches_exactly_the_flagged_fraction_and_is_seeded():
    data = make_instructions(200, seed=0)
    noisy, flags = corrupt_examples(data, 0.2, seed=5)
    assert sum(flags) == 40
    assert all(a == b for a, b, f in zip(data, noisy, flags) if not f)
    changed = sum(a != b for a, b, f in zip(data, noisy, flags) if f)
    # A shuffle of a one-word text changes nothing; most flagged examples still change.
    assert changed >= 30
    assert all(a[0] == b[0] for a, b in zip(data, noisy))
    assert corrupt_examples(data, 0.2, seed=5) == (noisy, flags)
    assert corrupt_examples(data, 0.0, seed=5) == (data, [False] * 200)


def test_encode_targets_only_the_response_bytes():
    data = make_instructions(7, seed=0)
    x, y = encode(data)
    for i, (_f, instruction, response) in enumerate(data):
        prompt, completion = render(instruction, response)
        full = (prompt + completion).encode()
        assert bytes(x[i, : len(full) - 1].tolist()) == full[:-1]
        assert (x[i, len(full) - 1 :] == PAD).all()
        picked = y[i][y[i] != IGNORE]
        assert bytes(picked.tolist()) == completion.encode()


class _Oracle(torch.nn.Module):
    """Predicts the next byte of the stored string whose prefix it is fed (logits one-hot)."""

    def __init__(self, texts):
        super().__init__()
        self.texts = [t.encode() for t in texts]

    def forward(self, input_ids, attention_mask=None):
        b, length = input_ids.shape
        logits = torch.zeros(b, length, 256)
        for i in range(b):
            row = bytes(input_ids[i].tolist()).rstrip(b"\0")
            text = next(t for t in self.texts if t.split(b"\n")[0] == row.split(b"\n")[0])
            for t in range(length):
                nxt = text[t + 1] if t + 1 < len(text) else 10
                logits[i, t, nxt] = 1.0
        return type("Out", (), {"logits": logits})()


def _greedy(model, prompt: bytes, limit: int = 40) -> bytes:
    ids = list(prompt)
    for _ in range(limit):
        logits = model(torch.tensor([ids])).logits
        ids.append(int(logits[0, -1].argmax()))
        if ids[-1] == 10:
            break
    return bytes(ids[len(prompt) :])


def test_teacher_forced_exact_match_equals_greedy_decoding():
    data = make_instructions(12, seed=0)
    texts = []
    for k, (_f, instruction, response) in enumerate(data):
        # The oracle knows the right answer for even examples, a wrong one for odd ones.
        answer = response if k % 2 == 0 else response[:-1] + "#"
        texts.append("".join(render(instruction, answer)))
    oracle = _Oracle(texts)
    greedy = [
        _greedy(oracle, render(i, r)[0].encode()) == render(i, r)[1].encode() for _f, i, r in data
    ]
    assert greedy == [k % 2 == 0 for k in range(12)]
    assert evaluate(oracle, data, batch_size=5)["exact_match"] == pytest.approx(50.0)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="n"):
        make_instructions(0)
    with pytest.raises(TypeError, match="seed"):
        make_instructions(3, seed="a")
    with pytest.raises(ValueError, match="fraction"):
        corrupt_examples(make_instructions(3), 1.5)
    with pytest.raises(TypeError, match="fraction"):
        corrupt_examples(make_instructions(3), "0.1")
    with pytest.raises(ValueError, match="examples"):
        encode([])
