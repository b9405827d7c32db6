import math

import pytest
from seal.data import SyntheticProfiles
from seal.scoring import UtilityJudge, combined_score, privacy_key, privacy_rate


def test_privacy_key_orders_leaks_then_confidence():
    assert (-1, -0.9) > (-2, -0.1)
    assert privacy_key([0.9]) > privacy_key([0.1, 0.1])
    assert privacy_key([0.2]) > privacy_key([0.8])
    assert privacy_key([]) == (0, 0.0)
    assert privacy_key([0.5, 0.7]) == (-2, -0.6)


def test_judge_identity_is_perfect():
    judge = UtilityJudge()
    for p in SyntheticProfiles(10, seed=0):
        u = judge.score(p.text, p.text)
        assert (u.readability, u.meaning, u.hallucination, u.value) == (10.0, 10.0, 0, 1.0)


def test_specific_replacement_is_hallucination_generalizing_is_not():
    judge = UtilityJudge()
    original = "I live in Zurich and I love it."
    assert judge.score(original, "I live in Paris and I love it.").hallucination == 1
    assert judge.score(original, "I live in a city and I love it.").hallucination == 0
    assert judge.score("I'm 34 years old.", "I'm 35 years old.").hallucination == 1
    assert judge.score(original, "I live in <unk> and I love it.").hallucination == 1


def test_judge_exact_small_case():
    # original 4 tokens, rewrite drops one: ratio = 2*3/(4+3) = 6/7
    u = UtilityJudge().score("a b c d", "a b c")
    assert u.readability == 10.0 and u.hallucination == 0
    assert math.isclose(u.meaning, 1 + 9 * 6 / 7, rel_tol=1e-12)
    assert math.isclose(u.value, (1.0 + u.meaning / 10 + 1.0) / 3, rel_tol=1e-12)
    # one new <unk> among four tokens
    u = UtilityJudge().score("a b c d", "a b <unk> d")
    assert math.isclose(u.readability, 1 + 9 * 0.75, rel_tol=1e-12) and u.hallucination == 1


def test_privacy_rate_and_combined_score():
    truths = [{"city": "Zurich", "sex": "male"}, {"city": "Paris", "sex": "female"}]
    preds = [{"city": "Zurich", "sex": "female"}, {"city": "Paris"}]
    assert privacy_rate(preds, truths) == 0.5
    # the paper's GPT-4o row: 0.3056 - 0.053 = 0.253
    assert round(combined_score(0.625, 0.434, 0.947), 3) == 0.253
    assert round(combined_score(0.625, 0.263, 0.862), 3) == round(
        (0.625 - 0.263) / 0.625 - 0.138, 3
    )
    assert combined_score(0.625, 0.625, 1.0) == 0.0


def test_bad_input_names_the_argument():
    judge = UtilityJudge()
    with pytest.raises(ValueError, match="original"):
        judge.score("  ", "x")
    with pytest.raises(TypeError, match="anonymized"):
        judge.score("x", None)
    with pytest.raises(ValueError, match="confidences"):
        privacy_key([1.5])
    with pytest.raises(TypeError, match="confidences"):
        privacy_key(["0.5"])
    with pytest.raises(ValueError, match="attribute"):
        privacy_rate([{}], [{"income": "high"}])
    with pytest.raises(ValueError, match="predictions"):
        privacy_rate([{}], [])
    with pytest.raises(ValueError, match="privacy_original"):
        combined_score(0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="utility"):
        combined_score(0.5, 0.2, 1.2)
