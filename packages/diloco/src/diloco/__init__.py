"""Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws for DiLoCo (NeurIPS 2025)."""

__all__: list[str] = []
