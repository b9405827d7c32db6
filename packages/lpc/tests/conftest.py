import numpy as np
import pytest
from lpc.trace import Request


def random_trace(
    rng, n_requests: int, n_convs: int = 4, vocab: int = 3, msg=(1, 3), resp=(0, 2), shared=0
):
    """Small multi-turn trace: growing contexts, a tiny vocabulary (so conversations share prefixes)."""
    contexts = {c: rng.integers(0, vocab, size=shared).astype(np.int32) for c in range(n_convs)}
    base = rng.integers(0, vocab, size=shared).astype(np.int32)
    for c in contexts:
        if shared:
            contexts[c] = base.copy()
    turns = dict.fromkeys(range(n_convs), 0)
    out, t = [], 0.0
    conv_seq = rng.integers(0, n_convs, size=n_requests)
    for c in conv_seq.tolist():
        t += float(rng.exponential(5.0))
        msg_t = rng.integers(0, vocab, size=int(rng.integers(msg[0], msg[1] + 1))).astype(np.int32)
        prompt = np.concatenate([contexts[c], msg_t])
        response = rng.integers(0, vocab, size=int(rng.integers(resp[0], resp[1] + 1))).astype(
            np.int32
        )
        out.append(Request(t, c, turns[c], prompt, (f"m{turns[c]}",), True, response=response))
        contexts[c] = np.concatenate([prompt, response])
        turns[c] += 1
    last = {}
    for i, r in enumerate(out):
        last[r.conv_id] = i
    for i, r in enumerate(out):
        if last[r.conv_id] == i:
            r.has_next = False
    return out


@pytest.fixture
def make_trace():
    return random_trace
