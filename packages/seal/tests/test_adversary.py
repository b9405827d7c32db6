import pytest
from seal.adversary import BagOfWordsInferrer, Inference, LexiconInferrer, leaked
from seal.data import ATTRIBUTES, SyntheticProfiles, split_profiles
from seal.scoring import privacy_rate


def _accuracy(inferrer, profiles):
    rows = inferrer.infer([p.text for p in profiles])
    preds = [{a: inf.value for a, inf in row.items()} for row in rows]
    return privacy_rate(preds, [p.attributes for p in profiles])


def test_lexicon_oracle_reads_every_original_cue():
    profiles = SyntheticProfiles(50, seed=2)
    assert _accuracy(LexiconInferrer(), profiles) == 1.0


def test_lexicon_misses_generalized_text():
    p = SyntheticProfiles(5, seed=1)[0]
    text = p.text
    for cue in p.cues:
        text = text.replace(cue.specific, cue.general)
    (row,) = LexiconInferrer().infer([text])
    assert leaked(row, p.attributes) == {}


def test_bag_of_words_attacker_reads_original_texts():
    profiles = SyntheticProfiles(400, seed=0)
    train, _, test = split_profiles(profiles, (250, 50, 100), seed=0)
    bow = BagOfWordsInferrer().fit([p.text for p in train], [p.attributes for p in train])
    acc = _accuracy(bow, test)
    assert acc >= 0.8, acc
    rows = bow.infer([test[0].text])
    assert set(rows[0]) == set(ATTRIBUTES)
    assert all(0.0 <= inf.confidence <= 1.0 for inf in rows[0].values())
    again = BagOfWordsInferrer().fit([p.text for p in train], [p.attributes for p in train])
    assert again.infer([test[0].text]) == rows


def test_leaked_keeps_correct_guesses_only():
    inf = {"city": Inference("Zurich", 0.9), "sex": Inference("male", 0.6)}
    assert leaked(inf, {"city": "Zurich", "sex": "female"}) == {"city": 0.9}


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="attribute"):
        BagOfWordsInferrer(attributes=("income",))
    with pytest.raises(ValueError, match="texts"):
        LexiconInferrer().infer(["ok", "  "])
    with pytest.raises(TypeError, match="texts"):
        LexiconInferrer().infer("a single string")
    with pytest.raises(ValueError, match="attributes"):
        BagOfWordsInferrer().fit(["a b"], [])
    with pytest.raises(ValueError, match="attribute"):
        leaked({"income": Inference("x", 0.5)}, {})
    with pytest.raises(RuntimeError, match="fit"):
        BagOfWordsInferrer().infer(["text"])
