"""The runs the reproduction fits: the noisy quadratic, ScheduledAdamW and a tiny LM run."""

import numpy as np
import torch
from lrannealing import schedules
from lrannealing.bench import SUITE, lm_setup
from lrannealing.experiment import ScheduledAdamW, noisy_quadratic_curve, train_schedule


def test_noisy_quadratic_matches_sampled_sgd():
    rng = np.random.default_rng(0)
    lrs = schedules.wsd(200, 0.5, decay_frac=0.3)
    dim, runs = 30, 4000
    h = np.arange(1, dim + 1) ** -1.0
    x = np.ones((runs, dim))
    sampled = []
    for eta in lrs:
        grad = h * x + rng.standard_normal((runs, dim)) * np.sqrt(h)
        x = x - eta * grad
        sampled.append(1.0 + 0.5 * np.mean((h * x**2).sum(1)))
    exact = noisy_quadratic_curve(lrs, dim=dim)
    np.testing.assert_allclose(np.array(sampled), exact, rtol=0.02)
    assert exact[-1] < exact[150]  # the cooldown lowers the loss


def test_scheduled_adamw_follows_the_schedule():
    p = torch.nn.Parameter(torch.zeros(3))
    lrs = [0.3, 0.2, 0.1]
    opt = ScheduledAdamW([p], lrs)
    used = []
    for _ in lrs:
        p.grad = torch.ones(3)
        opt.step()
        used.append(opt.param_groups[0]["lr"])
    assert used == lrs


def test_lm_run_trains_even_under_no_grad():
    setup = lm_setup("smoke")
    from neurips25_core.data import stdlib_corpus

    lrs = schedules.cosine(20, 3e-3, warmup=2)
    with torch.no_grad():
        out = train_schedule(
            lrs,
            setup["config"],
            stdlib_corpus(),
            steps=20,
            batch_size=2,
            seq_len=32,
            eval_every=10,
            eval_sequences=4,
            progress=False,
        )
    assert out["steps"] == [10, 20] and len(out["train_loss"]) == 20
    np.testing.assert_allclose(out["lrs_used"], lrs[:20])
    assert out["loss"][1] < out["loss"][0] < 6.0


def test_full_setup_is_the_issue_configuration():
    setup = lm_setup("full")
    cfg, run = setup["config"], setup["run"]
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (64, 2, 256)
    assert run == dict(
        T=3000, warmup=100, batch_size=8, seq_len=128, eval_every=50, eval_sequences=64
    )
    assert list(setup["schedules"]) == ["constant", "cosine", "wsd_cos20", "wsd_lin10", "8-1-1"]
    from neurips25_core.models import tiny_llama

    n = sum(p.numel() for p in tiny_llama(cfg).parameters())
    assert 0.13e6 < n < 0.16e6
    assert {c.name for c in SUITE.cases} == {"toy_quadratic", "tiny_lm", "s2_speed", "fit_speed"}
