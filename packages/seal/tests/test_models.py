import json

import pytest
import torch
from seal import SyntheticProfiles, UtilityJudge
from seal.adversary import Inference
from seal.distill import anon_prompt, format_leaks, format_utility, priv_prompt, util_prompt
from seal.models import SPECIAL_TOKENS, WordTokenizer, tiny_lm


def _corpus():
    profiles = SyntheticProfiles(30, seed=0)
    u = UtilityJudge().score(profiles[0].text, profiles[0].text)
    leaks = {"city": Inference("Zurich", 0.93), "age": Inference("25-34", 0.41)}
    texts = [p.text for p in profiles]
    return [*texts, anon_prompt(texts[0], leaks, u), priv_prompt(texts[1]), util_prompt(*texts[:2])]


def test_round_trip_on_generator_texts_prompts_and_completions():
    corpus = _corpus()
    tok = WordTokenizer.from_corpus(corpus)
    leaks = {"city": Inference("Zurich", 0.93), "sex": Inference("female", 0.5)}
    extra = [format_leaks(leaks), format_utility(UtilityJudge().score("a b", "a c"))]
    tok = WordTokenizer.from_corpus(corpus + extra)
    for text in corpus + extra:
        ids = tok.encode(text)
        assert tok.unk_id not in ids and 4 not in ids
        assert tok.decode(ids) == text
    assert tok.decode(tok.encode(corpus[0], add_bos=True, add_eos=True)) == corpus[0]
    assert tok.encode("x", add_bos=True, add_eos=True)[::2] == [tok.bos_id, tok.eos_id]
    assert tuple(tok.vocab[:5]) == SPECIAL_TOKENS
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)


def test_unknown_words_become_unk_and_the_judge_sees_them():
    tok = WordTokenizer.from_corpus(["I live in Zurich.", "I work as a nurse."])
    out = tok.decode(tok.encode("I live in Atlantis, honestly."))
    # the unseen comma has no leading space, so its <unk> sticks to the previous one
    assert out == "I live in <unk><unk> <unk>."
    assert tok.decode(tok.encode("Atlantis")) == "<unk>"
    # new <unk> costs readability and counts as a hallucination (spec §7)
    u = UtilityJudge().score("I live in Zurich.", out)
    assert u.hallucination == 1 and u.readability < 10


def test_save_load_and_refusals(tmp_path):
    tok = WordTokenizer.from_corpus(_corpus(), min_count=2)
    path = tmp_path / "tok.json"
    tok.save(path)
    assert WordTokenizer.load(path) == tok
    assert len(WordTokenizer.from_corpus(_corpus())) > len(tok)  # min_count drops rare pieces
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="path"):
        WordTokenizer.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="path"):
        WordTokenizer.load(bad)
    bad.write_text(json.dumps({"format": "seal.WordTokenizer", "version": 1, "vocab": ["a", "b"]}))
    with pytest.raises(ValueError, match="vocab"):
        WordTokenizer.load(bad)


def test_tokenizer_bad_input_names_the_argument():
    tok = WordTokenizer.from_corpus(["a b c"])
    with pytest.raises(ValueError, match="texts"):
        WordTokenizer.from_corpus([])
    with pytest.raises(TypeError, match="texts"):
        WordTokenizer.from_corpus("a b c")
    with pytest.raises(TypeError, match="texts"):
        WordTokenizer.from_corpus(["a", 3])
    with pytest.raises(ValueError, match="min_count"):
        WordTokenizer.from_corpus(["a"], min_count=0)
    with pytest.raises(TypeError, match="text"):
        tok.encode(None)
    with pytest.raises(ValueError, match="ids"):
        tok.decode([len(tok)])
    with pytest.raises(TypeError, match="ids"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match="vocab"):
        WordTokenizer([*list(SPECIAL_TOKENS), "a", "a"])


def test_tiny_lm_is_the_spec_size_and_carries_the_special_ids():
    tok = WordTokenizer(list(SPECIAL_TOKENS) + [f" w{i}" for i in range(1495)])
    model = tiny_lm(tok)
    n = sum(p.numel() for p in model.parameters())
    assert 1.0e6 < n < 1.4e6, n  # spec §5: ~1.2M parameters with a ~1.5k vocabulary
    cfg = model.config
    assert (cfg.vocab_size, cfg.num_hidden_layers, cfg.hidden_size) == (1500, 4, 128)
    assert (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (0, 1, 2)
    assert cfg.attention_dropout == 0.0
    a, b = (
        tiny_lm(40, layers=1, width=16, heads=2, seed=3),
        tiny_lm(40, layers=1, width=16, heads=2, seed=3),
    )
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(ValueError, match="width"):
        tiny_lm(40, width=30, heads=4)
    with pytest.raises(ValueError, match="vocab"):
        tiny_lm(3)
    with pytest.raises(TypeError, match="vocab"):
        tiny_lm("40")
    with pytest.raises(ValueError, match="layers"):
        tiny_lm(40, layers=0)
