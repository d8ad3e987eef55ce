"""Training: the output directory and resume (``run_dir``), one live run per output directory
(``run_lock``), when to evaluate (``cadence``), the ``midpoint: auto`` watch (``midpoint``),
activation checkpointing (``activations``) and FSDP2 sharding (``parallel``)."""
