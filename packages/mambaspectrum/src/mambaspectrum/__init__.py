"""Mamba Modulation: On the Length Generalization of Mamba Models (NeurIPS 2025).

Training-free length extension of transformers Mamba/Mamba2 by per-layer scaling of the
spectrum of A (``A_log <- s * A_log``), the MambaExtend delta-scaling baseline and an A-linear
variant, SPSA calibration, and a chunked selective scan for long CPU forwards.
"""

from . import eval
from .calibrate import Calibration, calibrate_grad, calibrate_spsa, spsa
from .reference import mamba2_scan_ref, scaled_a_log, selective_scan_ref, state_bound
from .scaler import Scaler, patch_fast_forward, spectrum, state_norms, unpatch_fast_forward
from .scan import selective_scan, selective_scan_chunked

__all__ = [
    "Calibration",
    "Scaler",
    "calibrate_grad",
    "calibrate_spsa",
    "eval",
    "mamba2_scan_ref",
    "patch_fast_forward",
    "scaled_a_log",
    "selective_scan",
    "selective_scan_chunked",
    "selective_scan_ref",
    "spectrum",
    "spsa",
    "state_bound",
    "state_norms",
    "unpatch_fast_forward",
]
