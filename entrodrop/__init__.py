"""EntroDrop: entropy-guided token dropout for multi-epoch continual pre-training."""
