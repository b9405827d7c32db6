import itertools
import random
from collections import Counter

import pytest
from seal.adversary import BagOfWordsInferrer, Inference, LexiconInferrer
from seal.baselines import AdversarialAnonymizer, Identity, PIIScrubber, RuleRewriter
from seal.data import SyntheticProfiles, split_profiles
from seal.distill import (
    anon_prompt,
    bucket,
    build_preferences,
    build_sft,
    format_leaks,
    format_utility,
    parse_leaks,
    parse_utility,
)
from seal.scoring import Utility, UtilityJudge
from seal.trajectory import State, Trajectory, collect

PROFILES = SyntheticProfiles(40, seed=3)


def _leaks(text):
    return LexiconInferrer().infer([text])[0]


def test_rewriter_edits_only_the_fed_back_attributes():
    rng = random.Random(0)
    for p in PROFILES:
        before = _leaks(p.text)
        out = RuleRewriter(
            p_generalize=1.0, p_remove=0.0, p_miss=0.0, p_hallucinate=0.0, p_drop=0.0
        )(p.text, {"city": Inference(p.attributes["city"], 0.9)}, rng)
        after = _leaks(out)
        assert "city" not in after  # every city cue generalized
        for a in ("age", "sex", "occupation", "relationship"):
            assert after.get(a) == before.get(a)
        assert UtilityJudge().score(p.text, out).hallucination == 0


def test_teacher_generalizing_everything_leaves_the_oracle_nothing():
    rewrite = RuleRewriter(p_generalize=1.0, p_remove=0.0, p_miss=0.0, p_hallucinate=0.0)
    teacher = AdversarialAnonymizer(rewrite=rewrite, max_steps=1)
    for p in PROFILES:
        out = teacher.anonymize(p.text)
        assert LexiconInferrer().infer([out])[0] == {}


def test_hallucination_replaces_with_another_value_of_the_same_kind():
    rewrite = RuleRewriter(
        p_generalize=0.0, p_remove=0.0, p_miss=0.0, p_hallucinate=1.0, p_drop=0.0
    )
    judge, n = UtilityJudge(), 0
    for p in PROFILES:
        out = rewrite(p.text, {"city": None, "occupation": None, "age": None}, random.Random(p.id))
        after = _leaks(out)
        for a in ("city", "occupation", "age"):
            if a in after:
                assert after[a].value != p.attributes[a]
        if any(c.attribute in ("city", "occupation") and c.hardness == 1 for c in p.cues):
            assert judge.score(p.text, out).hallucination == 1
            n += 1
    assert n > 0


def test_pluggable_rewrite_and_empty_feedback():
    calls = []

    def rewrite(text, feedback, rng):
        calls.append(sorted(feedback))
        return text.upper()

    teacher = AdversarialAnonymizer(rewrite=rewrite)
    assert (
        teacher.anonymize("I live in Zurich.", {"city": Inference("Zurich", 0.9)})
        == "I LIVE IN ZURICH."
    )
    assert calls == [["city"]]
    assert RuleRewriter()("I live in Zurich.", {}, random.Random(0)) == "I live in Zurich."


def test_scrubber_removes_explicit_spans_only():
    scrub = PIIScrubber()
    out = scrub.anonymize("about work: I'm 34. I live in Zurich. my night shifts on the ward.")
    assert out == "about work: I'm [NUMBER]. I live in [LOCATION]. my night shifts on the ward."
    for p in PROFILES:
        s = scrub.anonymize(p.text)
        assert not any(ch.isdigit() for ch in s)
        for c in p.cues:
            if c.hardness > 1 and c.attribute in ("age", "relationship", "occupation"):
                assert c.specific in s  # indirect cues survive
    assert Identity().anonymize(PROFILES[0].text) == PROFILES[0].text


def _check_trajectory(traj, profile, max_steps):
    s = traj.states
    assert 1 <= len(s) <= max_steps + 1 and s[0].text == profile.text
    assert s[0].utility.value == 1.0
    for st in s:
        for a, inf in st.leaks.items():
            assert inf.value == profile.attributes[a] and st.guesses[a] == inf
    for st in s[:-1]:
        assert st.leaks  # the loop only continues while something leaks


def test_collect_is_deterministic_per_seed_and_well_formed():
    inferrer, judge = LexiconInferrer(), UtilityJudge()
    a = collect(PROFILES, AdversarialAnonymizer(), inferrer, judge, max_steps=3, seed=1)
    b = collect(PROFILES, AdversarialAnonymizer(), inferrer, judge, max_steps=3, seed=1)
    c = collect(PROFILES, AdversarialAnonymizer(), inferrer, judge, max_steps=3, seed=2)
    assert a == b and a != c
    for traj, p in zip(a, PROFILES, strict=True):
        assert traj.profile_id == p.id
        _check_trajectory(traj, p, 3)
    # against the oracle the teacher lowers the leaks on average
    first = sum(len(t.states[0].leaks) for t in a)
    last = sum(len(t.states[-1].leaks) for t in a)
    assert last < first / 2


def test_collect_with_the_bag_of_words_attacker_makes_pairs():
    ps = SyntheticProfiles(50, seed=0)
    train, _, _ = split_profiles(ps, (40, 0, 0))
    bow = BagOfWordsInferrer().fit([p.text for p in train], [p.attributes for p in train])
    trajs = collect(train, AdversarialAnonymizer(), bow, UtilityJudge(), max_steps=3, seed=0)
    for traj, p in zip(trajs, train, strict=True):
        _check_trajectory(traj, p, 3)
    sft = build_sft(trajs)
    assert {e.task for e in sft} == {"anon", "priv", "util"}
    assert build_preferences(trajs)


# ---- pair rules, brute force on random trajectories -------------------------------------------


def _random_trajectory(rng, pid):
    states = []
    for i in range(rng.randint(1, 5)):
        attrs = rng.sample(["age", "sex", "city"], rng.randint(0, 2 if i else 3))
        leaks = {a: Inference("x", rng.choice([0.3, 0.6, 0.9])) for a in attrs}
        u = (
            Utility(10.0, 10.0, 0, 1.0)
            if i == 0
            else rng.choice(
                [Utility(9.0, 8.0, 0, 0.9), Utility(9.0, 9.0, 0, 0.95), Utility(9.0, 8.0, 1, 0.6)]
            )
        )
        states.append(State(rng.choice(["t0", "t1", "t2", "t3"]) if i else "t0", leaks, u))
    return Trajectory(pid, tuple(states))


def _key(s):
    confs = [inf.confidence for inf in s.leaks.values()]
    return (-len(confs), -(sum(confs) / len(confs)) if confs else 0.0)


def test_pair_rules_brute_force():
    rng = random.Random(0)
    trajs = [_random_trajectory(rng, k) for k in range(300)]
    want_anon, want_pref = Counter(), Counter()
    for t in trajs:
        s = t.states
        for i, j in itertools.product(range(len(s)), repeat=2):
            if (
                j > i
                and _key(s[j]) > _key(s[i])
                and s[j].utility.value >= s[i].utility.value
                and s[j].text != s[i].text
            ):
                want_anon[(anon_prompt(s[i].text, s[i].leaks, s[i].utility), s[j].text)] += 1
        for i, w, lo in itertools.product(range(len(s)), repeat=3):
            if (
                w > i
                and lo > i
                and _key(s[w]) > _key(s[lo])
                and s[w].utility.value >= s[lo].utility.value
                and s[w].text != s[lo].text
            ):
                want_pref[
                    (anon_prompt(s[i].text, s[i].leaks, s[i].utility), s[w].text, s[lo].text)
                ] += 1
    sft = build_sft(trajs)
    got_anon = Counter((e.prompt, e.completion) for e in sft if e.task == "anon")
    got_pref = Counter((p.prompt, p.chosen, p.rejected) for p in build_preferences(trajs))
    assert sum(want_anon.values()) > 50 and sum(want_pref.values()) > 50
    assert got_anon == want_anon and got_pref == want_pref
    n_states = sum(len(t.states) for t in trajs)
    assert sum(e.task == "priv" for e in sft) == n_states == sum(e.task == "util" for e in sft)
    # a trajectory stopped at t = 0 adds only priv/util rows
    one = Trajectory(0, (State("t0", {}, Utility(10.0, 10.0, 0, 1.0)),))
    assert [e.task for e in build_sft([one])] == ["priv", "util"] and build_preferences([one]) == []


def test_prompts_carry_the_guesses_and_parsers_round_trip():
    leaks = {"city": Inference("Paris", 0.93), "age": Inference("25-34", 0.1)}
    assert format_leaks(leaks) == "age=25-34:1; city=Paris:5" and format_leaks({}) == "none"
    assert parse_leaks(format_leaks(leaks)) == {"age": ("25-34", 1), "city": ("Paris", 5)}
    assert parse_leaks("city=Atlantis:3; garbage; age=25-34:9; sex=male:2") == {"sex": ("male", 2)}
    u = UtilityJudge().score("a b c d", "a b c")
    back = parse_utility(format_utility(u))
    assert back.readability == 10 and back.hallucination == 0
    assert parse_utility("readability=99 meaning=3 hallucination=0") is None
    assert parse_utility("nonsense") is None
    assert [bucket(c) for c in (0.0, 0.19, 0.2, 0.5, 0.99, 1.0)] == [1, 1, 2, 3, 5, 5]
    p = PROFILES[0]
    trajs = collect([p], AdversarialAnonymizer(), LexiconInferrer(), UtilityJudge(), seed=0)
    for e in build_sft(trajs, tasks=("anon",)):
        section = e.prompt.split("<leaks>")[1].split("<utility>")[0].strip()
        state = next(
            s for s in trajs[0].states if e.prompt.startswith(f"<anon> text: {s.text} <leaks>")
        )
        assert section == format_leaks(state.leaks)


# ---- bad input -----------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    teacher = AdversarialAnonymizer()
    for anonymizer in (Identity(), PIIScrubber(), teacher):
        with pytest.raises(ValueError, match="text"):
            anonymizer.anonymize("   ")
        with pytest.raises(TypeError, match="text"):
            anonymizer.anonymize(None)
        with pytest.raises(ValueError, match="feedback: attribute: unknown attribute 'salary'"):
            anonymizer.anonymize("I live in Zurich.", {"salary": Inference("high", 0.9)})
    with pytest.raises(TypeError, match="feedback"):
        teacher.anonymize("I live in Zurich.", "city")
    with pytest.raises(ValueError, match="max_steps"):
        AdversarialAnonymizer(max_steps=0)
    with pytest.raises(TypeError, match="rewrite"):
        AdversarialAnonymizer(rewrite="generalize")
    with pytest.raises(TypeError, match="rewrite"):
        AdversarialAnonymizer(rewrite=lambda t, f, r: None).anonymize("I live in Zurich.", ["city"])
    with pytest.raises(ValueError, match="p_generalize"):
        RuleRewriter(p_generalize=0.9)
    with pytest.raises(ValueError, match="p_drop"):
        RuleRewriter(p_drop=1.5)
    judge, lex = UtilityJudge(), LexiconInferrer()
    with pytest.raises(ValueError, match="profiles"):
        collect([], teacher, lex, judge)
    with pytest.raises(TypeError, match="profiles"):
        collect(PROFILES[0], teacher, lex, judge)
    with pytest.raises(ValueError, match="max_steps"):
        collect(PROFILES, teacher, lex, judge, max_steps=0)
    with pytest.raises(TypeError, match="anonymizer"):
        collect(PROFILES, object(), lex, judge)
    with pytest.raises(TypeError, match="inferrer"):
        collect(PROFILES, teacher, object(), judge)
    with pytest.raises(ValueError, match="tasks: unknown task 'summarize'"):
        build_sft([], tasks=("anon", "summarize"))
    with pytest.raises(TypeError, match="trajectories"):
        build_preferences([PROFILES[0]])
    with pytest.raises(ValueError, match="confidence"):
        bucket(1.5)
