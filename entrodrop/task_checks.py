"""What a configured lm-eval task needs before any model loads: the metric its average reads, and
the packages its scoring code imports.

lm-eval imports a task's ``utils.py`` and reports its metrics only when the task runs, after the
model has loaded (an 8B model's weights, on every rank). Both are read here from the task's YAML
in lm-eval's index, with its includes merged, so a wrong name fails at start-up.
"""

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import Dict, List, Optional

# lm-eval's metrics by output type, when a task's YAML lists none (lm-eval's own defaults).
DEFAULT_METRICS = {
    "loglikelihood": ["perplexity", "acc"],
    "loglikelihood_rolling": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
    "multiple_choice": ["acc", "acc_norm"],
    "generate_until": ["exact_match"],
}

BENCHMARKS_EXTRA = "pip install -e '.[benchmarks]'"
# lm-eval task directory -> (module, the version it must start with, or None) its scoring imports.
# minerva_math asserts antlr4's runtime is 4.11 (sympy's LaTeX parser was generated with it).
NEEDS = {
    "minerva_math": [("sympy", None), ("math_verify", None), ("antlr4", "4.11")],
    "ifeval": [("langdetect", None), ("immutabledict", None), ("nltk", None)],
}
DISTRIBUTIONS = {"antlr4": "antlr4-python3-runtime"}  # module -> the package that installs it


def metric_name(metric) -> str:
    """The result name of a ``metric_list`` entry's ``metric``: a name, or a function (its YAML
    path, ``.../utils.pass_at_1``) reported under its own name.

    Example:
        >>> metric_name("acc"), metric_name("/lm_eval/tasks/mbpp/utils.pass_at_1")
        ('acc', 'pass_at_1')
    """
    return str(metric).rsplit("/", 1)[-1].rsplit(".", 1)[-1] if "/" in str(metric) else str(metric)


def task_metrics(task_manager, name: str) -> List[str]:
    """The ``metric,filter`` keys lm-eval reports for task or group ``name``, from its YAML: a
    task's metrics under each of its filters (``none`` without one), a group's aggregate metrics."""
    config = task_manager.task_index[name].cfg or {}
    if "group" in config:
        return [f"{m},{f}" for entry in config.get("aggregate_metric_list") or []
                for m in [metric_name(entry["metric"])]
                for f in ([entry.get("filter_list", "none")] if isinstance(entry.get("filter_list", "none"), str)
                          else entry["filter_list"])]
    entries = config.get("metric_list") or [{"metric": m} for m in DEFAULT_METRICS.get(config.get("output_type"), [])]
    names = []
    for entry in entries:
        names.append(metric_name(entry["metric"]))
        # A function given k returns pass@k for each (lm-eval's humaneval).
        names += [f"pass@{k}" for k in (entry.get("k") or []) if "/" in str(entry["metric"])]
    filters = [f["name"] for f in config.get("filter_list") or []] or ["none"]
    return [f"{m},{f}" for m in names for f in filters]


def check_metrics(task_groups: Dict[str, List[str]], metrics: Dict[str, str], task_manager) -> List[str]:
    """A problem for each task without an entry in ``evaluation.lm_eval.metrics`` or with a metric
    its result lacks, naming the metrics it has."""
    problems = []
    for name in dict.fromkeys(t for tasks in task_groups.values() for t in tasks):
        has = task_metrics(task_manager, name)
        if name not in metrics:
            problems.append(f"evaluation.lm_eval.metrics: no metric for {name!r}, which reports {has}: add "
                            f"`{name}: \"<one of them>\"`")
        elif metrics[name] not in has:
            problems.append(f"evaluation.lm_eval.metrics.{name}={metrics[name]!r}: {name} reports {has}")
    return problems


def installed_version(module: str) -> Optional[str]:
    """The installed version of what provides ``module``, or None when it cannot be imported."""
    if find_spec(module) is None:
        return None
    try:
        return version(DISTRIBUTIONS.get(module, module))
    except PackageNotFoundError:
        return ""


def check_packages(task_manager, names: List[str]) -> List[str]:
    """A problem for each configured task (or member of a configured group) whose scoring code
    imports a package that is missing or of the wrong version, with the install command."""
    problems = []
    for name in names:
        missing = []
        for directory in sorted({Path(e.yaml_path).parent.name for e in members(task_manager, name) if e.yaml_path}):
            for module, wanted in NEEDS.get(directory, []):
                have = installed_version(module)
                if have is None or (wanted and not have.startswith(wanted)):
                    missing.append(f"{DISTRIBUTIONS.get(module, module)}{' ' + wanted + '.*' if wanted else ''} "
                                   f"({'not installed' if have is None else f'version {have} is installed'})")
        if missing:
            problems.append(f"evaluation.lm_eval.tasks: {name!r} needs {', '.join(missing)}: {BENCHMARKS_EXTRA}")
    return problems


def members(task_manager, name: str, depth: int = 8) -> list:
    """The index entries of task or group ``name`` and of the registered tasks and groups it holds."""
    entry = task_manager.task_index.get(name)
    if entry is None:
        return []
    found = [entry]
    config = entry.cfg or {}
    if depth and "group" in config:
        listed = config.get("task", [])
        for member in listed if isinstance(listed, list) else [listed]:
            named = member if isinstance(member, str) else member.get("task") if isinstance(member, dict) else None
            if isinstance(named, str):
                found += members(task_manager, named, depth - 1)
    return found
