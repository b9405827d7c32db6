import math

import pytest
import torch

from neurips25_core.parallel import process_map, workers_from_env


def test_in_process_runs_on_one_thread_in_order():
    seen = []

    def threads(x):
        return (x, torch.get_num_threads())

    out = process_map(threads, [3, 1, 2], progress=False, on_result=lambda i, r: seen.append(i))
    assert out == [(3, 1), (1, 1), (2, 1)]
    assert seen == [3, 1, 2]


def test_two_spawned_workers_equal_one_and_keep_order():
    items = [float(i * i) for i in range(7)]
    seen = []
    two = process_map(
        math.sqrt, items, workers=2, progress=False, on_result=lambda i, r: seen.append(i)
    )
    assert two == process_map(math.sqrt, items, workers=1, progress=False)
    assert two == [float(i) for i in range(7)]
    assert sorted(seen) == sorted(items)


def test_a_worker_exception_propagates():
    with pytest.raises(ValueError, match="math domain error"):
        process_map(math.sqrt, [1.0, -1.0, 4.0], workers=2, progress=False)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="workers"):
        process_map(math.sqrt, [1.0], workers=0)
    with pytest.raises(ValueError, match="workers"):
        process_map(math.sqrt, [1.0], workers=True)
    with pytest.raises(TypeError, match="fn"):
        process_map(3, [1.0])
    assert process_map(math.sqrt, [], workers=2, progress=False) == []


def test_workers_from_env(monkeypatch):
    monkeypatch.delenv("NEURIPS25_TEST_WORKERS", raising=False)
    assert workers_from_env("NEURIPS25_TEST_WORKERS", 2) == 2
    monkeypatch.setenv("NEURIPS25_TEST_WORKERS", "3")
    assert workers_from_env("NEURIPS25_TEST_WORKERS") == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("NEURIPS25_TEST_WORKERS", bad)
        with pytest.raises(ValueError, match="NEURIPS25_TEST_WORKERS"):
            workers_from_env("NEURIPS25_TEST_WORKERS")
    with pytest.raises(ValueError, match="default"):
        workers_from_env("NEURIPS25_TEST_WORKERS", 0)
