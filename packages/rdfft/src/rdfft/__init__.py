"""Memory-Efficient Training with In-Place FFT Implementation (rdFFT) (NeurIPS 2025)."""

__all__: list[str] = []
