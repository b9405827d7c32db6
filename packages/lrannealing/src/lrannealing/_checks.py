"""Argument checks shared by the public functions (each names the argument it rejects)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def as_lrs(lrs: Any, name: str = "lrs") -> np.ndarray:
    """``lrs`` as a 1-D float64 array of finite, non-negative learning rates (a copy)."""
    if isinstance(lrs, (str, bytes)) or lrs is None:
        raise TypeError(f"{name}: expected a 1-D array of learning rates, got {type(lrs).__name__}")
    if hasattr(lrs, "detach"):  # a torch tensor
        lrs = lrs.detach().cpu().double().numpy()
    try:
        arr = np.array(lrs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a 1-D array of numbers ({exc})") from None
    if arr.ndim != 1 or arr.size < 1:
        raise ValueError(f"{name}: expected a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name}: expected finite learning rates, got {int((~np.isfinite(arr)).sum())} non-finite"
        )
    if np.any(arr < 0):
        i = int(np.argmax(arr < 0))
        raise ValueError(f"{name}: learning rates must be >= 0, got {arr[i]!r} at step {i}")
    return arr


def check_decay(decay: Any, name: str = "decay") -> float:
    """λ as a float in [0, 1)."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name}: expected a number in [0, 1), got {type(decay).__name__}")
    decay = float(decay)
    if not (math.isfinite(decay) and 0.0 <= decay < 1.0):
        raise ValueError(f"{name}: expected a number in [0, 1), got {decay!r}")
    return decay


def check_int(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def check_positive(value: Any, name: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    value = float(value)
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return value


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value
