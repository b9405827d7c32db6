import pytest
from seal.data import ATTRIBUTES, SCHEMA, SyntheticProfiles, split_profiles


def test_deterministic_per_seed():
    a = SyntheticProfiles(30, seed=3)
    b = SyntheticProfiles(30, seed=3)
    c = SyntheticProfiles(30, seed=4)
    assert [p.text for p in a] == [p.text for p in b]
    assert [p.attributes for p in a] == [p.attributes for p in b]
    assert [p.text for p in a] != [p.text for p in c]


def test_every_cue_maps_to_its_attribute_and_appears_in_the_text():
    profiles = SyntheticProfiles(60, seed=0)
    for p in profiles:
        assert set(p.attributes) == set(ATTRIBUTES)
        assert sorted(c.attribute for c in p.cues) == sorted(ATTRIBUTES)
        assert 2 <= len(p.comments) <= 3
        assert p.text == "\n".join(p.comments)
        for cue in p.cues:
            assert cue.value == p.attributes[cue.attribute]
            assert cue.value in SCHEMA.values[cue.attribute]
            assert cue.specific in p.text
            assert 1 <= cue.hardness <= 3
            specific, general, removed = cue.rungs
            assert specific != general and removed == ""
            # the general rung names no value of the attribute
            for value in SCHEMA.values[cue.attribute]:
                if cue.attribute in ("city", "occupation"):
                    assert value.lower() not in general.lower()


def test_hardness_one_is_explicit():
    for p in SyntheticProfiles(20, hardness=(1, 1), seed=1):
        assert all(c.hardness == 1 for c in p.cues)
        assert f"I live in {p.attributes['city']}" in p.text
        assert f"I work as a {p.attributes['occupation']}" in p.text


def test_split_is_by_profile_and_disjoint():
    profiles = SyntheticProfiles(40, seed=0)
    tr, at, te = split_profiles(profiles, (25, 5, 10), seed=0)
    ids = [p.id for p in tr + at + te]
    assert len(ids) == len(set(ids)) == 40
    assert split_profiles(profiles, (25, 5, 10), seed=0)[2] == te


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"n": 0}, ValueError, "n"),
        ({"n": 2.0}, TypeError, "n"),
        ({"n": 3, "comments_per_profile": (3, 2)}, ValueError, "comments_per_profile"),
        ({"n": 3, "comments_per_profile": 2}, TypeError, "comments_per_profile"),
        ({"n": 3, "hardness": (1, 4)}, ValueError, "hardness"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        SyntheticProfiles(**kwargs)


def test_bad_split_and_unknown_attribute():
    with pytest.raises(ValueError, match="sizes"):
        split_profiles(SyntheticProfiles(5), (3, 3, 3))
    with pytest.raises(ValueError, match="attribute"):
        SCHEMA.check("income")


def test_unseen_split_holds_out_whole_attribute_pairs():
    """The issue's test split: (city, occupation) pairs of test never occur in train; the overflow
    of the last held-out pair goes to the attacker split; sizes are exact and deterministic."""
    profiles = SyntheticProfiles(400, seed=3)
    tr, at, te = split_profiles(profiles, (250, 50, 100), seed=3, unseen=("city", "occupation"))
    assert (len(tr), len(at), len(te)) == (250, 50, 100)
    ids = [p.id for p in tr + at + te]
    assert len(ids) == len(set(ids))

    def pair(p):
        return p.attributes["city"], p.attributes["occupation"]

    held = {pair(p) for p in te}
    assert not held & {pair(p) for p in tr}
    # every held-out pair is in test completely, except the last one's overflow in the attacker split
    outside = [p for p in profiles if pair(p) in held and p not in te]
    assert all(p in at for p in outside) and len({pair(p) for p in outside}) <= 1
    again = split_profiles(profiles, (250, 50, 100), seed=3, unseen=("city", "occupation"))
    assert [p.id for p in again[2]] == [p.id for p in te]
    plain = split_profiles(profiles, (250, 50, 100), seed=3)
    assert {pair(p) for p in plain[2]} & {pair(p) for p in plain[0]}  # the plain split mixes them
    for bad in (("city",), ("city", "city"), ("city", "income")):
        with pytest.raises(ValueError, match="unseen"):
            split_profiles(profiles, (10, 5, 5), unseen=bad)
    with pytest.raises(ValueError, match="attacker split"):
        split_profiles(profiles, (300, 0, 100), seed=3, unseen=("sex", "relationship"))
