"""Training: the output directory and resume (``run_dir``), when to evaluate (``cadence``), the
``midpoint: auto`` watch (``midpoint``), activation checkpointing (``activations``) and FSDP2
sharding (``parallel``)."""
