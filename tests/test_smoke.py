"""Every case of every registered suite runs in smoke mode on an empty checkpoint cache.

This is how "it runs on a fresh machine" stays true as packages are added: a case that trains
under ``torch.no_grad()``, reads a checkpoint nobody built, or has no smoke size fails here. The
cache points at a fresh temporary folder for the whole session (cases that share a pretrained
model build it once), never at ``~/.cache/neurips25``.
"""

from __future__ import annotations

import math
import time
from importlib.metadata import entry_points

import pytest

from neurips25_core.bench import MODES, Suite

#: A smoke case takes seconds; one that takes longer than this has no real smoke size.
SMOKE_SECONDS = 60.0


def _cases():
    params = []
    for ep in sorted(entry_points(group="neurips25.benchmarks"), key=lambda e: e.name):
        suite = ep.load()
        assert isinstance(suite, Suite), ep.value
        for case in suite.cases:
            params.append(pytest.param(suite, case, id=f"{ep.name}/{case.name}"))
    return params


@pytest.fixture(scope="session")
def empty_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("neurips25-cache")


@pytest.mark.parametrize(("suite", "case"), _cases())
def test_every_case_runs_in_smoke_mode_on_an_empty_cache(
    suite, case, empty_cache, tmp_path, monkeypatch
):
    from neurips25_core.cli import run_case

    assert "smoke" in case.modes, (
        f"{suite.name}/{case.name} has no smoke size (modes={case.modes}); every case runs in "
        f"every mode of {MODES}, sized with ctx.pick(smoke=..., quick=..., full=...)"
    )
    monkeypatch.setenv("NEURIPS25_CACHE", str(empty_cache))
    start = time.perf_counter()
    results = run_case(suite, case, "smoke", tmp_path, log=lambda _msg: None)
    seconds = time.perf_counter() - start
    assert results, f"{suite.name}/{case.name} recorded no result in smoke mode"
    finite = [r for r in results if isinstance(r.value, (int, float)) and math.isfinite(r.value)]
    assert finite, f"{suite.name}/{case.name}: no finite result among {[r.label for r in results]}"
    assert (tmp_path / "results.json").stat().st_size > 2
    assert (tmp_path / "results.md").read_text().count("\n") >= 3
    assert seconds < SMOKE_SECONDS, (
        f"{suite.name}/{case.name} took {seconds:.0f} s in smoke mode (> {SMOKE_SECONDS:.0f} s): "
        "give it a toy size"
    )
