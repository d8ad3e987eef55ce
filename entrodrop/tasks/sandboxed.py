"""Which of the project's lm-eval tasks run model-written code: those whose responses go through
one of ``SANDBOX_FILTERS``, which run every program in the sandbox (``entrodrop.sandbox``). The
checks before a run (``entrodrop.eval.task_checks``) read this, and refuse any other task that
runs code."""

import inspect
import os
from typing import Dict

from entrodrop.tasks import code_tasks, livecodebench

SANDBOX_FILTERS = (code_tasks.humaneval_sandbox, code_tasks.mbpp_sandbox, livecodebench.sandbox)
# What to run instead of lm-eval's own code tasks, named in the checks' message.
TASK_NAMES = "humaneval_sandbox, mbpp_sandbox, livecodebench_v1 (or humaneval_pass1 offline)"


def yaml_name(function) -> str:
    """``function`` as lm-eval's index writes a YAML's ``!function <module>.<name>`` beside its
    module: the module's path without ``.py``, a dot, the name (symbolic links resolved)."""
    return f"{os.path.splitext(os.path.realpath(inspect.getsourcefile(function)))[0]}.{function.__name__}"


def runs_in_sandbox(config: Dict) -> bool:
    """Whether a task (an lm-eval config, includes merged) filters its responses through one of
    ``SANDBOX_FILTERS``."""
    ours = {yaml_name(f) for f in SANDBOX_FILTERS}
    steps = [step for pipeline in config.get("filter_list") or [] if isinstance(pipeline, dict)
             for step in pipeline.get("filter") or [] if isinstance(step, dict)]
    return any(isinstance(step.get("filter_fn"), str) and os.path.realpath(step["filter_fn"]) in ours for step in steps)
