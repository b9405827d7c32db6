import subprocess
import sys

import numpy as np
import pytest
import torch

from neurips25_core.bench import num_threads, single_thread
from neurips25_core.cpu import (
    njit_kernel,
    numba_available,
    numba_num_threads,
    numba_parallel,
    numba_threads,
    row_tiles,
)

needs_numba = pytest.mark.skipif(
    not numba_available(), reason="numba absent: pip install 'neurips25-core[cpu]'"
)


def test_importing_the_module_imports_no_numba():
    code = "import sys, neurips25_core.cpu; assert 'numba' not in sys.modules; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("shape", "tile", "dtype"),
    [
        ((7,), 4, torch.int64),
        ((5, 3), 2, torch.uint8),
        ((9, 2, 3), 4, torch.float32),
        ((8, 3), 4, torch.float32),
    ],
)
def test_row_tiles_matches_an_explicit_loop(shape, tile, dtype):
    t = (torch.arange(int(np.prod(shape))) % 251 + 1).to(dtype).view(shape)  # no zeros: pads show
    out = row_tiles(t, tile)
    tiles = -(-shape[0] // tile)
    assert out.shape == (tiles, *shape[1:], tile) and out.flags.c_contiguous
    assert out.dtype == t.numpy().dtype
    for r in range(tiles * tile):
        got = out[r // tile][..., r % tile]
        want = t[r].numpy() if r < shape[0] else np.zeros(shape[1:], out.dtype)
        np.testing.assert_array_equal(got, want)


def test_row_tiles_refuses_bad_input():
    with pytest.raises(TypeError, match="t:"):
        row_tiles(np.zeros((4, 2)), 2)
    with pytest.raises(ValueError, match="t:"):
        row_tiles(torch.tensor(1.0), 2)
    for tile in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="tile:"):
            row_tiles(torch.zeros(4, 2), tile)


@needs_numba
def test_numba_threads_follow_torch_and_are_restored():
    import numba

    cap = numba.config.NUMBA_NUM_THREADS
    before = numba.get_num_threads()
    with single_thread():
        assert numba_threads() == 1
        with numba_parallel() as parallel:
            assert parallel is False and numba.get_num_threads() == before
    if cap >= 2:
        with num_threads(2):
            assert numba_threads() == 2
            with numba_parallel() as parallel:
                assert parallel is True and numba.get_num_threads() == 2
            assert numba.get_num_threads() == before
    inside = []

    def fail_inside():
        with numba_num_threads(1):
            inside.append(numba.get_num_threads())
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert inside == [1] and numba.get_num_threads() == before


@needs_numba
def test_numba_num_threads_refuses_a_count_outside_the_pool():
    import numba

    for n in (0, numba.config.NUMBA_NUM_THREADS + 1):
        with pytest.raises(ValueError, match="n:"), numba_num_threads(n):
            pass
    with pytest.raises(TypeError, match="n:"), numba_num_threads(2.0):
        pass


def _scaled_sum(scale):
    import numba

    def kernel(x, out):  # pragma: no cover - compiled
        for i in numba.prange(x.shape[0]):
            out[i] = x[i].sum() * scale

    return kernel


@needs_numba
@pytest.mark.parametrize("parallel", [False, True])
def test_njit_kernel_compiles_once_per_factory_arguments_and_build(parallel):
    kernel = njit_kernel(_scaled_sum, 3.0, parallel=parallel)
    assert njit_kernel(_scaled_sum, 3.0, parallel=parallel) is kernel
    assert njit_kernel(_scaled_sum, 2.0, parallel=parallel) is not kernel
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.full(4, np.nan, np.float32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x.sum(axis=1) * 3)
