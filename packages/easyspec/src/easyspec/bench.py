"""The easyspec benchmark suite (``neurips25 bench easyspec``).

``acceptance`` (quality): a base and a deep-narrow draft Llama trained here on the stdlib byte
corpus; speculative decoding with the unmodified draft (SD, N = 1) vs fuzzy N with and without
bonus calibration, chains and greedy token trees, and transformers' assisted generation;
acceptance, accepted length, sequential draft stages, lossless check, and the cosine of draft
hidden states across layers. ``acceptance_small`` (quality, smoke/full only): the same protocol at
T in {0, 0.8} and N in {1, 2, 4} on the small pair (base 4x128, draft 6x64, 300 steps), the
affordable reproduction on a shared 2-core CPU. ``draft_latency`` (speed): one draft token,
``sequential`` vs ``stacked``. ``end_to_end`` (speed): tokens/s of vanilla decoding, SD, EasySpec
and transformers' assisted generation, outputs checked equal first.
"""

from __future__ import annotations

import torch

from neurips25_core.bench import Context, Suite, compare, single_thread

SUITE = Suite(
    name="easyspec",
    paper="EasySpec: Layer-Parallel Speculative Decoding for Efficient Multi-GPU Utilization",
    url="https://arxiv.org/abs/2502.02493",
)


def _sizes(mode: str) -> dict:
    """Model shapes (layers, width, heads) and training per mode; ``small`` is the
    ``acceptance_small`` case's pair (the issue's quick models at their 300 steps)."""
    return {
        "smoke": dict(base=(2, 32, 2), draft=(4, 32, 2), steps=20, batch=4, seq=64, lr=3e-3),
        "quick": dict(base=(4, 128, 4), draft=(6, 64, 4), steps=150, batch=8, seq=48, lr=3e-3),
        "small": dict(base=(4, 128, 4), draft=(6, 64, 4), steps=300, batch=8, seq=64, lr=3e-3),
        "full": dict(base=(8, 256, 4), draft=(10, 96, 4), steps=1500, batch=16, seq=256, lr=3e-4),
    }[mode]


def _trained(kind: str, layers: int, width: int, heads: int, s: dict, seed: int):
    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import (
        cached_checkpoint,
        tiny_llama,
        tiny_llama_config,
        train,
        train_arguments,
    )

    cfg = tiny_llama_config(
        hidden_size=width, num_layers=layers, num_heads=heads, max_position_embeddings=512
    )
    corpus = stdlib_corpus()
    model = tiny_llama(cfg, seed=seed)
    args = dict(steps=s["steps"], lr=s["lr"], batch_size=s["batch"], seq_len=s["seq"], seed=seed)

    def build():
        with single_thread():
            res = train(model, corpus, progress=False, desc=f"easyspec {kind}", **args)
        return model.state_dict(), {"seconds": res.seconds, "final_loss": res.losses[-1]}

    state, meta = cached_checkpoint(
        f"easyspec_{kind}",
        {"config": cfg, "data": corpus.fingerprint, "train": train_arguments(**args), "seed": seed},
        build,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    return model.eval(), meta


def trained_pair(mode: str):
    """(base, draft, corpus) for a mode, trained on the stdlib corpus (cached)."""
    from neurips25_core.data import stdlib_corpus

    s = _sizes(mode)
    base, _ = _trained("base", *s["base"], s, seed=0)
    draft, _ = _trained("draft", *s["draft"], s, seed=1)
    return base, draft, stdlib_corpus()


def _prompts(corpus, n: int, length: int) -> list[torch.Tensor]:
    val = corpus.split("val")
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, val.numel() - length - 1, (n,), generator=g).tolist()
    return [val[s : s + length][None].long() for s in starts]


TREE = (2, 2, 1, 1)  # 14 nodes: the top-2 tokens at the first two depths, then greedy


def _rows(temp: float, sizes: list[int]) -> list[tuple[str, int, bool, tuple | None, str | None]]:
    """(label, N, calibrate, tree, baseline label) of the speculative rows at one temperature;
    token trees (greedy verification only) at T = 0."""
    rows = [("SD (N=1)", 1, True, None, None)]
    for n in sizes:
        if n > 1:
            rows += [(f"fuzzy N={n} +calib", n, True, None, "SD (N=1)")]
            rows += [(f"fuzzy N={n} no-calib", n, False, None, "SD (N=1)")]
    if temp == 0:
        tree = ",".join(map(str, TREE))
        rows += [(f"SD tree ({tree})", 1, True, TREE, "SD (N=1)")]
        m = max(sizes)
        rows += [(f"fuzzy N={m} +calib tree ({tree})", m, True, TREE, f"SD tree ({tree})")]
    return rows


@SUITE.case("acceptance", kind="quality")
def acceptance(ctx: Context) -> None:
    """Acceptance of SD (N = 1) vs fuzzy N with/without calibration, chains and greedy token
    trees; every T = 0 row checked equal to greedy decoding. Quick: T = 0, N in {1, 4}."""
    _acceptance(
        ctx,
        models=ctx.mode,
        n_prompts=ctx.pick(smoke=2, quick=4, full=64),
        new=ctx.pick(smoke=12, quick=32, full=64),
        # T = 0.8 in smoke runs in acceptance_small
        temps=ctx.pick(smoke=[0.0], quick=[0.0], full=[0.0, 0.8]),
        sizes=ctx.pick(smoke=[1, 2], quick=[1, 4], full=[1, 2, 4]),
    )


@SUITE.case("acceptance_small", kind="quality", modes=("smoke", "full"))
def acceptance_small(ctx: Context) -> None:
    """The full acceptance protocol (T in {0, 0.8}, N in {1, 2, 4}, trees, assisted) on the
    small pair (base 4x128, draft 6x64, 300 steps): ``--full --case acceptance_small``, minutes."""
    _acceptance(
        ctx,
        models=ctx.pick(smoke="smoke", quick="small", full="small"),
        n_prompts=ctx.pick(smoke=2, quick=16, full=16),
        new=ctx.pick(smoke=12, quick=32, full=32),
        temps=[0.0, 0.8],
        sizes=ctx.pick(smoke=[1, 2], quick=[1, 2, 4], full=[1, 2, 4]),
    )


def _acceptance(ctx: Context, models: str, n_prompts: int, new: int, temps, sizes) -> None:
    from .draft import FuzzyDraft
    from .generate import autoregressive_generate, speculative_generate

    with single_thread():
        base, draft, corpus = trained_pair(models)
        gamma = 4
        prompts = _prompts(corpus, n_prompts, 32)
        vanilla = [autoregressive_generate(base, p, max_new_tokens=new) for p in prompts]
        for temp in temps:  # vanilla decoding: one base forward per token (prefill included)
            kw = dict(method="vanilla", T=temp, gamma=gamma, prompts=n_prompts, new_tokens=new)
            ctx.record("accepted_length", 1.0, "tokens/iter", lower_is_better=False, **kw)
            ctx.record("base_forwards", float(new), "per prompt", **kw)
        results = {}
        for temp in temps:
            for row, n, calib, tree, ref_row in _rows(temp, sizes):
                acc, lens, stages, fwd, same, base_fwd, verified = 0.0, 0.0, 0, 0, True, 0, 0
                for i, p in enumerate(prompts):
                    d = FuzzyDraft(draft, group_size=n, backend="stacked")
                    gen = torch.Generator().manual_seed(i)
                    out, st = speculative_generate(
                        base,
                        d,
                        p,
                        gamma=gamma,
                        temperature=temp,
                        calibrate=calib,
                        max_new_tokens=new,
                        generator=gen,
                        tree=tree,
                    )
                    if temp == 0:
                        same &= torch.equal(out, vanilla[i])
                    acc += st.acceptance_rate / len(prompts)
                    lens += st.mean_accepted_length / len(prompts)
                    stages += st.draft_stages
                    fwd += st.draft_forwards
                    base_fwd += st.base_forwards
                    verified += st.verified_tokens / max(1, st.iterations) / len(prompts)
                if temp == 0 and not same:
                    raise AssertionError(f"{row}: output differs from greedy decoding")
                results[(temp, row)] = acc
                kw = dict(method=row, T=temp, gamma=gamma, prompts=n_prompts, new_tokens=new)
                ctx.record(
                    "acceptance_rate",
                    acc,
                    "frac",
                    baseline=ref_row,
                    baseline_value=results.get((temp, ref_row)),
                    lower_is_better=False,
                    **kw,
                )
                ctx.record("accepted_length", lens, "tokens/iter", lower_is_better=False, **kw)
                ctx.record("draft_stages_per_forward", stages / max(1, fwd), "stages", **kw)
                ctx.record("base_forwards", base_fwd / n_prompts, "per prompt", **kw)
                ctx.record("draft_forwards", fwd / n_prompts, "per prompt", **kw)
                ctx.record("verified_tokens_per_iteration", verified, "tokens", **kw)
                if temp == 0:
                    ctx.record(
                        "lossless_vs_vanilla", float(same), "bool", lower_is_better=False, **kw
                    )
        for temp in temps:
            _assisted_rows(ctx, base, draft, prompts, vanilla, temp, gamma, new)
        # Table 4 analogue: cosine of draft hidden states at layers l and l + k (per token).
        ids = prompts[0]
        hs = draft(ids, output_hidden_states=True).hidden_states[1:]  # after each layer
        for k in (1, 2, 4):
            if k < len(hs):
                cos = [
                    torch.cosine_similarity(hs[i][0], hs[i + k][0], dim=-1).mean().item()
                    for i in range(len(hs) - k)
                ]
                ctx.record("hidden_cosine", sum(cos) / len(cos), "cos", lower_is_better=False, k=k)


def _assisted_rows(ctx, base, draft, prompts, vanilla, temp, gamma, new) -> None:
    """transformers' assisted generation (the peer) with the same draft and a constant gamma:
    base forwards counted with a hook, accepted length = new tokens / verification forwards."""
    calls = [0]

    def hook(*_):
        calls[0] += 1

    draft.generation_config.num_assistant_tokens = gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    handle = base.register_forward_hook(hook)
    try:
        lens, same = 0.0, True
        for i, p in enumerate(prompts):
            calls[0] = 0
            torch.manual_seed(i)
            kw = dict(do_sample=True, temperature=temp) if temp > 0 else dict(do_sample=False)
            out = base.generate(
                p, assistant_model=draft, max_new_tokens=new, min_new_tokens=new, **kw
            )
            if temp == 0:
                same &= torch.equal(out[:, : vanilla[i].shape[1]], vanilla[i])
            # the first base forward is the prefill, which also yields the first new token
            lens += (out.shape[1] - p.shape[1]) / max(1, calls[0]) / len(prompts)
    except Exception as exc:  # a transformers version without assisted generation
        print(f"acceptance: transformers assisted generation skipped ({type(exc).__name__}: {exc})")
        return
    finally:
        handle.remove()
    if temp == 0 and not same:
        raise AssertionError("assisted generation: output differs from greedy")
    kw = dict(method="transformers assisted", T=temp, gamma=gamma, prompts=len(prompts))
    kw["new_tokens"] = new
    ctx.record("accepted_length", lens, "tokens/iter", lower_is_better=False, **kw)
    ctx.record("acceptance_rate", max(0.0, (lens - 1) / gamma), "frac", lower_is_better=False, **kw)
    if temp == 0:
        ctx.record("lossless_vs_vanilla", float(same), "bool", lower_is_better=False, **kw)


def _time_step(d, prefix):
    d.prefill(prefix)
    n = d.length

    def one():
        d.truncate(n)
        return d.step(1)

    return one


@SUITE.case("draft_latency", kind="speed")
def draft_latency(ctx: Context) -> None:
    """One fuzzy draft token: ``stacked`` vs ``sequential`` (same N), outputs checked equal."""
    from neurips25_core.models import tiny_llama, tiny_llama_config

    from .draft import FuzzyDraft

    shapes = {
        "tiny draft": ctx.pick(smoke=(4, 32, 2, 2), quick=(6, 64, 4, 4), full=(10, 96, 4, 4)),
    }
    if not ctx.quick:  # building the ~1 GB slice alone takes most of a quick run's minute
        shapes["1B-shaped slice"] = ctx.pick(
            smoke=(4, 128, 4, 2), quick=None, full=(6, 2048, 32, 8)
        )
    ctx_len = ctx.pick(smoke=16, quick=256, full=1024)
    with single_thread():
        for name, (layers, width, heads, kv) in shapes.items():
            cfg = tiny_llama_config(
                hidden_size=width,
                num_layers=layers,
                num_heads=heads,
                num_kv_heads=kv,
                max_position_embeddings=ctx_len + 8,
            )
            model = tiny_llama(cfg, seed=0).eval()
            n = 4 if layers > 4 else 2
            prefix = torch.randint(0, 256, (1, ctx_len), generator=torch.Generator().manual_seed(0))
            fns = {}
            for backend in ("sequential", "stacked"):
                fns[backend] = _time_step(FuzzyDraft(model, group_size=n, backend=backend), prefix)
            fns["exact (N=1)"] = _time_step(FuzzyDraft(model, group_size=1), prefix)
            ref, out = fns["sequential"](), fns["stacked"]()
            err = ((out - ref).norm() / ref.norm()).item()
            if err > 1e-5:
                raise AssertionError(f"stacked differs from sequential: {err}")
            res = compare(
                fns,
                baseline="sequential",
                min_time=ctx.pick(smoke=0.02, quick=0.2, full=1.0),
                max_time=ctx.pick(smoke=0.2, quick=1.0, full=10.0),
                cpu_time=True,
            )
            res.record(
                ctx,
                metric="draft_token_latency",
                model=name,
                layers=layers,
                width=width,
                group_size=n,
                context=ctx_len,
            )


@SUITE.case("end_to_end", kind="speed")
def end_to_end(ctx: Context) -> None:
    """Wall time to generate: vanilla, SD (N=1), EasySpec (N=4 stacked + calib), assisted generation."""
    from .draft import FuzzyDraft
    from .generate import autoregressive_generate, speculative_generate

    with single_thread():
        base, draft, corpus = trained_pair(ctx.mode)
        new = ctx.pick(smoke=12, quick=32, full=64)
        prompt = _prompts(corpus, 1, 32)[0]
        gamma = 4
        n = min(4, max(1, len(draft.model.layers) - 2))
        stats = {}

        def spec(group, key):
            def fn():
                d = FuzzyDraft(draft, group_size=group, backend="stacked")
                out, st = speculative_generate(base, d, prompt, gamma=gamma, max_new_tokens=new)
                stats[key] = st
                return out

            return fn

        fns = {
            "vanilla": lambda: autoregressive_generate(base, prompt, max_new_tokens=new),
            "SD (N=1)": spec(1, "sd"),
            f"EasySpec (N={n})": spec(n, "easy"),
        }
        try:
            import transformers  # noqa: F401

            draft.generation_config.num_assistant_tokens = gamma
            draft.generation_config.num_assistant_tokens_schedule = "constant"

            def assisted():
                return base.generate(
                    prompt, assistant_model=draft, do_sample=False, max_new_tokens=new
                )

            fns["transformers assisted"] = assisted
        except Exception as exc:  # pragma: no cover - version without assisted generation
            print(f"end_to_end: transformers assisted generation unavailable ({exc}); skipped")
        ref = fns["vanilla"]()
        for name, fn in fns.items():
            try:
                out = fn()
            except Exception as exc:
                if name != "transformers assisted":
                    raise
                print(
                    f"end_to_end: assisted generation failed ({type(exc).__name__}: {exc}); skipped"
                )
                del fns[name]
                break
            if not torch.equal(out[:, : ref.shape[1]], ref):
                raise AssertionError(f"{name}: output differs from vanilla greedy")
        res = compare(
            fns,
            baseline="vanilla",
            rounds=ctx.pick(smoke=2, quick=3, full=None),
            min_time=ctx.pick(smoke=0.05, quick=0.5, full=3.0),
            max_time=ctx.pick(smoke=0.5, quick=1.5, full=20.0),
            cpu_time=True,
        )
        res.record(ctx, metric="generate_time", new_tokens=new, gamma=gamma)
        t_vanilla = res.timings["vanilla"].median / new
        parts = _cost_parts(ctx, base, draft, sorted({1, n}), prompt, gamma)
        for key, label, group in (("sd", "SD (N=1)", 1), ("easy", f"EasySpec (N={n})", n)):
            st = stats[key]
            t_iter = res.timings[label].median / max(1, st.iterations)
            kw = dict(method=label, group_size=group, gamma=gamma)
            ctx.record(
                "mean_accepted_length",
                st.mean_accepted_length,
                "tokens/iter",
                lower_is_better=False,
                **kw,
            )
            ctx.record(
                "measured_speedup_vs_vanilla",
                t_vanilla * st.mean_accepted_length / t_iter,
                "x",
                lower_is_better=False,
                **kw,
            )
            # The paper's cost model from parts measured here (medians of bench.compare):
            # E[k+1] T_base / (gamma T_draft + T_verify + T_calib).
            mine = {
                "T_base": parts["T_base"],
                "T_draft": parts[f"T_draft N={group}"],
                "T_verify": parts["T_verify"],
                "T_calib": parts["T_calib"],
            }
            predicted = (
                st.mean_accepted_length
                * mine["T_base"]
                / (gamma * mine["T_draft"] + mine["T_verify"] + mine["T_calib"])
            )
            for part, value in mine.items():
                ctx.record("cost_part", value, "s", part=part, **kw)
            ctx.record("cost_model_speedup", predicted, "x", lower_is_better=False, **kw)


def _cost_parts(ctx: Context, base, draft_model, groups: list[int], prompt, gamma: int):
    """Median times of one base token, one draft token per group size, one verification of
    gamma + 1 tokens and one (exact, so N-independent) calibration forward over 3 tokens, all at
    the prompt's context length, timed side by side."""
    from transformers import DynamicCache

    from .draft import FuzzyDraft
    from .generate import _cache_kwarg, _crop

    length = prompt.shape[1]
    cache = DynamicCache()
    kw = _cache_kwarg(base)
    with torch.no_grad():
        base(input_ids=prompt, **{kw: cache}, use_cache=True)
    one = prompt[:, -1:]
    chain = prompt[:, -(gamma + 1) :]
    calib_ids = prompt[0, -3:]

    @torch.no_grad()
    def base_forward(ids):
        _crop(cache, length)
        return base(input_ids=ids, **{kw: cache}, use_cache=True).logits

    def draft_step(d):
        def fn():
            d.truncate(length)
            return d.step(int(one))

        return fn

    def calibrate(d):
        def fn():
            d.truncate(length)
            return d.calibrate(calib_ids)

        return fn

    drafts = {}
    for g in groups:
        drafts[g] = FuzzyDraft(draft_model, group_size=g, backend="stacked")
        drafts[g].prefill(prompt)
    fns = {"T_base": lambda: base_forward(one), "T_verify": lambda: base_forward(chain)}
    fns["T_calib"] = calibrate(drafts[groups[0]])
    fns.update({f"T_draft N={g}": draft_step(d) for g, d in drafts.items()})
    res = compare(
        fns,
        baseline="T_base",
        min_time=ctx.pick(smoke=0.02, quick=0.1, full=1.0),
        max_time=ctx.pick(smoke=0.2, quick=0.5, full=5.0),
        cpu_time=True,
    )
    return {name: t.median for name, t in res.timings.items()}
