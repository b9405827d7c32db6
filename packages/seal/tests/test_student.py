"""The student arms run end to end on a tiny model (quality is not expected at this size)."""

import math

import pytest
from seal import (
    AdversarialAnonymizer,
    BagOfWordsInferrer,
    SyntheticProfiles,
    UtilityJudge,
    collect,
)
from seal.adversary import Inference
from seal.student import SEAL, AnonymizeOnlySFT, SFTOnly, StudentConfig, anonymize_only_examples

TINY = dict(
    layers=1,
    width=32,
    heads=2,
    sft_steps=3,
    dpo_steps=2,
    batch_size=4,
    max_new_tokens=8,
    iterations=2,
)


@pytest.fixture(scope="module")
def trajectories():
    profiles = SyntheticProfiles(20, seed=0)
    bow = BagOfWordsInferrer().fit([p.text for p in profiles], [p.attributes for p in profiles])
    return profiles, collect(profiles, AdversarialAnonymizer(), bow, UtilityJudge(), seed=0)


@pytest.mark.parametrize("arm", [SEAL, SFTOnly, AnonymizeOnlySFT])
def test_arm_trains_and_anonymizes_end_to_end(arm, trajectories):
    profiles, trajs = trajectories
    student = arm(**TINY).fit(trajs)
    assert len(student.history["sft"].losses) == 3
    if arm is SEAL:
        assert student.history["pairs"] > 0
        assert math.isclose(student.history["dpo"].losses[0], math.log(2), rel_tol=1e-6)
    else:
        assert "dpo" not in student.history
    texts = [p.text for p in profiles[:3]]
    states = student.refine(texts)
    assert [s[0].text for s in states] == texts
    assert all(1 <= len(s) <= 3 for s in states)
    if arm is AnonymizeOnlySFT:  # no critique: always `iterations` rewrites
        assert all(len(s) == 3 for s in states)
    with pytest.raises(ValueError, match="iterations"):
        student.refine(texts, iterations=0)
    out = student.anonymize(texts[0])
    assert isinstance(out, str) and out.strip()
    if arm is not AnonymizeOnlySFT:  # one rewrite conditioned on given feedback
        one = student.anonymize(texts[0], {"city": Inference(profiles[0].attributes["city"], 0.9)})
        assert isinstance(one, str) and one.strip()


def test_anonymize_only_data_has_no_critique(trajectories):
    _, trajs = trajectories
    rows = anonymize_only_examples(trajs)
    assert rows and all("<leaks>" not in p and "<utility>" not in p for p, _ in rows)


def test_student_bad_input_names_the_argument(trajectories):
    with pytest.raises(ValueError, match="iterations"):
        SFTOnly(iterations=0)
    with pytest.raises(TypeError, match="lerning_rate"):
        SFTOnly(lerning_rate=1.0)
    with pytest.raises(TypeError, match="config"):
        SEAL(config={"layers": 1})
    with pytest.raises(RuntimeError, match="fit"):
        SFTOnly().anonymize("I live in Zurich.")
    with pytest.raises(TypeError, match="trajectories"):
        SFTOnly(**TINY).fit(["not a trajectory"])
    assert SEAL(StudentConfig(layers=2)).config.layers == 2
