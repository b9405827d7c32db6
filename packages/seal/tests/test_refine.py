"""SelfRefiner: the loop on a scripted model, KV-cache and left-padded batch generation on a real one."""

from types import SimpleNamespace

import pytest
import torch
from seal.models import WordTokenizer, tiny_lm
from seal.refine import PERFECT, SelfRefiner
from torch import nn

TEXT = "I live in Zurich. I work as a nurse."
SAFE = "I like soup."
CORPUS = [
    TEXT,
    SAFE,
    "<priv> text: <leaks> none",
    "<util> original: <utility>",
    "<anon> <rewrite> readability=10 meaning=10",
    "occupation=nurse:4",
    "readability=9",
    "city=Zurich:5; occupation=nurse:4 readability=9 meaning=8 hallucination=0",
    "I live in a city. I work in healthcare.",
]


def _answer(prompt: str) -> str:
    text = prompt.split("text:", 1)[1]
    if prompt.startswith("<priv>"):
        found = []
        if "Zurich" in text:
            found.append("city=Zurich:5")
        if "nurse" in text:
            found.append("occupation=nurse:4")
        return "; ".join(found) or "none"
    if prompt.startswith("<util>"):
        return "readability=9 meaning=8 hallucination=0"
    text = text.split("<leaks>")[0].strip()  # <anon>: remove one cue per rewrite
    if "in Zurich" in text:
        return text.replace("in Zurich", "in a city")
    return text.replace("as a nurse", "in healthcare")


class Scripted(nn.Module):
    """A stand-in causal LM whose ``generate`` answers each task by rule, to test the loop itself."""

    def __init__(self, tok):
        super().__init__()
        self.tok = tok
        self.weight = nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(vocab_size=len(tok), max_position_embeddings=4096)
        self.prompts = []

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        rows = []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            prompt = self.tok.decode(ids[mask.bool()])
            self.prompts.append(prompt)
            rows.append(self.tok.encode(_answer(prompt), add_eos=True)[:max_new_tokens])
        out = torch.full((len(rows), max(map(len, rows))), self.tok.pad_id)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r)
        return torch.cat([input_ids, out], 1)


def test_loop_refines_until_its_own_inference_finds_nothing():
    tok = WordTokenizer.from_corpus(CORPUS)
    model = Scripted(tok)
    refiner = SelfRefiner(model, tok, max_new_tokens=64)
    states = refiner.run(TEXT, iterations=5)
    assert [s.text for s in states] == [
        TEXT,
        "I live in a city. I work as a nurse.",
        "I live in a city. I work in healthcare.",
    ]
    assert [sorted(s.leaks) for s in states] == [["city", "occupation"], ["occupation"], []]
    assert states[0].leaks["city"].value == "Zurich"
    assert states[0].leaks["city"].confidence == pytest.approx(0.9)  # bucket 5 -> its midpoint
    assert states[0].utility == PERFECT
    assert states[1].utility.readability == 9 and states[1].utility.meaning == 8
    # the second rewrite is conditioned on the model's own critique of the first one
    anon = [p for p in model.prompts if p.startswith("<anon>")]
    assert len(anon) == 2
    assert "occupation=nurse:4" in anon[1] and "city=" not in anon[1]
    assert "readability=9 meaning=8" in anon[1]
    # iterations caps the loop; a text that leaks nothing stops at s_0; the batch equals the singles
    assert len(refiner.run(TEXT, iterations=1)) == 2
    batch = refiner.run_batch([TEXT, SAFE, TEXT], iterations=5)
    assert [len(s) for s in batch] == [3, 1, 3]
    assert batch[0] == states and batch[2] == states


def _real():
    tok = WordTokenizer.from_corpus(CORPUS)
    return tok, tiny_lm(tok, layers=1, width=32, heads=2, max_positions=128, seed=1).double()


def test_kv_cache_and_left_padded_batches_give_the_same_greedy_text():
    tok, model = _real()
    prompts = ["<priv> text: " + TEXT + " <leaks>", "<util> original: I text: I <utility>", SAFE]
    cached = SelfRefiner(model, tok, max_new_tokens=12)
    batch = cached.generate(prompts)
    singles = [cached.generate([p])[0] for p in prompts]
    uncached = SelfRefiner(model, tok, max_new_tokens=12, use_cache=False).generate(prompts)
    assert batch == singles == uncached
    assert all(isinstance(b, str) for b in batch) and any(batch)
    states = cached.run_batch([TEXT, SAFE], iterations=2)
    assert [s[0].text for s in states] == [TEXT, SAFE]
    assert all(len(s) <= 3 for s in states)


def test_refiner_bad_input_names_the_argument():
    tok, model = _real()
    refiner = SelfRefiner(model, tok, max_new_tokens=4)
    for it in (0, -1):
        with pytest.raises(ValueError, match="iterations"):
            refiner.run(TEXT, iterations=it)
    with pytest.raises(TypeError, match="iterations"):
        refiner.run(TEXT, iterations=1.5)
    with pytest.raises(ValueError, match="text"):
        refiner.run("  ")
    with pytest.raises(ValueError, match="texts"):
        refiner.run_batch([])
    with pytest.raises(ValueError, match="max_new_tokens"):
        SelfRefiner(model, tok, max_new_tokens=0)
    with pytest.raises(TypeError, match="model"):
        SelfRefiner(nn.Linear(2, 2), tok)
    with pytest.raises(ValueError, match="tokenizer"):
        SelfRefiner(tiny_lm(6, layers=1, width=16, heads=2), tok)
    with pytest.raises(ValueError, match="prompts"):
        SelfRefiner(model, tok, max_new_tokens=120).generate([TEXT])


def test_unreadable_critiques_are_counted_and_read_as_nothing_leaks(monkeypatch):
    tok = WordTokenizer.from_corpus([*CORPUS, "none"])  # "none" as a completion starts a text
    refiner = SelfRefiner(Scripted(tok), tok, max_new_tokens=64)
    refiner.run(TEXT, iterations=5)
    assert refiner.critiques == {"priv": 3, "priv_unreadable": 0}  # two leaks, one, then "none"
    # a critique naming a value of another attribute is dropped by the parser: nothing leaks, stop
    monkeypatch.setitem(globals(), "_answer", lambda prompt: "city=nurse:4")
    refiner = SelfRefiner(Scripted(tok), tok, max_new_tokens=64)
    assert [s.text for s in refiner.run(TEXT, iterations=5)] == [TEXT]
    assert refiner.critiques == {"priv": 1, "priv_unreadable": 1}
