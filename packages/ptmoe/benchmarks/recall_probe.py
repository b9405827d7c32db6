"""Can a tiny Llama learn in-context key → value recall on a CPU? A diagnostic for the QA base.

The reduced reproduction needs a base that answers a question from its context. None of the
bases tried (byte- and word-level, hidden 64 and 128, 1,200–5,000 pretraining steps) did, so this
probe strips the task to multi-query associative recall (MQAR, Zoology's synthetic) with one
token per key and per value and trains a ``neurips25_core.models.tiny_llama_config`` model from
scratch (``--arch lfm2``: transformers' LFM2 instead, a gated short convolution before each
attention layer), in three row formats::

    adjacent   k1 v1 k2 v2 … | k v  k v  …        the value follows the queried key directly
    separated  k1 v1 k2 v2 … | Q k A v  Q k A v …  one marker token between key and answer
    mixed      half the rows adjacent, half separated (scored on separated rows)

Only the query answers carry loss. Accuracy is teacher-forced argmax on 256 held-out rows of the
scored format; copying a random context value scores about ``mean(1/n)`` over the pair counts
(plus a little from repeated queries). A task question (``Question: Where does Bruno live?
Answer:``) is the separated case with a longer gap, so a base that cannot learn ``separated``
cannot answer the QA analogue either.

Usage (one thread; a run is 1–3 CPU minutes)::

    uv run python packages/ptmoe/benchmarks/recall_probe.py --format adjacent --out probe.json
    uv run python packages/ptmoe/benchmarks/recall_probe.py --format separated --steps 8000
    # the committed grid (GRID below), split over two processes, then one table and plot:
    uv run python packages/ptmoe/benchmarks/recall_probe.py --grid --part 0/2 --out-dir DIR
    uv run python packages/ptmoe/benchmarks/recall_probe.py --grid --part 1/2 --out-dir DIR
    uv run python packages/ptmoe/benchmarks/recall_probe.py --report DIR
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time

import torch

FORMATS = ("adjacent", "separated", "mixed")
ARCHS = ("llama", "lfm2")
PAD, QUERY, ANSWER, FIRST_KEY = 0, 1, 2, 3


def make_row(
    rng: random.Random, fmt: str, keys: int, values: int, pairs: tuple[int, int], queries: int
):
    """One row as ``(token ids, labels)``; labels are -100 except on query answers."""
    if fmt == "mixed":
        fmt = "adjacent" if rng.random() < 0.5 else "separated"
    n = rng.randint(*pairs)
    ks = rng.sample(range(keys), n)
    vs = [rng.randrange(values) for _ in ks]
    first_value = FIRST_KEY + keys
    ids = [t for k, v in zip(ks, vs) for t in (FIRST_KEY + k, first_value + v)]
    labels = [-100] * len(ids)
    for _ in range(queries):
        i = rng.randrange(n)
        key, value = FIRST_KEY + ks[i], first_value + vs[i]
        if fmt == "adjacent":
            ids += [key, value]
            labels += [-100, value]
        else:
            ids += [QUERY, key, ANSWER, value]
            labels += [-100, -100, -100, value]
    return ids, labels


def make_batch(rng, fmt, size, **task):
    rows = [make_row(rng, fmt, **task) for _ in range(size)]
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((size, width), PAD, dtype=torch.long)
    labels = torch.full((size, width), -100, dtype=torch.long)
    for i, (row, lab) in enumerate(rows):  # right padding: causal attention never sees it
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(lab)] = torch.tensor(lab)
    return ids, labels


@torch.no_grad()
def accuracy(model, ids, labels) -> float:
    model.eval()
    logits = model(input_ids=ids).logits[:, :-1]
    target = labels[:, 1:]
    mask = target != -100
    model.train()
    return (logits.argmax(-1)[mask] == target[mask]).float().mean().item()


def chance(pairs: tuple[int, int]) -> float:
    """Accuracy of answering with a uniformly random context value (ignoring repeated queries)."""
    lo, hi = pairs
    return sum(1 / n for n in range(lo, hi + 1)) / (hi - lo + 1)


def run(
    fmt: str = "adjacent",
    arch: str = "llama",
    keys: int = 20,
    values: int = 40,
    pairs: tuple[int, int] = (2, 8),
    queries: int = 4,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    steps: int = 3000,
    lr: float = 3e-3,
    batch_size: int = 64,
    seed: int = 0,
    warmup: int = 150,
    every: int = 250,
    log=print,
) -> dict:
    """Train a fresh tiny model (``arch``: Llama, or LFM2 with short convolutions) on MQAR rows of
    ``fmt``; return the accuracy curve and settings."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt: {fmt!r} is not one of {FORMATS}")
    if arch not in ARCHS:
        raise ValueError(f"arch: {arch!r} is not one of {ARCHS}")
    for name, value in (
        ("keys", keys),
        ("values", values),
        ("steps", steps),
        ("batch_size", batch_size),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if not (1 <= pairs[0] <= pairs[1] <= keys):
        raise ValueError(f"pairs: expected 1 <= lo <= hi <= keys={keys}, got {pairs}")
    from transformers import LlamaForCausalLM

    from neurips25_core.models import tiny_llama_config

    torch.manual_seed(seed)
    vocab, positions = FIRST_KEY + keys + values, 4 * (2 * pairs[1] + 4 * queries)
    if arch == "llama":
        config = tiny_llama_config(
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            vocab_size=vocab,
            max_position_embeddings=positions,
        )
        model = LlamaForCausalLM(config)
    else:  # LFM2: gated short-convolution blocks (kernel 3) alternating with attention
        from transformers import Lfm2Config, Lfm2ForCausalLM

        config = Lfm2Config(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=int(math.ceil(8 * hidden / 3 / 32) * 32),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=positions,
            layer_types=["conv" if i % 2 == 0 else "full_attention" for i in range(layers)],
            block_auto_adjust_ff_dim=False,
            tie_word_embeddings=False,
            pad_token_id=PAD,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = Lfm2ForCausalLM(config)
    task = dict(keys=keys, values=values, pairs=pairs, queries=queries)
    scored = "separated" if fmt == "mixed" else fmt
    held_out = make_batch(random.Random(10_000 + seed), scored, 256, **task)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    warm = max(1, min(warmup, steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / warm
            if s < warm
            else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))
        ),
    )
    rng = random.Random(seed)
    start = time.process_time()
    curve = []
    model.train()
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            acc = accuracy(model, *held_out)
            curve.append((step, round(acc, 4)))
            log(
                f"{fmt} step {step}: accuracy {acc:.3f} (chance ≈ {chance(pairs):.3f}), {time.process_time() - start:.0f} CPU s"
            )
        if step == steps:
            break
        ids, labels = make_batch(rng, fmt, batch_size, **task)
        with torch.enable_grad():
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return {
        "format": fmt,
        "arch": arch,
        "scored_on": scored,
        **task,
        "pairs": list(pairs),
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "steps": steps,
        "lr": lr,
        "batch_size": batch_size,
        "seed": seed,
        "warmup": warm,
        "chance": round(chance(pairs), 4),
        "final_accuracy": curve[-1][1],
        "curve": curve,
        "cpu_seconds": round(time.process_time() - start, 1),
    }


#: The committed grid: (name, run() arguments). Small tasks are 8 keys, 16 values, 2-4 pairs;
#: the larger one 20 keys, 40 values, 2-8 pairs (about the QA analogue's 20 names).
SMALL = dict(keys=8, values=16, pairs=(2, 4))
LARGE = dict(keys=20, values=40, pairs=(2, 8))
GRID = [
    ("adjacent-large", dict(fmt="adjacent", **LARGE)),
    ("separated-large", dict(fmt="separated", **LARGE)),
    ("separated-small", dict(fmt="separated", **SMALL)),
    ("separated-small-4layers", dict(fmt="separated", **SMALL, layers=4, lr=1e-3, warmup=500)),
    ("mixed-small-seed0", dict(fmt="mixed", **SMALL, seed=0)),
    ("mixed-small-seed1", dict(fmt="mixed", **SMALL, seed=1)),
    ("mixed-small-seed2", dict(fmt="mixed", **SMALL, seed=2)),
    ("mixed-small-4layers", dict(fmt="mixed", **SMALL, layers=4)),
    ("mixed-large", dict(fmt="mixed", **LARGE)),
    ("lfm2-separated-large", dict(fmt="separated", arch="lfm2", **LARGE)),
    ("lfm2-separated-small", dict(fmt="separated", arch="lfm2", **SMALL)),
]


def report(out_dir: str) -> str:
    """One markdown table (and ``curves.png``) from the grid's JSON files in ``out_dir``."""
    from pathlib import Path

    from neurips25_core.bench import plot_lines

    rows = [json.loads(p.read_text()) for p in sorted(Path(out_dir).glob("*.json"))]
    if not rows:
        raise ValueError(f"out_dir: no probe results (*.json) in {out_dir}")
    order = {name: i for i, (name, _) in enumerate(GRID)}
    rows.sort(key=lambda r: order.get(r.get("name"), len(order)))
    env = rows[0]["environment"]
    dates = sorted({r["environment"].get("date", "?") for r in rows})
    lines = [
        "# ptmoe recall probe (benchmarks/recall_probe.py --grid)",
        "",
        f"Measured {dates[0]}{' to ' + dates[-1] if len(dates) > 1 else ''} on {env.get('machine', '?')}, "
        f"commit(s) {', '.join(sorted({r['environment'].get('git_commit', '?') for r in rows}))}, "
        f"1-min load averages {', '.join(sorted({r['environment'].get('load', '?') for r in rows}))}; one thread per run, teacher-forced accuracy on 256 "
        "held-out rows of the scored format (separated for `mixed`).",
        "",
        "| run | format | model | keys × values, pairs | layers × hidden | lr, warm-up | steps | chance | first step ≥ 0.9 | final accuracy | CPU s |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    series = {}
    for r in rows:
        hit = next((s for s, a in r["curve"] if a >= 0.9), None)
        lines.append(
            f"| {r.get('name', '')} | {r['format']} | {r.get('arch', 'llama')} | {r['keys']} × {r['values']}, {r['pairs'][0]}–{r['pairs'][1]} | "
            f"{r['layers']} × {r['hidden']} | {r['lr']:g}, {r['warmup']} | {r['steps']} | {r['chance']:.3f} | "
            f"{'–' if hit is None else hit} | {r['final_accuracy']:.3f} | {r['cpu_seconds']:.0f} |"
        )
        series[r.get("name", r["format"])] = [a for _, a in r["curve"]]
    steps = [s for s, _ in rows[0]["curve"]]
    if all(len(v) == len(steps) for v in series.values()):
        plot_lines(
            steps,
            series,
            Path(out_dir) / "curves.png",
            xlabel="step",
            ylabel="recall accuracy",
            title="Tiny Llama: in-context key → value recall",
        )
    text = "\n".join(lines) + "\n"
    (Path(out_dir) / "results.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--format", choices=FORMATS, default="adjacent")
    p.add_argument("--arch", choices=ARCHS, default="llama")
    p.add_argument("--keys", type=int, default=20)
    p.add_argument("--values", type=int, default=40)
    p.add_argument("--pairs", type=int, nargs=2, default=(2, 8), metavar=("LO", "HI"))
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--warmup", type=int, default=150, help="linear warm-up steps, then cosine decay"
    )
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--grid", action="store_true", help="run the committed GRID into --out-dir")
    p.add_argument(
        "--part", default="0/1", help="with --grid: run part I of N (round robin), e.g. 0/2"
    )
    p.add_argument("--out-dir", help="with --grid: one JSON per run here")
    p.add_argument("--only", help="with --grid: a comma-separated subset of GRID's names")
    p.add_argument(
        "--report", metavar="DIR", help="write DIR/results.md and DIR/curves.png from a grid's JSON"
    )
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    from neurips25_core.bench import environment

    if a.report:
        print(report(a.report))
        return 0
    if a.grid:
        from pathlib import Path

        if not a.out_dir:
            p.error("--grid needs --out-dir")
        i, n = (int(x) for x in a.part.split("/"))
        Path(a.out_dir).mkdir(parents=True, exist_ok=True)
        grid = GRID
        if a.only:
            names = a.only.split(",")
            unknown = sorted(set(names) - {name for name, _ in GRID})
            if unknown:
                p.error(f"--only: {unknown} are not in GRID")
            grid = [g for g in GRID if g[0] in names]
        for name, kwargs in grid[i::n]:
            result = {"name": name, **run(**kwargs), "environment": environment()}
            (Path(a.out_dir) / f"{name}.json").write_text(json.dumps(result, indent=1))
        return 0
    result = run(
        a.format,
        a.arch,
        a.keys,
        a.values,
        tuple(a.pairs),
        hidden=a.hidden,
        layers=a.layers,
        steps=a.steps,
        lr=a.lr,
        batch_size=a.batch_size,
        seed=a.seed,
        warmup=a.warmup,
    )
    result["environment"] = environment()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("format", "final_accuracy", "chance", "cpu_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
