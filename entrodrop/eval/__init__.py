"""Evaluation: validation loss by entropy bucket (``validation``), lm-eval tasks through the
torchtune adapter (``adapter``, ``task_checks``), one evaluation point (``evaluator``), the
``evals.jsonl`` records and summary (``records``), scoring saved checkpoints (``offline``), and
the sandbox that runs model-written code (the ``sandbox`` package)."""
