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


@needs_trl
def test_trl_dpo_one_step_equals_ours(monkeypatch):
    """One optimizer step of trl's DPOTrainer (our optimizer and schedule handed to it, one batch
    holding every pair) takes the gradient seal.train.dpo takes (float64), and the same step.

    The gradients agree to ~2e-7 of their norm, not to float64 round-off: some part of trl's loss
    path is not float64-exact (not traced further). Adam's first step is ~lr * sign(grad), so a
    near-zero gradient element (|g| ~ Adam's eps) turns a 1e-11 gradient difference into ~4e-4 of a
    step: the gradients are compared at 1e-6 of their norm, the parameters at 1e-3 of the step.
    """
    from seal.peers import trl_dpo
    from seal.train import dpo

    tok, policy, ref = _models(1)
    grads: list[list[torch.Tensor]] = []
    real_step = torch.optim.AdamW.step

    def step(self, *args, **kwargs):  # the gradient each loop hands its optimizer
        grads.append([p.grad.detach().clone() for g in self.param_groups for p in g["params"]])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    mine, theirs = copy.deepcopy(policy), copy.deepcopy(policy)
    lr = 1e-2
    ours = dpo(mine, copy.deepcopy(ref), tok, PAIRS, max_steps=1, batch_size=3, lr=lr)
    got = trl_dpo(theirs, copy.deepcopy(ref), tok, PAIRS, max_steps=1, batch_size=3, lr=lr)
    assert len(grads) == 2 and len(got["losses"]) == 1
    assert abs(got["losses"][0] - ours.losses[0]) <= 1e-6  # trl logs a float32-accumulated loss
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads[0]])).item()
    assert norm > 1e-3
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6 * norm)
    moved = [(a - b).abs().max().item() for a, b in zip(mine.parameters(), policy.parameters())]
    assert min(moved) > 0.5 * lr  # every tensor took an Adam step of ~lr
    for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-3 * lr)
    assert not theirs.training  # handed back in eval mode, like seal.train.dpo


@needs_trl
def test_trl_seal_trains_from_an_sft_state():
    """The benchmark's seal_trl arm: SFTOnly's SFT stage, then trl's DPOTrainer as the DPO stage;
    its checkpoint is refused by SEAL (another arm) and reloads into TrlSEAL."""
    from seal import (
        AdversarialAnonymizer,
        BagOfWordsInferrer,
        SyntheticProfiles,
        UtilityJudge,
        collect,
    )
    from seal.peers import TrlSEAL
    from seal.student import SEAL, SFTOnly

    tiny = dict(layers=1, width=32, heads=2, sft_steps=3, dpo_steps=2, batch_size=4)
    tiny.update(max_new_tokens=8, iterations=2)
    profiles = SyntheticProfiles(20, seed=0)
    bow = BagOfWordsInferrer().fit([p.text for p in profiles], [p.attributes for p in profiles])
    trajs = collect(profiles, AdversarialAnonymizer(), bow, UtilityJudge(), seed=0)
    sft_state = SFTOnly(**tiny).fit(trajs).state_dict()
    student = TrlSEAL(**tiny).fit(trajs, sft_state=sft_state)
    losses = student.history["dpo"].losses
    assert len(losses) == 2 and math.isclose(losses[0], math.log(2), rel_tol=1e-5)
    moved = any(
        not torch.equal(a, student.model.state_dict()[k]) for k, a in sft_state["model"].items()
    )
    assert moved and not student.model.training
    state = student.state_dict()
    assert state["arm"] == "TrlSEAL"
    with pytest.raises(ValueError, match="TrlSEAL"):
        SEAL(**tiny).load_state_dict(state)
    again = TrlSEAL(**tiny).load_state_dict(state)
    states = again.refine([p.text for p in profiles[:2]])
    assert [s[0].text for s in states] == [p.text for p in profiles[:2]]


@needs_trl
def test_trl_dpo_bad_input_names_the_argument():
    from seal.peers import trl_dpo

    tok, policy, ref = _models(1)
    with pytest.raises(TypeError, match="reference"):
        trl_dpo(policy, None, tok, PAIRS, max_steps=1)
    with pytest.raises(ValueError, match="reference"):
        trl_dpo(policy, policy, tok, PAIRS, max_steps=1)
    with pytest.raises(ValueError, match="beta"):
        trl_dpo(policy, ref, tok, PAIRS, max_steps=1, beta=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        trl_dpo(policy, ref, tok, PAIRS, max_steps=0)
