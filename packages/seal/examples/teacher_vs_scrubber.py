"""Privacy / utility of Identity, PIIScrubber and the rule teacher on held-out profiles (CPU, seconds).

Not the benchmark suite (issue 38 item 6 is not built): a one-off check of the no-training arms.
Evaluation attacker = LexiconInferrer + a bag-of-words model fitted on the attacker split (the more
confident guess per attribute wins); the teacher's own attacker is a bag-of-words model fitted on
the train split, as in the trajectories.

    uv run python packages/seal/examples/teacher_vs_scrubber.py --n 400 --seed 0
"""

from __future__ import annotations

import argparse

from seal import (
    AdversarialAnonymizer,
    BagOfWordsInferrer,
    Identity,
    LexiconInferrer,
    PIIScrubber,
    SyntheticProfiles,
    UtilityJudge,
    combined_score,
    privacy_rate,
    split_profiles,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = (args.n * 5 // 8, args.n // 8, args.n // 4)  # 250 / 50 / 100 at n = 400
    train, attack, test = split_profiles(
        SyntheticProfiles(args.n, seed=args.seed), sizes, args.seed
    )
    fit = lambda ps: BagOfWordsInferrer(seed=args.seed).fit(  # noqa: E731
        [p.text for p in ps], [p.attributes for p in ps]
    )
    lexicon, eval_bow, teacher_bow = LexiconInferrer(), fit(attack), fit(train)
    judge = UtilityJudge()
    arms = {
        "original (Identity)": Identity(),
        "PIIScrubber": PIIScrubber(),
        "teacher (RuleRewriter vs BoW, 3 steps)": AdversarialAnonymizer(
            inferrer=teacher_bow, max_steps=3, seed=args.seed
        ),
    }
    from seal.peers import PresidioScrubber, presidio_available

    if presidio_available():
        arms["Presidio (blank spaCy, no NER)"] = PresidioScrubber()
    else:
        print(
            "Presidio: SKIPPED -- presidio-analyzer / presidio-anonymizer / spacy are not installed "
            "(seal 'peers' extra: uv sync --all-packages --extra peers)"
        )
    truths = [p.attributes for p in test]
    p_orig = None
    print(f"{'arm':40s} privacy  utility  combined")
    for name, arm in arms.items():
        texts = [arm.anonymize(p.text) for p in test]
        live = [t if t.strip() else "." for t in texts]
        preds = []
        for a, b in zip(lexicon.infer(live), eval_bow.infer(live), strict=True):
            best = dict(b)
            for k, v in a.items():
                if k not in best or v.confidence >= best[k].confidence:
                    best[k] = v
            preds.append({k: v.value for k, v in best.items()})
        privacy = privacy_rate(preds, truths)
        utility = sum(judge.score(p.text, t).value for p, t in zip(test, texts, strict=True))
        utility /= len(test)
        p_orig = privacy if p_orig is None else p_orig
        print(
            f"{name:40s} {privacy:.3f}    {utility:.3f}    {combined_score(p_orig, privacy, utility):+.3f}"
        )


if __name__ == "__main__":
    main()
