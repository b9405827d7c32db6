"""The peers (``seal.peers``): Presidio with sockets blocked, trl's DPOTrainer against our DPO.

Each test is skipped, with the reason, when its peer is not installed (the ``peers`` extra).
"""

import copy
import math
import socket

import pytest
import torch
from seal.peers import presidio_available, trl_available

PAIRS = [
    ("about me: I live near the lake.", "I live in a city.", "I live in Zurich."),
    ("about work: my job is hard.", "I work shifts.", "I am a nurse at the clinic."),
    ("about me: I'm 34.", "I am an adult.", "I'm 34 and single."),
]

needs_presidio = pytest.mark.skipif(
    not presidio_available(),
    reason="presidio-analyzer/presidio-anonymizer/spacy not installed (seal 'peers' extra)",
)
needs_trl = pytest.mark.skipif(
    not trl_available(), reason="trl/datasets not installed (seal 'peers' extra)"
)


class _NoSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        raise OSError("sockets are blocked in this test")


@needs_presidio
def test_presidio_runs_with_sockets_blocked(monkeypatch):
    monkeypatch.setattr(socket, "socket", _NoSocket)
    monkeypatch.setattr(
        socket, "create_connection", lambda *a, **k: (_ for _ in ()).throw(OSError("blocked"))
    )
    with pytest.raises(OSError):
        socket.socket()
    from seal.data import SyntheticProfiles
    from seal.peers import PresidioScrubber

    scrubber = PresidioScrubber()
    assert {"LOCATION", "AGE"} <= set(scrubber.entities)
    out = scrubber.anonymize("about me: I'm 34. I live in Zurich. I love the lake near the Limmat.")
    assert out == "about me: I'm [AGE]. I live in [LOCATION]. I love the lake near the Limmat."
    # no NER (blank pipeline): indirect cues and unknown names survive, as the README says
    assert scrubber.anonymize("I met Anna at the Bahnhofstrasse.") == (
        "I met Anna at the Bahnhofstrasse."
    )
    for p in SyntheticProfiles(6, seed=0):
        text = scrubber.anonymize(p.text)
        assert p.attributes["city"] not in text
    with pytest.raises(ValueError, match="text"):
        scrubber.anonymize("  ")
    with pytest.raises(TypeError, match="text"):
        scrubber.anonymize(None)
    with pytest.raises(ValueError, match="score_threshold"):
        PresidioScrubber(score_threshold=2.0)


def _models(seed_ref):
    from seal.models import WordTokenizer, tiny_lm

    tok = WordTokenizer.from_corpus([t for row in PAIRS for t in row])
    policy = tiny_lm(tok, layers=1, width=32, heads=2, seed=0).double()
    ref = (
        copy.deepcopy(policy)
        if seed_ref is None
        else tiny_lm(tok, layers=1, width=32, heads=2, seed=seed_ref).double()
    )
    return tok, policy, ref


def _ours(tok, policy, ref, beta=0.1):
    from seal.train import _pad, dpo_loss, encode_pairs, sequence_logprob

    enc = encode_pairs(tok, PAIRS)
    prompts, _ = _pad([p for p, _, _ in enc] * 2, tok.pad_id, left=True)
    comps, c_mask = _pad([c for _, c, _ in enc] + [r for _, _, r in enc], tok.pad_id, left=False)
    attention = torch.cat([(prompts != tok.pad_id).long(), c_mask], 1)
    with torch.no_grad():
        lp = sequence_logprob(policy, prompts, comps, attention)
        lr = sequence_logprob(ref, prompts, comps, attention)
    b = len(enc)
    loss, cr, rr = dpo_loss(lp[:b], lp[b:], lr[:b], lr[b:], beta=beta)
    return loss.item(), (cr - rr).mean().item(), lp


@needs_trl
def test_trl_step0_loss_is_ln2_and_margins_equal_ours():
    from seal.peers import trl_dpo_step

    tok, policy, ref = _models(None)  # step 0 of DPO: the reference is the SFT policy
    before = [p.clone() for p in policy.parameters()]
    got = trl_dpo_step(policy, ref, tok, PAIRS, beta=0.1)
    loss, margin, _ = _ours(tok, policy, ref)
    assert math.isclose(loss, math.log(2), abs_tol=1e-12)
    assert abs(got["loss"] - math.log(2)) <= 1e-5
    assert abs(got["loss"] - loss) <= 1e-5
    assert abs(got["rewards/margins"] - margin) <= 1e-5
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))


@needs_trl
def test_trl_loss_and_margins_with_another_reference():
    """policy != reference (a real margin): trl's loss, margins and log-probs equal ours."""
    from seal.peers import trl_dpo_step

    tok, policy, ref = _models(1)
    got = trl_dpo_step(policy, ref, tok, PAIRS, beta=0.1)
    loss, margin, lp = _ours(tok, policy, ref)
    assert abs(margin) > 1e-3  # not the trivial zero of step 0
    b = len(PAIRS)
    assert abs(got["logps/chosen"] - lp[:b].mean().item()) <= 1e-5
    assert abs(got["logps/rejected"] - lp[b:].mean().item()) <= 1e-5
    assert abs(got["loss"] - loss) <= 1e-5
    assert abs(got["rewards/margins"] - margin) <= 1e-5


def test_peer_helpers_name_what_is_missing(monkeypatch):
    import importlib.util

    from seal import peers

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("trl", "presidio_analyzer") else real(name, *a),
    )
    assert not peers.trl_available() and not peers.presidio_available()
    with pytest.raises(ImportError, match="peers"):
        peers.PresidioScrubber()
    with pytest.raises(ImportError, match="peers"):
        peers.trl_dpo_step(None, None, None, PAIRS)
