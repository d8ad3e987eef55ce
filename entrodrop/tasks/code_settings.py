"""How the code tasks run programs, and whether they may run any: what the config says
(``evaluation.lm_eval.sandbox``, ``evaluation.lm_eval.allow_code_execution``), set by the
evaluation before lm-eval runs (``use_sandbox``) and read by the tasks' filters, which lm-eval
calls with the responses and documents alone.

The settings live in this module, apart from the tasks: lm-eval loads a task's ``!function
code_tasks.<name>`` by executing ``code_tasks.py`` again from its path, a module of its own
whose globals are not the package's. Every such copy imports this module by its package name,
so the evaluation's settings reach each one.
"""

from dataclasses import dataclass, replace
from typing import Optional

from entrodrop.sandbox.code_runner import Limits


@dataclass(frozen=True)
class SandboxSettings:
    """How the code tasks run programs (``evaluation.lm_eval.sandbox``): each program's
    ``limits``, ``workers`` at once, and ``timeout_s`` for every task (None: each task's own,
    ``code_tasks.PROBLEM_TIMEOUT_S`` a HumanEval or MBPP problem, LiveCodeBench's 6 s a test); and
    whether they may run any (``allow_code``: ``evaluation.lm_eval.allow_code_execution``; without
    it every code task refuses, ``allowed``)."""

    limits: Limits = Limits()
    workers: int = 1
    timeout_s: Optional[float] = None
    allow_code: bool = False

    @classmethod
    def from_config(cls, lm_eval) -> "SandboxSettings":
        """From ``evaluation.lm_eval``: its ``sandbox`` group and ``allow_code_execution``
        (checked: ``entrodrop.config.schemas``)."""
        sandbox = lm_eval.sandbox
        return cls(Limits(sandbox=sandbox.layer, memory_bytes=sandbox.memory_mb << 20), sandbox.workers, sandbox.timeout_s,
                   bool(lm_eval.allow_code_execution))

    def for_task(self, own_timeout_s: float) -> Limits:
        return replace(self.limits, timeout_s=self.timeout_s or own_timeout_s)


_settings = SandboxSettings()


def use_sandbox(settings: SandboxSettings) -> None:
    global _settings
    _settings = settings


def sandbox_settings() -> SandboxSettings:
    return _settings


def allowed() -> None:
    """Refuse unless the run allowed code execution (``SandboxSettings.allow_code``, which the
    evaluation sets from the config before lm-eval runs: ``use_sandbox``)."""
    if not sandbox_settings().allow_code:
        raise RuntimeError("this task executes generated code: set evaluation.lm_eval.allow_code_execution")
