"""Pay Attention to Small Weights (NanoAdam) (NeurIPS 2025)."""

__all__: list[str] = []
