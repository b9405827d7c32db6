"""Bad input raises a clear error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from multibitq.ops import check_bits, correct_weight_bias, quantize_activation, quantize_weight


@pytest.mark.parametrize("bits", [0, 9, 16, 33, -1])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        quantize_weight(torch.ones(2, 2), bits)
    with pytest.raises(ValueError, match="bits: expected an int in 1-8 or 32"):
        quantize_activation(torch.ones(2, 2), bits)


@pytest.mark.parametrize("bits", [2.0, "4", True, None])
def test_bits_of_the_wrong_type(bits):
    with pytest.raises(TypeError, match="bits: expected an int"):
        quantize_weight(torch.ones(2, 2), bits)


def test_numpy_int_bits_are_accepted():
    assert check_bits(np.int64(4)) == 4


def test_integer_tensors_are_refused():
    with pytest.raises(TypeError, match="w: expected a floating-point tensor"):
        quantize_weight(torch.ones(2, 2, dtype=torch.long), 2)
    with pytest.raises(TypeError, match=r"x: expected a torch\.Tensor"):
        quantize_activation([1.0], 2)


def test_correction_bad_shapes_and_options():
    w = torch.randn(3, 4)
    with pytest.raises(ValueError, match="w_ref: expected the shape of w_q"):
        correct_weight_bias(w, torch.randn(3, 5))
    with pytest.raises(ValueError, match="w_q: expected a 2-D"):
        correct_weight_bias(torch.randn(3, 4, 2), torch.randn(3, 4, 2))
    with pytest.raises(ValueError, match="w_q: expected a 2-D"):
        correct_weight_bias(torch.randn(5), torch.randn(5))
    with pytest.raises(TypeError, match="w_ref: expected dtype"):
        correct_weight_bias(w, w.double())
    with pytest.raises(ValueError, match="granularity"):
        correct_weight_bias(w, w.clone(), granularity="row")
    with pytest.raises(ValueError, match="mode"):
        correct_weight_bias(w, w.clone(), mode="var")
    with pytest.raises(TypeError, match="stats_grad"):
        correct_weight_bias(w, w.clone(), stats_grad=1)
