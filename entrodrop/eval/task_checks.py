"""What a configured lm-eval task needs before any model loads: the metric its average reads, and
the packages its scoring code imports.

lm-eval imports a task's ``utils.py`` and reports its metrics only when the task runs, after the
model has loaded (an 8B model's weights, on every rank). Both are read here from the task's YAML
in lm-eval's index, with its includes merged, so a wrong name fails at start-up.
"""

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import Dict, List, Optional

from entrodrop.errors import raise_problems
from entrodrop.tasks.code_settings import SandboxSettings, use_sandbox
from entrodrop.tasks.sandboxed import TASK_NAMES, runs_in_sandbox

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


def runs_model_code(task_manager, spec, depth: int = 8) -> bool:
    """Whether lm-eval task or group ``spec`` (a name, or a group's inline member) runs a task
    marked ``unsafe_code``. lm-eval's index holds each YAML with its includes merged."""
    if isinstance(spec, str):
        entry = task_manager.task_index.get(spec)
        config = (entry.cfg if entry else None) or {}
    else:
        config = spec
    if config.get("unsafe_code"):
        return True
    if depth == 0 or not isinstance(config, dict):
        return False
    if "group" not in config:
        # A task. A group's inline member may name the registered task it adjusts.
        named = spec.get("task") if isinstance(spec, dict) else None
        return isinstance(named, str) and runs_model_code(task_manager, named, depth - 1)
    members = config.get("task", [])
    return any(runs_model_code(task_manager, m, depth - 1) for m in (members if isinstance(members, list) else [members]))


def sandboxed(config: Dict) -> bool:
    """Whether a task (an lm-eval config, includes merged) runs no code or runs it in the sandbox
    (``entrodrop.tasks.sandboxed``)."""
    return not config.get("unsafe_code") or "group" in config or runs_in_sandbox(config)


def check_tasks(task_groups: Dict[str, List[str]], target_group: str, task_manager,
                allow_code_execution: bool, metrics: Dict[str, str]) -> List[str]:
    """Every problem with the configured lm-eval tasks, as ``"key=value: why"`` lines, so a run
    fails at start-up rather than at its first evaluation: unknown names, tags, the target group,
    code execution, each task's metric (``check_metrics``) and the packages its scoring imports
    (``check_packages``)."""
    if not any(task_groups.values()):
        return []
    known = set(task_manager.all_tasks)
    problems = [f"evaluation.lm_eval.tasks.{group}: {name!r} is not an lm-eval task (nor in the include_path)"
                for group, names in task_groups.items() for name in names if name not in known]
    # A tag's tasks report under their own names, so its group average would find nothing.
    problems += [f"evaluation.lm_eval.tasks.{group}: {name!r} is an lm-eval tag; list its tasks instead"
                 for group, names in task_groups.items() for name in names
                 if name in known and task_manager.task_index[name].kind.name == "TAG"]
    if target_group not in task_groups:
        problems.append(f"evaluation.lm_eval.target_group={target_group!r} is not one of the groups {list(task_groups)}")
    unsafe = [name for names in task_groups.values() for name in names
              if name in known and runs_model_code(task_manager, name)]
    if unsafe and not allow_code_execution:
        problems.append(f"evaluation.lm_eval.allow_code_execution=False, but {unsafe} execute model-written code: "
                        "set it to True or remove them")
    # Code runs only in the project's sandbox (entrodrop.sandbox), which its own tasks use.
    outside = [name for name in unsafe if not all(sandboxed(e.cfg or {}) for e in members(task_manager, name))]
    if outside:
        problems.append(f"evaluation.lm_eval.tasks: {outside} run model-written code outside the sandbox (lm-eval's "
                        f"own runner forks the process that holds the model, unguarded): use {TASK_NAMES} instead")
    fine = {group: [t for t in tasks if t in known and task_manager.task_index[t].kind.name != "TAG"]
            for group, tasks in task_groups.items()}
    problems += check_metrics(fine, metrics, task_manager)
    return problems + check_packages(task_manager, [t for tasks in fine.values() for t in tasks])


def index_cache_dir() -> Path:
    """Where ``task_index`` keeps what it learnt of lm-eval's index: ``$XDG_CACHE_HOME/entrodrop``
    (``~/.cache/entrodrop``) ``/lm_eval_index``. Deleting it costs one full index, nothing else."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "entrodrop" / "lm_eval_index"


def needed_entries(index: Dict, names: List[str]) -> Dict:
    """The entries of lm-eval's ``index`` that tasks or groups ``names`` need: their own, and
    those of the tasks, groups and tags they hold, recursively (``members``, and a tag's tasks)."""
    found, todo = {}, list(names)
    while todo:
        name = todo.pop()
        if name in found or name not in index:
            continue
        entry = found[name] = index[name]
        config = entry.cfg or {}
        if entry.kind.name == "TAG":
            todo += sorted(entry.tags)
        listed = config.get("task", []) if "group" in config else []
        for member in listed if isinstance(listed, list) else [listed]:
            named = member if isinstance(member, str) else member.get("task") if isinstance(member, dict) else None
            todo += [named] if isinstance(named, str) else [n for n in named or [] if isinstance(n, str)]
    return found


def _stamps(dirs: List[str]) -> Dict[str, List[int]]:
    """Each task YAML under ``dirs``, with its modification time and size: what a cached index was read from."""
    return {str(p): [p.stat().st_mtime_ns, p.stat().st_size] for d in dirs for p in sorted(Path(d).glob("**/*.yaml"))}


def _outermost(dirs: List[Path]) -> List[str]:
    """``dirs`` in order without duplicates, or any inside another (lm-eval scans each recursively)."""
    kept: List[Path] = []
    for d in dict.fromkeys(dirs):
        if not any(d == k or k in d.parents for k in kept):
            kept = [k for k in kept if d not in k.parents] + [d]
    return [str(d) for d in kept]


def _identity(index: Dict, names) -> Dict[str, list]:
    """What must match between a full index and a narrow one: each entry's file and tags."""
    return {name: [str(Path(index[name].yaml_path).resolve()) if index[name].yaml_path else None, sorted(index[name].tags)]
            for name in sorted(names) if name in index}


def load_task_manager(names: List[str], include_path: Optional[str], cache_dir: Path):
    """lm-eval's ``TaskManager`` for tasks or groups ``names``, indexing only the directories
    their YAMLs are in.

    lm-eval's ``TaskManager()`` parses every task YAML it ships (about 14,000) and those of
    ``include_path``: 6-10 s at every start. The first time a set of names is asked for, that full
    index is built, and the directories of the entries the names need (``needed_entries``) are
    kept in ``cache_dir`` with the modification time and size of each YAML under them and under
    ``include_path``; later, ``TaskManager(include_path=those directories)`` indexes them alone
    in a fraction of a second. A changed, added or removed YAML there, another lm-eval version or
    an entry the narrow index resolves to another file than the full one builds the full index again.
    """
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    library = Path(lm_eval.tasks.__file__).parent
    includes = [str(Path(include_path).resolve())] if include_path else []
    key = {"lm_eval": version("lm_eval"), "library": str(library), "include_path": includes, "tasks": sorted(set(names))}
    path = cache_dir / f"{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}.json"
    try:
        cached = json.loads(path.read_text())
        dirs, identity = cached["dirs"], cached["identity"]
        fresh = cached["key"] == key and cached["stamps"] == _stamps(dirs + includes)
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or a record of another shape: the full index
        fresh = False
    if fresh:
        narrow = TaskManager(include_path=dirs or None, include_defaults=False)
        if _identity(narrow.task_index, identity) == identity:
            return narrow
    manager = TaskManager(include_path=include_path)
    needed = needed_entries(manager.task_index, names)
    files = [Path(e.yaml_path).resolve() for e in needed.values() if e.yaml_path]
    # lm-eval's own directories first, then include_path's: a later one overrides, as in TaskManager.
    dirs = _outermost([f.parent for f in files if library in f.parents] + [f.parent for f in files if library not in f.parents])
    record = {"key": key, "dirs": dirs, "identity": _identity(manager.task_index, needed),
              "stamps": _stamps(dirs + includes)}
    try:  # best effort: a cache that cannot be written costs the full index next time, nothing else
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:
        pass
    return manager


def task_index(lm_eval_cfg, cache_dir: Optional[Path] = None):
    """lm-eval's ``TaskManager`` once every configured task checks out (``check_tasks``; one
    ``ConfigError`` lists the problems), or None when no task is set. The index covers the
    configured tasks (``load_task_manager``: the full one, ~10 s, the first time only).
    ``lm_eval_cfg``: the config's ``evaluation.lm_eval``; ``cache_dir``: ``index_cache_dir()``."""
    ev = lm_eval_cfg
    task_groups = {group: list(tasks) for group, tasks in ev.tasks.items()}
    if not any(task_groups.values()):
        return None
    names = [t for tasks in task_groups.values() for t in tasks]
    task_manager = load_task_manager(names, ev.include_path, cache_dir or index_cache_dir())
    raise_problems(check_tasks(task_groups, ev.target_group, task_manager, ev.allow_code_execution, dict(ev.metrics)),
                   "lm-eval task")
    return task_manager


def allow_code(lm_eval_cfg) -> None:
    """Hand the code tasks what the config says (``entrodrop.tasks.code_settings.use_sandbox``):
    whether code may run (``allow_code_execution``) and how its programs run (``sandbox``).

    Where code may run, ``HF_ALLOW_CODE_EVAL=1`` is set as well, for Hugging Face's own
    ``code_eval`` metric alone, which reads it itself (lm-eval's ``humaneval`` and ``mbpp`` utils
    call it when they are imported); no module of ours reads it."""
    settings = SandboxSettings.from_config(lm_eval_cfg)
    if settings.allow_code:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    use_sandbox(settings)
