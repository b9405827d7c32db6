"""Don't be lazy: CompleteP enables compute-efficient deep transformers (NeurIPS 2025)."""

__all__: list[str] = []
