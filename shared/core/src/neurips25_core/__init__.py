"""neurips25_core: the thin shared core of the neurips25 packages.

Modules (imported on demand, none of them initialises CUDA at import):

- ``device``: the best device, whether CUDA / Triton are usable, whether the Triton interpreter is on.
- ``testing``: relative-norm ``assert_close``, ``sqnr``, seeded inputs, NaN-poisoned buffers,
  forward + backward comparison against a float64 reference.
- ``bench``: timers, peak memory, ``BenchResult``, writers, plots, ``roofline()``, the suite protocol.
- ``cpu``: numba CPU kernels (numba imported lazily): availability, thread count, compilation,
  row-tiled layouts.
- ``data``: the offline stdlib byte corpus and batch iterators.
- ``models``: tiny transformers Llama models, a training loop, bits-per-byte evaluation, a checkpoint cache.
- ``cli``: the ``neurips25`` command.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
