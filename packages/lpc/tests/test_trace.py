"""The synthetic trace generator's properties and the local ShareGPT reader."""

import itertools
import json

import numpy as np
import pytest
from lpc.trace import check_trace, load_sharegpt_json, make_synthetic_trace, type_hazards


@pytest.fixture(scope="module")
def trace():
    return make_synthetic_trace(300, seed=0, max_active=40, system_prompts=4)


def test_sorted_and_contexts_grow_by_prefix(trace):
    check_trace(trace)
    by_conv = {}
    for r in trace:
        by_conv.setdefault(r.conv_id, []).append(r)
    for reqs in by_conv.values():
        assert [r.turn for r in reqs] == list(range(len(reqs)))
        assert [r.has_next for r in reqs] == [True] * (len(reqs) - 1) + [False]
        for a, b in itertools.pairwise(reqs):
            seq = a.sequence
            assert np.array_equal(b.tokens[: len(seq)], seq)
            assert 30 <= len(b.tokens) - len(seq) <= 120 + 5  # message (+ a cue phrase)
            assert 150 <= len(a.response) <= 300
            assert b.time == a.next_time > a.time
        assert reqs[-1].next_time == np.inf


def test_types_differ_in_hazard_and_in_turn_counts(trace):
    h = type_hazards(6)
    assert 3 <= h.max() / h.min() <= 5
    requests, convs = {}, {}
    for r in trace:
        requests[r.ctype] = requests.get(r.ctype, 0) + 1
        convs.setdefault(r.ctype, set()).add(r.conv_id)
    mean_turns = {c: requests[c] / len(convs[c]) for c in requests}
    assert mean_turns[0] > mean_turns[5]  # type 0 has the lowest stop hazard


def test_concurrency_cap_and_shared_system_prompts(trace):
    spans = {}
    for r in trace:
        lo, hi = spans.get(r.conv_id, (r.time, r.time))
        spans[r.conv_id] = (min(lo, r.time), max(hi, r.time))
    events = sorted(
        [(lo, 1) for lo, _ in spans.values()] + [(hi, -1) for _, hi in spans.values()],
        key=lambda e: (e[0], e[1]),
    )
    active = peak = 0
    for _, d in events:
        active += d
        peak = max(peak, active)
    assert peak <= 40
    firsts = {tuple(r.tokens[:16].tolist()) for r in trace if r.turn == 0}
    assert len(firsts) < len({r.conv_id for r in trace})  # system prompts are shared


def test_seeds_and_offsets_give_disjoint_conversations():
    a = make_synthetic_trace(20, seed=1)
    b = make_synthetic_trace(20, seed=2, conv_id_offset=1000)
    assert not {r.conv_id for r in a} & {r.conv_id for r in b}
    again = make_synthetic_trace(20, seed=1)
    assert all(
        np.array_equal(x.tokens, y.tokens) and x.time == y.time
        for x, y in zip(a, again, strict=True)
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_conversations": 0}, ValueError, "n_conversations"),
        ({"n_conversations": 2.0}, TypeError, "n_conversations"),
        ({"n_conversations": 2, "tau": 0.0}, ValueError, "tau"),
        ({"n_conversations": 2, "max_active": 0}, ValueError, "max_active"),
        ({"n_conversations": 2, "pool_noise": 1.5}, ValueError, "pool_noise"),
    ],
)
def test_generator_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_synthetic_trace(seed=0, **kwargs)


def test_decreasing_time_is_refused():
    t = make_synthetic_trace(5, seed=0)
    with pytest.raises(ValueError, match="time"):
        check_trace(list(reversed(t)))


def test_sharegpt_reader_local_file(tmp_path):
    data = [
        {
            "id": "x",
            "conversations": [
                {"from": "human", "value": "hi there"},
                {"from": "gpt", "value": "hello you"},
                {"from": "human", "value": "and then"},
                {"from": "gpt", "value": "ok"},
            ],
        }
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    trace = load_sharegpt_json(path)
    assert [r.turn for r in trace] == [0, 1] and [r.has_next for r in trace] == [True, False]
    assert np.array_equal(trace[1].tokens[: len(trace[0].sequence)], trace[0].sequence)
    with pytest.raises(FileNotFoundError, match="path"):
        load_sharegpt_json(tmp_path / "missing.json")
