"""Benchmarking: timers, peak memory, result records, writers, plots, the roofline and the suite protocol.

A package declares one :class:`Suite` and registers it under the entry-point group
``neurips25.benchmarks``. Each case is a function taking a :class:`Context`; it records results
with :meth:`Context.record`, naming the baseline measured *in the same run*, so every claim is a
ratio measured side by side. Every case runs in every mode (``smoke``, ``quick``, ``full``) and
sizes itself with :meth:`Context.pick`::

    SUITE = Suite(name="mypkg", paper="My Paper", url="https://arxiv.org/abs/...")


    @SUITE.case("matmul", kind="speed")
    def matmul(ctx):
        n = ctx.pick(smoke=64, quick=512, full=2048)
        ...
        compare({"torch.mm": lambda: x @ w, "ours": lambda: fast(x)}, baseline="torch.mm").record(
            ctx
        )

:func:`compare` interleaves the functions round by round and reports medians with p20/p80 and
ratios of medians; on GPU it uses CUDA events. Peak memory uses the CUDA allocator's statistics on GPU and the peak
RSS of a fresh subprocess on CPU; :class:`LivePeak` counts the bytes of tensors alive at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = [
    "MODES",
    "BenchResult",
    "Case",
    "Comparison",
    "Context",
    "LivePeak",
    "Suite",
    "Timing",
    "compare",
    "environment",
    "git_state",
    "load_average",
    "load_json",
    "num_threads",
    "peak_live_bytes",
    "peak_memory_cuda",
    "peak_rss_subprocess",
    "pinned_provenance",
    "plot_bars",
    "plot_lines",
    "roofline",
    "single_thread",
    "time_fn",
    "write_json",
    "write_markdown",
]

Kind = Literal["speed", "quality"]
Mode = Literal["smoke", "quick", "full"]
#: The benchmark modes, smallest first: ``smoke`` (toy sizes, seconds; run by the workspace tests on
#: an empty checkpoint cache), ``quick`` (under 60 s per package on two CPU cores), ``full`` (the
#: documented reproduction).
MODES: tuple[str, ...] = ("smoke", "quick", "full")


# ----------------------------------------------------------------------------- environment


def git_state(cwd: str | Path | None = None) -> tuple[str, bool | None]:
    """``(commit, clean)`` of the repository holding ``cwd`` (default: this file).

    ``clean`` is False when tracked files have uncommitted changes, None when git is unavailable
    (then the commit is ``"unknown"``). Not cached: a results run can follow a commit in the same
    process.
    """
    where = Path(cwd) if cwd is not None else Path(__file__).parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=where,
        )
        commit = out.stdout.strip()
        if out.returncode != 0 or not commit:
            return "unknown", None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=where,
        ).stdout.strip()
        return commit, not dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


_GIT_CACHE: dict[str, Any] = {}


@contextlib.contextmanager
def pinned_provenance() -> Iterator[str]:
    """Stamp every result recorded in the block with the commit and tree state at its start.

    A run that writes into a tracked ``results/`` folder would otherwise make the tree look dirty
    to every result recorded after its first file was written.
    """
    commit, clean = git_state()
    stamp = commit + ("-dirty" if clean is False else "")
    previous = _GIT_CACHE.get("pinned")
    _GIT_CACHE["pinned"] = stamp
    try:
        yield stamp
    finally:
        _GIT_CACHE["pinned"] = previous


def _git_commit() -> str:
    if _GIT_CACHE.get("pinned") is not None:
        return _GIT_CACHE["pinned"]
    # Every BenchResult stamps the commit; re-ask git at most every few seconds, not per result.
    now = time.monotonic()
    if _GIT_CACHE.get("at", -1e9) < now - 5.0:
        commit, clean = git_state()
        _GIT_CACHE.update(at=now, value=commit + ("-dirty" if clean is False else ""))
    return _GIT_CACHE["value"]


@functools.cache
def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    desc = f"{cpu}, {os.cpu_count()} cores"
    if torch.cuda.is_available():
        desc += f", {torch.cuda.get_device_name()}"
    return desc


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "absent"


def load_average() -> float | None:
    """The 1-minute load average, or None where the OS does not report one."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def environment() -> dict[str, str]:
    """Machine, versions, git commit (``-dirty`` when tracked files changed) and date for every result."""
    avg = load_average()
    load = "n/a" if avg is None else f"{avg:.1f}"
    return {
        "machine": _machine(),
        "load": load,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "git_commit": _git_commit(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


# ----------------------------------------------------------------------------- records


@dataclasses.dataclass
class BenchResult:
    """One measured number, with its baseline from the same run when there is one.

    ``ratio`` is ``baseline_value / value`` for lower-is-better metrics (a speed-up, > 1 means we
    win) and ``value / baseline_value`` for higher-is-better ones.
    """

    suite: str
    case: str
    metric: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    lower_is_better: bool = True
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    machine: str = ""
    torch: str = ""
    triton: str = ""
    git_commit: str = ""
    date: str = ""
    load: str = ""

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline_value is not None and self.value not in (0, None):
            if self.lower_is_better:
                self.ratio = self.baseline_value / self.value
            elif self.baseline_value != 0:
                self.ratio = self.value / self.baseline_value
        if not self.machine:
            env = environment()
            self.machine, self.torch, self.triton = env["machine"], env["torch"], env["triton"]
            self.git_commit, self.date, self.load = env["git_commit"], env["date"], env["load"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """``case[k=v,...]/metric`` for tables."""
        extra = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.case}[{extra}]/{self.metric}" if extra else f"{self.case}/{self.metric}"


def write_json(results: Sequence[BenchResult], path: str | Path) -> Path:
    """Write results as a JSON list (one object per result)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.to_dict() for r in results], indent=2, default=str) + "\n")
    return path


def load_json(path: str | Path) -> list[BenchResult]:
    """Read results written by :func:`write_json`."""
    return [BenchResult(**d) for d in json.loads(Path(path).read_text())]


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if x == 0 or math.isnan(x) or math.isinf(x):
        return f"{x:g}"
    ax = abs(x)
    if ax >= 1e5 or ax < 1e-3:
        return f"{x:.3e}"
    return f"{x:.4g}"


def markdown_table(results: Sequence[BenchResult]) -> str:
    """Results as a markdown table: case, ours, baseline, ratio, unit."""
    lines = [
        "| suite | case | ours | baseline | baseline value | ratio | unit |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results:
        ratio = f"{r.ratio:.3g}×" if r.ratio is not None else ""
        lines.append(
            f"| {r.suite} | {r.label} | {_fmt(r.value)} | {r.baseline or ''} | "
            f"{_fmt(r.baseline_value)} | {ratio} | {r.unit} |"
        )
    return "\n".join(lines) + "\n"


def write_markdown(
    results: Sequence[BenchResult], path: str | Path, title: str | None = None
) -> Path:
    """Write results as a markdown page: a header with machine, versions, commit and date, then the table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = []
    if title:
        head.append(f"# {title}\n")
    if results:
        r = results[0]
        head.append(
            f"Measured {r.date} on {r.machine} (1-min load average {r.load or 'n/a'} at the first result); "
            f"torch {r.torch}, triton {r.triton}, commit {r.git_commit}.\n"
        )
        if any(str(x.git_commit).endswith("-dirty") for x in results):
            head.append(
                "**uncommitted changes**: these results were measured on a tree with uncommitted "
                "changes to tracked files; re-run on a clean tree before quoting them.\n"
            )
    path.write_text("\n".join(head) + "\n" + markdown_table(results))
    return path


# ----------------------------------------------------------------------------- plots


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    path: str | Path,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    errors: dict[str, Sequence[float]] | None = None,
) -> Path:
    """One line per series over a shared x axis (with optional symmetric error bars); saves a PNG."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, ys in series.items():
        if errors and name in errors:
            ax.errorbar(
                list(x), list(ys), yerr=list(errors[name]), marker="o", capsize=3, label=name
            )
        else:
            ax.plot(list(x), list(ys), marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_bars(
    labels: Sequence[str],
    series: dict[str, Sequence[float]],
    path: str | Path,
    ylabel: str = "",
    title: str = "",
    logy: bool = False,
) -> Path:
    """Grouped bars: one group per label, one bar per series; saves a PNG."""
    plt = _plt()
    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(labels) * n), 4), dpi=120)
    for i, (name, ys) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, list(ys), width=width, label=name)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- timing


@dataclasses.dataclass
class Timing:
    """Seconds per call: the median with the 20th and 80th percentiles over ``repeats`` calls."""

    median: float
    p20: float
    p80: float
    repeats: int
    device: str

    def __str__(self) -> str:
        return f"{self.median * 1e3:.3f} ms [p20 {self.p20 * 1e3:.3f}, p80 {self.p80 * 1e3:.3f}] x{self.repeats}"


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def time_fn(
    fn: Callable[[], Any],
    warmup: int = 2,
    repeats: int | None = None,
    min_time: float = 0.2,
    max_repeats: int = 100,
    device: str | torch.device | None = None,
) -> Timing:
    """Time ``fn()``: CUDA events on GPU, warm-up then repeated ``time.perf_counter`` on CPU.

    Args:
        fn: the call to time (no arguments).
        warmup: calls before timing starts (compilation, caches, autotuning).
        repeats: exact number of timed calls; by default, as many as fit in ``min_time`` seconds
            (at least 3, at most ``max_repeats``).
        min_time: target total timed duration when ``repeats`` is None.
        max_repeats: cap on the adaptive number of calls.
        device: ``"cuda"`` to use CUDA events; default: CUDA when available.

    Returns:
        A :class:`Timing` in seconds.
    """
    if warmup < 0:
        raise ValueError(f"warmup: expected >= 0, got {warmup}")
    if repeats is not None and repeats < 1:
        raise ValueError(f"repeats: expected >= 1, got {repeats}")
    dev = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    for _ in range(warmup):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()

    def one() -> float:
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    samples = [one()]
    if repeats is None:
        n = int(min(max_repeats, max(3, min_time / max(samples[0], 1e-9))))
    else:
        n = repeats
    samples += [one() for _ in range(n - 1)]
    return Timing(
        median=statistics.median(samples),
        p20=_quantile(samples, 0.2),
        p80=_quantile(samples, 0.8),
        repeats=len(samples),
        device=dev.type,
    )


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` intra-op torch threads, then restore the previous count.

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> with num_threads(1):
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_thread() -> contextlib.AbstractContextManager[None]:
    """``num_threads(1)``: batch-1 kernels and many-small-op loops timed without OpenMP spin-waits."""
    return num_threads(1)


@dataclasses.dataclass
class Comparison:
    """What :func:`compare` measured: per-function wall (and CPU) timings from interleaved rounds.

    ``ratios[name]`` is ``median(baseline) / median(name)``: > 1 means ``name`` is faster than the
    baseline. ``load_start``/``load_end`` are the 1-minute load averages around the measurement.
    """

    timings: dict[str, Timing]
    baseline: str | None
    ratios: dict[str, float]
    rounds: int
    load_start: float | None
    load_end: float | None
    cpu: dict[str, Timing] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> Timing:
        return self.timings[name]

    def __str__(self) -> str:
        lines = []
        for name, t in self.timings.items():
            ratio = f"  {self.ratios[name]:.3g}x vs {self.baseline}" if name in self.ratios else ""
            lines.append(f"{name}: {t}{ratio}")
        lines.append(f"load {self.load_start} -> {self.load_end}, {self.rounds} rounds")
        return "\n".join(lines)

    def record(self, ctx: Context, metric: str = "time", unit: str = "s", **params: Any) -> list:
        """Record every function's median in ``ctx``, each against the baseline of this comparison.

        The baseline itself is recorded without a ratio; p20/p80, the round count and the load
        averages go into the params so the table shows how noisy the machine was.
        """
        out = []
        base = self.timings.get(self.baseline) if self.baseline else None
        for name, t in self.timings.items():
            extra = dict(params)
            extra.update(
                impl=name,
                p20=float(f"{t.p20:.4g}"),
                p80=float(f"{t.p80:.4g}"),
                rounds=self.rounds,
                load=f"{self.load_start if self.load_start is None else round(self.load_start, 1)}"
                f"->{self.load_end if self.load_end is None else round(self.load_end, 1)}",
            )
            is_base = name == self.baseline
            out.append(
                ctx.record(
                    metric,
                    t.median,
                    unit,
                    baseline=None if is_base or base is None else self.baseline,
                    baseline_value=None if is_base or base is None else base.median,
                    **extra,
                )
            )
        return out


def compare(
    fns: dict[str, Callable[[], Any]],
    baseline: str | None = None,
    rounds: int | None = None,
    warmup: int = 1,
    min_time: float = 0.3,
    min_rounds: int = 5,
    max_rounds: int = 200,
    max_time: float | None = None,
    cpu_time: bool = False,
    device: str | torch.device | None = None,
) -> Comparison:
    """Time several functions side by side: warm-up, then interleaved rounds A, B, C, A, B, C, ...

    Interleaving spreads slow drifts of a shared machine (other processes, frequency changes)
    over every function alike, so the ratio of medians is far steadier than timing one function
    after the other. Quote the medians (or their ratio), never the best round.

    Args:
        fns: name -> zero-argument callable. Check their outputs equal before timing them.
        baseline: the name the ratios are taken against (default: the first entry).
        rounds: exact number of rounds; by default rounds continue until every function has had
            ``min_time`` seconds of timed calls (at least ``min_rounds``, at most ``max_rounds``).
        warmup: untimed calls of each function first (compilation, caches, autotuning).
        min_time: per-function timed duration for the adaptive round count.
        min_rounds: fewest rounds of the adaptive count.
        max_rounds: most rounds of the adaptive count.
        max_time: the adaptive count also stops (after ``min_rounds``) once any one function has
            had this many timed seconds (default ``20 * min_time``), so a fast function does not
            keep a slow one running for ``max_rounds`` rounds.
        cpu_time: also measure ``time.process_time`` per call (CPU only): wall time well above CPU
            time means the call waited (on threads, memory, other processes).
        device: ``"cuda"`` to time with CUDA events; default: CUDA when available.

    Returns:
        A :class:`Comparison`.

    Example:
        >>> import torch
        >>> a = torch.randn(64, 64)
        >>> c = compare(
        ...     {"mm": lambda: a @ a, "einsum": lambda: torch.einsum("ij,jk->ik", a, a)}, rounds=5
        ... )
        >>> sorted(c.timings), c.baseline, c.rounds
        (['einsum', 'mm'], 'mm', 5)
    """
    if not isinstance(fns, dict) or not fns:
        raise ValueError("fns: expected a non-empty dict of name -> zero-argument callable")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"fns[{name!r}]: expected a callable, got {type(fn).__name__}")
    baseline = next(iter(fns)) if baseline is None else baseline
    if baseline not in fns:
        raise ValueError(f"baseline: {baseline!r} is not one of {sorted(fns)}")
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds: expected >= 1, got {rounds}")
    if warmup < 0:
        raise ValueError(f"warmup: expected >= 0, got {warmup}")
    cap = 20 * min_time if max_time is None else max_time
    dev = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = dev.type == "cuda"
    load_start = load_average()
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    if cuda:
        torch.cuda.synchronize()

    wall: dict[str, list[float]] = {n: [] for n in fns}
    cpu: dict[str, list[float]] = {n: [] for n in fns}

    def one(name: str, fn: Callable[[], Any]) -> None:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            wall[name].append(start.elapsed_time(end) / 1e3)
            return
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        t1, c1 = time.perf_counter(), time.process_time()
        wall[name].append(t1 - t0)
        cpu[name].append(c1 - c0)

    done = 0
    while True:
        for name, fn in fns.items():
            one(name, fn)
        done += 1
        if rounds is not None:
            if done >= rounds:
                break
        elif done >= max_rounds or (
            done >= min_rounds
            and (
                all(sum(w) >= min_time for w in wall.values())
                or any(sum(w) >= cap for w in wall.values())
            )
        ):
            break

    def summary(xs: list[float]) -> Timing:
        return Timing(
            median=statistics.median(xs),
            p20=_quantile(xs, 0.2),
            p80=_quantile(xs, 0.8),
            repeats=len(xs),
            device=dev.type,
        )

    timings = {n: summary(w) for n, w in wall.items()}
    base = timings[baseline].median
    ratios = {n: base / t.median for n, t in timings.items() if n != baseline and t.median > 0}
    return Comparison(
        timings=timings,
        baseline=baseline,
        ratios=ratios,
        rounds=done,
        load_start=load_start,
        load_end=load_average(),
        cpu={n: summary(c) for n, c in cpu.items()} if cpu_time and not cuda else {},
    )


# ----------------------------------------------------------------------------- memory


def peak_memory_cuda(fn: Callable[[], Any], device: int | None = None) -> int:
    """Peak CUDA allocator bytes during ``fn()`` above what was allocated before it."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


class LivePeak(TorchDispatchMode):
    """Peak bytes of tensor storages allocated inside the mode and still alive (CPU-exact).

    Every new storage an aten op returns (forward, autograd backward, optimizer, module hooks) is
    counted until it is freed (a finalizer on the storage, whose Python object lives as long as
    the storage). Tensors that existed before (weights, optimizer state, inputs) are not counted,
    so ``peak`` is the extra memory the code needed at its worst moment: activations, saved
    tensors, gradients and transients. Views share their base's storage and count once. Works on
    any device (it counts bytes, not allocator blocks); on CUDA :func:`peak_memory_cuda` measures
    the allocator instead.

    Attributes:
        current: bytes of counted storages alive now.
        peak: the most ``current`` has been.

    Example:
        >>> import torch
        >>> with LivePeak() as mode:
        ...     a = torch.zeros(256)  # 1 KiB
        ...     b = torch.zeros(512)  # 2 KiB
        ...     del a
        >>> mode.peak, mode.current
        (3072, 2048)
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key, n = st.data_ptr(), st.nbytes()
                if n and key not in self.live:
                    self.live[key] = n
                    self.current += n
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(st, self._free, key)
        return out


def peak_live_bytes(fn: Callable[[], Any]) -> int:
    """Peak extra live tensor bytes while ``fn()`` runs (:class:`LivePeak`; tensors that exist
    before the call are not counted). Run a warm-up call first where state is created lazily
    (e.g. optimizer state), so that only the steady-state step is measured.

    Example:
        >>> import torch
        >>> x = torch.ones(1000)  # exists before: not counted
        >>> peak_live_bytes(lambda: (x * 2).sum())  # the product (4000 B) and the sum (4 B)
        4004
    """
    mode = LivePeak()
    with mode:
        fn()
    return mode.peak


_RSS_PROBE = r"""
import json, resource


def _hwm():
    # Linux: VmHWM is the peak RSS; writing 5 to clear_refs resets it to the current RSS, so the
    # peak of the measured code is not hidden by a higher peak during setup (e.g. imports).
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rss():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _hwm()


base = _rss()
{setup}
mid = _rss()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
{code}
peak = _hwm()
print("__RSS__" + json.dumps({{"base": base, "after_setup": mid, "peak": peak}}))
"""


def peak_rss_subprocess(
    code: str, setup: str = "import torch", timeout: float = 600
) -> dict[str, int]:
    """Peak resident memory of running ``code`` in a fresh Python process, in bytes.

    ``setup`` runs first (imports, inputs); ``code`` is what is measured. On Linux the peak RSS
    (``VmHWM``) is reset after ``setup`` through ``/proc/self/clear_refs``, so ``"delta"`` =
    ``peak − after_setup`` is the extra memory the code needed at its peak. Elsewhere the process
    peak (``ru_maxrss``) is used, which may include setup's own transient peak.

    Returns:
        ``{"base", "after_setup", "peak", "delta"}`` in bytes.
    """
    import textwrap

    script = _RSS_PROBE.format(setup=textwrap.dedent(setup), code=textwrap.dedent(code))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"peak_rss_subprocess: the measured code failed:\n{proc.stderr[-2000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("__RSS__"))
    out = json.loads(line[len("__RSS__") :])
    out["delta"] = out["peak"] - out["after_setup"]
    return out


# ----------------------------------------------------------------------------- roofline


def roofline(
    device: str | torch.device | None = None,
    matmul_size: int | None = None,
    copy_bytes: int | None = None,
    min_time: float = 1.0,
) -> dict[str, float]:
    """Measure this machine's own limits: fp32 matmul FLOP/s, copy bandwidth, on GPU bf16 FLOP/s.

    Bandwidth counts bytes read plus bytes written of a large ``Tensor.copy_``. Packages quote
    their kernels as a fraction of these numbers.

    Returns:
        ``{"fp32_flops": FLOP/s, "bandwidth": bytes/s, "bf16_flops": FLOP/s (GPU only),
        "matmul_size": n, "copy_bytes": bytes}``.
    """
    dev = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    gpu = dev.type == "cuda"
    n = matmul_size or (8192 if gpu else 2048)
    nbytes = copy_bytes or ((1 << 30) if gpu else (256 << 20))
    out: dict[str, float] = {"matmul_size": float(n), "copy_bytes": float(nbytes)}
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    c = torch.empty(n, n, device=dev)
    t = time_fn(
        lambda: torch.mm(a, b, out=c), warmup=2, min_time=min_time, max_repeats=50, device=dev
    )
    out["fp32_flops"] = 2 * n**3 / t.median
    if gpu:
        a16, b16 = a.bfloat16(), b.bfloat16()
        t = time_fn(lambda: torch.mm(a16, b16), warmup=3, min_time=min_time, device=dev)
        out["bf16_flops"] = 2 * n**3 / t.median
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), warmup=2, min_time=min_time, max_repeats=50, device=dev)
    out["bandwidth"] = 2 * nbytes / t.median
    return out


# ----------------------------------------------------------------------------- suites


@dataclasses.dataclass
class Context:
    """What a case receives: the mode, where to write files, and :meth:`record`."""

    suite: str
    case: str
    mode: Mode
    out_dir: Path
    results: list[BenchResult] = dataclasses.field(default_factory=list)
    log: Callable[[str], None] = print

    @property
    def smoke(self) -> bool:
        """Toy sizes: the case must finish in seconds and still record real, finite results."""
        return self.mode == "smoke"

    @property
    def quick(self) -> bool:
        """The quick sizes only (False in smoke mode: use :meth:`pick` to size a case)."""
        return self.mode == "quick"

    @property
    def full(self) -> bool:
        return self.mode == "full"

    def pick(self, smoke: Any, quick: Any, full: Any) -> Any:
        """The value for this mode: ``n = ctx.pick(smoke=64, quick=1024, full=4096)``."""
        return {"smoke": smoke, "quick": quick, "full": full}[self.mode]

    def record(
        self,
        metric: str,
        value: float,
        unit: str,
        baseline: str | None = None,
        baseline_value: float | None = None,
        lower_is_better: bool = True,
        **params: Any,
    ) -> BenchResult:
        """Record one number (and its same-run baseline); ``params`` describe the configuration."""
        r = BenchResult(
            suite=self.suite,
            case=self.case,
            metric=metric,
            value=float(value),
            unit=unit,
            baseline=baseline,
            baseline_value=None if baseline_value is None else float(baseline_value),
            lower_is_better=lower_is_better,
            params=params,
        )
        self.results.append(r)
        return r

    def path(self, name: str) -> Path:
        """A file path under the output directory for plots and extra artefacts of this case."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / name


@dataclasses.dataclass
class Case:
    """One benchmark case: a ``speed`` or ``quality`` measurement runnable in some modes."""

    name: str
    kind: Kind
    fn: Callable[[Context], Any]
    modes: tuple[str, ...] = MODES
    description: str = ""

    def run(
        self, suite: str, mode: Mode, out_dir: Path, log: Callable[[str], None] = print
    ) -> list[BenchResult]:
        ctx = Context(suite=suite, case=self.name, mode=mode, out_dir=Path(out_dir), log=log)
        returned = self.fn(ctx)
        if isinstance(returned, Iterable) and not isinstance(returned, (str, bytes)):
            for r in returned:
                if isinstance(r, BenchResult) and r not in ctx.results:
                    ctx.results.append(r)
        return ctx.results


@dataclasses.dataclass
class Suite:
    """A package's benchmark suite, registered under the ``neurips25.benchmarks`` entry-point group."""

    name: str
    paper: str
    url: str = ""
    cases: list[Case] = dataclasses.field(default_factory=list)

    def case(self, name: str, kind: Kind, modes: Sequence[str] = MODES, description: str = ""):
        """Decorator declaring a case: ``@SUITE.case("speed_fwd", kind="speed")``.

        Every case runs in every mode by default and sizes itself with ``ctx.pick(smoke=...,
        quick=..., full=...)``. The workspace tests run every case in ``smoke`` mode on an empty
        checkpoint cache, so a case that drops ``"smoke"`` from ``modes`` fails them.
        """
        if kind not in ("speed", "quality"):
            raise ValueError(f"kind: expected 'speed' or 'quality', got {kind!r}")
        bad = set(modes) - set(MODES)
        if bad:
            raise ValueError(f"modes: expected a subset of {MODES}, got {sorted(bad)}")
        if any(c.name == name for c in self.cases):
            raise ValueError(f"name: case {name!r} already declared in suite {self.name!r}")

        def wrap(fn: Callable[[Context], Any]) -> Callable[[Context], Any]:
            self.cases.append(
                Case(
                    name,
                    kind,
                    fn,
                    tuple(modes),
                    description or (fn.__doc__ or "").strip().split("\n")[0],
                )
            )
            return fn

        return wrap

    def cases_for(self, mode: Mode) -> list[Case]:
        return [c for c in self.cases if mode in c.modes]
