"""Ours = flash-linear-attention's ``chunk_gated_delta_rule`` (the peer), forward and backward.

fla 0.6.0 is a set of Triton kernels. On a GPU they run natively. On CPU they run under
``TRITON_INTERPRET=1`` (set by the root conftest) only with two test-only shims. Both are
applied by ``_interpreter_shims`` around the fla call and undone right after it. Neither one
touches fla's code or its math:

1. ``Autotuner.prune_configs`` keeps only the first config of each autotuned fla kernel.
   With several configs, ``Autotuner.run`` benchmarks them through
   ``driver.active.get_benchmarker()`` (``triton/runtime/autotuner.py:145``), and on a CPU
   machine that raises ``RuntimeError: 0 active drivers``. With one
   config left, ``run`` skips benchmarking, as a single-config autotune does. A config is a
   choice of block sizes and warps: it changes tiling, not results.
2. The interpreter's source rewriter (``interpreter.ASTTransformer``) gets a ``visit_For``.
   It rebinds the induction variable of every ``range``/``tl.range`` loop (not
   ``tl.static_range``) to a Triton scalar tensor at the top of the loop body, which is what
   the compiled ``scf.for`` hands the body. Without it the interpreter hands a Python int, and
   fla fails at ``fla/ops/common/chunk_delta_h.py:176`` (``i_t_int64 = i_t.to(tl.int64)``)
   with ``AttributeError: 'int' object has no attribute 'to'``. The cache of rewritten kernels
   (``InterpretedFunction.rewritten_fn``) is swapped for an empty dict while the shims are on.
   Our own kernels' rewrites are therefore never touched, and fla's shimmed rewrites are
   dropped afterwards.

Left behind: each fla autotuner keeps its ``cache`` entry for the shapes seen, which holds the
first config. The shims are not applied on a GPU, where fla's own autotuning runs.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import warnings

import pytest
import torch
from jetnemotron.ops import gated_delta_rule

from neurips25_core.device import triton_interpret, triton_usable
from neurips25_core.testing import assert_close, randn

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("fla") is None,
        reason="flash-linear-attention is not installed (jetnemotron's `peers` extra: "
        "uv sync --all-packages --extra peers)",
    ),
    pytest.mark.skipif(
        not triton_usable(), reason="fla's op is Triton: needs a GPU or TRITON_INTERPRET=1"
    ),
]

RTOL = 1e-5  # testing.FP32_RTOL: relative norm error, fp32 against fp32


def _visit_for(self, node):
    """``visit_For`` for the interpreter's ASTTransformer: the loop variable becomes a tensor."""
    node = self.generic_visit(node)
    func = node.iter.func if isinstance(node.iter, ast.Call) else None
    name = getattr(func, "attr", getattr(func, "id", None))
    # range(...) and tl.range(...); tl.static_range's variable stays a Python int, as compiled
    if name == "range" and isinstance(node.target, ast.Name):
        rebind = ast.Assign(
            targets=[ast.Name(id=node.target.id, ctx=ast.Store())],
            value=ast.Name(id=node.target.id, ctx=ast.Load()),
        )
        # visit_Assign wraps the value in interpreter_semantic.to_tensor(...)
        node.body.insert(0, self.visit_Assign(rebind))
    return node


@contextlib.contextmanager
def _interpreter_shims():
    if not triton_interpret():
        yield
        return
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter

    prune = autotuner.Autotuner.prune_configs

    def first_config(self, *args, **kwargs):
        return prune(self, *args, **kwargs)[:1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(autotuner.Autotuner, "prune_configs", first_config)
        mp.setattr(interpreter.ASTTransformer, "visit_For", _visit_for, raising=False)
        mp.setattr(interpreter.InterpretedFunction, "rewritten_fn", {})
        yield


@pytest.fixture(scope="module")
def fla_chunk_gated_delta_rule():
    """fla's op, called under the interpreter shims (forward and backward)."""
    with warnings.catch_warnings():
        # fla warns at import that Triton has no GPU here and it "rolls back to CPU".
        warnings.filterwarnings("ignore", message="Triton is not supported on current platform")
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def run(inputs, upstream, **kwargs):
        with _interpreter_shims():
            o, s = chunk_gated_delta_rule(*inputs[:5], initial_state=inputs[5], **kwargs)
            outs = [o] if s is None else [o, s]
            diff = [x for x in inputs if x is not None]
            grads = torch.autograd.grad(outs, diff, upstream[: len(outs)])
        return [t.detach() for t in outs], grads

    return run


def _inputs(B, T, H, dk, dv, with_state, device):
    xs = [
        randn(B, T, H, dk, seed=1, device=device),
        randn(B, T, H, dk, seed=2, device=device),
        randn(B, T, H, dv, seed=3, device=device),
        -randn(B, T, H, seed=4, device=device).abs() * 0.3,  # log decay g <= 0
        torch.sigmoid(randn(B, T, H, seed=5, device=device)),
        randn(B, H, dk, dv, seed=6, scale=0.5, device=device) if with_state else None,
    ]
    return [None if x is None else x.requires_grad_(True) for x in xs]


@pytest.mark.parametrize(
    ("B", "T", "H", "dk", "dv", "with_state", "final", "scale"),
    [
        # odd T < 64, H 3, d_k != d_v, both states: the default run (~5 s CPU with fla's import)
        (1, 37, 3, 6, 10, True, True, None),
        # B 2, H 1, no state in or out
        pytest.param(2, 21, 1, 8, 5, False, False, None, marks=pytest.mark.slow),
        # two fla chunks (64 ∤ T), explicit scale
        pytest.param(1, 67, 1, 7, 12, False, True, 0.3, marks=pytest.mark.slow),
        # initial state, no final state
        pytest.param(1, 9, 3, 16, 8, True, False, None, marks=pytest.mark.slow),
    ],
)
def test_gated_delta_rule_equals_fla_chunk_gated_delta_rule(
    fla_chunk_gated_delta_rule, B, T, H, dk, dv, with_state, final, scale
):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs = _inputs(B, T, H, dk, dv, with_state, device)
    upstream = [
        randn(B, T, H, dv, seed=7, device=device),
        randn(B, H, dk, dv, seed=8, device=device),
    ]
    names = ["q", "k", "v", "g", "beta", "initial_state"]
    diff_names = [n for n, x in zip(names, inputs) if x is not None]
    # Conventions shared with fla: [B, T, H, d] layout, state [B, H, d_k, d_v] (fla's default
    # state_v_first=False), g a natural-log decay, beta used as given, scale d_k^-1/2 by default,
    # q/k unit-normalised with eps 1e-6 inside the square root (use_qk_l2norm_in_kernel).
    fla_outs, fla_grads = fla_chunk_gated_delta_rule(
        inputs,
        upstream,
        scale=scale,
        output_final_state=final,
        use_qk_l2norm_in_kernel=True,
    )
    assert len(fla_outs) == (2 if final else 1)
    if triton_interpret():  # the shims are undone once fla's call returns
        import triton.runtime.interpreter as interpreter

        assert "visit_For" not in vars(interpreter.ASTTransformer)
        assert "rewritten_fn" in vars(interpreter.InterpretedFunction)
    for backend, chunk_size in (("reference", 64), ("torch", 64), ("triton", 16)):
        o, s = gated_delta_rule(
            *inputs[:5],
            scale=scale,
            initial_state=inputs[5],
            output_final_state=final,
            use_qk_l2norm=True,
            chunk_size=chunk_size,
            backend=backend,
        )
        outs = [o] if s is None else [o, s]
        assert len(outs) == len(fla_outs), f"{backend}: final state returned or not as fla"
        for i, (ours, theirs) in enumerate(zip(outs, fla_outs)):
            assert_close(ours, theirs, rtol=RTOL, name=f"{backend} output {i} vs fla")
        grads = torch.autograd.grad(
            outs, [x for x in inputs if x is not None], upstream[: len(outs)]
        )
        for name, ours, theirs in zip(diff_names, grads, fla_grads):
            assert_close(ours, theirs, rtol=RTOL, name=f"{backend} grad {name} vs fla")
