"""Mind the Gap: Removing the Discretization Gap in Differentiable Logic Gate Networks (NeurIPS 2025)."""

__all__: list[str] = []
