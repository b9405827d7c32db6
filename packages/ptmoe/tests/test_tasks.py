"""The synthetic MRQA analogue and SQuAD scoring."""

from __future__ import annotations

import pytest
from ptmoe.tasks import (
    IN_DOMAIN,
    OUT_OF_DOMAIN,
    exact_match,
    f1_score,
    normalize_answer,
    qa_examples,
)


def test_six_plus_six_generators_with_span_answers():
    assert len(IN_DOMAIN) == 6 and len(OUT_OF_DOMAIN) == 6
    assert not set(IN_DOMAIN) & set(OUT_OF_DOMAIN)
    for domain in [*IN_DOMAIN, *OUT_OF_DOMAIN]:
        for ex in qa_examples([domain], 40, seed=1):
            context = ex.source.split("\nQuestion:")[0]
            assert ex.domain == domain
            assert f" {ex.answer}" in context, (domain, ex)
            assert ex.source.endswith("\nAnswer:")
            if domain != "list":  # the list task is one sentence; the others 2 to 18 facts
                assert 2 <= context.count(".") <= 18, ex


def test_examples_are_seeded_and_cycle_over_domains():
    a = qa_examples(["city", "two_hop", "compare"], 9, seed=7)
    assert a == qa_examples(["city", "two_hop", "compare"], 9, seed=7)
    assert a != qa_examples(["city", "two_hop", "compare"], 9, seed=8)
    assert [e.domain for e in a] == ["city", "two_hop", "compare"] * 3


def test_lookup_answers_are_determined_by_the_context():
    # The asked key appears once, so the answer is unique.
    for ex in qa_examples(list(IN_DOMAIN), 60, seed=2):
        if ex.domain == "birth":
            name = ex.source.split("was ")[-1].split(" born")[0]
            assert ex.source.count(f"{name} was born") == 1


def test_squad_scoring():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple a day") == "apple day"
    assert exact_match("the Paris.", "Paris") == 1.0
    assert exact_match("Paris France", "Paris") == 0.0
    assert f1_score("Paris France", "Paris") == pytest.approx(2 / 3)
    assert f1_score("in Paris", "Paris France") == pytest.approx(0.5)
    assert f1_score("Lima", "Paris") == 0.0
    assert f1_score("", "") == 1.0 and f1_score("the", "Paris") == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="domains: unknown or empty"):
        qa_examples(["squad"], 3)
    with pytest.raises(ValueError, match="domains: unknown or empty"):
        qa_examples([], 3)
    with pytest.raises(ValueError, match="count: expected a non-negative int"):
        qa_examples(["city"], -1)


def test_math_problems_are_correct_and_scored_by_the_final_integer():
    from ptmoe.tasks import (
        MATH_IN_DOMAIN,
        MATH_OUT_OF_DOMAIN,
        final_integer,
        math_accuracy,
        math_examples,
    )

    assert len(MATH_IN_DOMAIN) == 1 and len(MATH_OUT_OF_DOMAIN) == 6
    ops = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    for domain in [*MATH_IN_DOMAIN, *MATH_OUT_OF_DOMAIN]:
        for ex in math_examples([domain], 50, seed=3):
            work = ex.answer.split("####")[0].split(".")[:-1]
            value = None
            for step in work:  # every worked step is exact integer arithmetic
                expr, result = step.split("=")
                a, op, b = expr.split()
                got = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}.get(op)
                if op == "/":
                    assert int(a) % int(b) == 0 and int(b) > 1
                    got = int(a) // int(b)
                assert got == int(result) and (value is None or int(a) == value)
                value = got
            assert final_integer(ex.answer) == value >= 0
            expected = {"two_step": 2, "reworded": 2, "three_step": 3}.get(domain, 1)
            assert len(work) == expected
            if domain in ops:
                assert ops[domain] in work[0]
    assert final_integer("so 3 + 4 = 7 #### 7") == 7
    assert final_integer("#### 1,234 apples") == 1234
    assert final_integer("no number") is None
    assert math_accuracy("blah #### 15", " 3 * 5 = 15. #### 15") == 1.0
    assert math_accuracy("15 #### 16", " 3 * 5 = 15. #### 15") == 0.0
    with pytest.raises(ValueError, match="answer: no integer"):
        math_accuracy("1", "none")
    with pytest.raises(ValueError, match="domains: unknown or empty"):
        math_examples(["gsm8k"], 2)


def test_typed_guess_is_the_chance_of_copying_a_value_of_the_right_type():
    from ptmoe.tasks import QAExample, typed_guess, typed_guess_scores

    src = "Context: Alice lives in Paris. Bruno lives in Lima. Carla lives in Paris.\nQuestion: Where does Bruno live?\nAnswer:"
    assert typed_guess(QAExample(src, "Lima", "city")) == (0.5, 0.5)  # distinct cities: Paris, Lima
    # Names in the question do not count; integers are their own type.
    src = "Context: Alice has 3 apples. Bruno has 12 apples.\nQuestion: Who has more apples than Omar?\nAnswer:"
    assert typed_guess(QAExample(src, "Bruno", "compare")) == (0.5, 0.5)
    src = "Context: width = 12. depth = 40. limit = 77.\nQuestion: What is the value of depth?\nAnswer:"
    assert typed_guess(QAExample(src, "40", "identifier"))[1] == pytest.approx(1 / 3)
    # Every generator's answers have a type; per-domain means lie strictly between 0 and 1
    # (compare: one of two names), and a single-fact context would be 1.
    examples = qa_examples(list(IN_DOMAIN) + list(OUT_OF_DOMAIN), 240, seed=5)
    scores = typed_guess_scores(examples)
    assert set(scores) == set(IN_DOMAIN) | set(OUT_OF_DOMAIN) | {"all"}
    assert all(0 < s["em"] <= s["f1"] < 1 for s in scores.values())
    assert scores["compare"]["em"] == 0.5
    with pytest.raises(ValueError, match="example"):
        typed_guess(QAExample("Context: x.\nQuestion: y?\nAnswer:", "zebra crossing", "city"))
    with pytest.raises(TypeError, match="example"):
        typed_guess("Lima")
