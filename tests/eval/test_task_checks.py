"""lm-eval's task index at start-up (entrodrop.eval.task_checks.load_task_manager): the full index
once, then only the directories the configured tasks need, rebuilt whenever a YAML there or in
include_path changes. benchmarks/bench_startup.py times what it saves. Which tasks may run code,
and what allows them to."""

import ast
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.eval.task_checks import allow_code, check_tasks, load_task_manager, sandboxed, task_index, task_metrics
from entrodrop.tasks import code_settings, code_tasks

TASKS = ["humaneval_likelihood", "svamp"]


@pytest.mark.slow
def test_the_second_index_of_the_same_tasks_reads_only_their_directories(tmp_path):
    include = tmp_path / "tasks"
    shutil.copytree(REPO / "entrodrop" / "tasks", include, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    full = load_task_manager(TASKS, str(include), cache)
    assert len(full.task_index) > 10_000, "the first time: every task lm-eval ships"
    narrow = load_task_manager(TASKS, str(include), cache)
    assert len(narrow.task_index) < 200, "then only the directories the tasks are in"
    for name in TASKS:
        assert narrow.task_index[name].yaml_path.resolve() == full.task_index[name].yaml_path.resolve()
        assert task_metrics(narrow, name) == task_metrics(full, name)
    groups = {"code": ["humaneval_likelihood", "no_such_task"], "math": ["svamp"]}
    metrics = {"humaneval_likelihood": "logprob_per_char,none", "svamp": "nope"}
    assert check_tasks(groups, "code", narrow, False, metrics) == check_tasks(groups, "code", full, False, metrics)

    # A task YAML edited in include_path: the full index again, then the narrow one.
    yaml = include / "svamp.yaml"
    yaml.write_text(yaml.read_text() + "\n")
    os.utime(yaml, ns=(yaml.stat().st_atime_ns, yaml.stat().st_mtime_ns + 10**9))
    assert len(load_task_manager(TASKS, str(include), cache).task_index) > 10_000
    assert len(load_task_manager(TASKS, str(include), cache).task_index) < 200
    # A record of another shape (another version of this code wrote it): the full index, not a KeyError.
    (record,) = cache.glob("*.json")
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "identity"}))
    assert len(load_task_manager(TASKS, str(include), cache).task_index) > 10_000
    # Other tasks, or another include_path, are another entry.
    assert len(load_task_manager(["humaneval_likelihood"], str(include), cache).task_index) > 10_000


@pytest.mark.slow
def test_task_index_of_a_training_config_uses_the_cache(tmp_path):
    ev = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml").evaluation.lm_eval
    ev.include_path = str(REPO / "entrodrop" / "tasks")
    task_index(ev, tmp_path)
    assert "humaneval_likelihood" in task_index(ev, tmp_path).task_index
    assert len(task_index(ev, tmp_path).task_index) < 200
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_a_task_runs_in_the_sandbox_when_its_responses_go_through_one_of_the_tasks_sandbox_filters(tmp_path):
    """The tasks declare the filters that run programs in the sandbox (entrodrop.tasks.sandboxed);
    a task that scores with our pass_at_1 but runs its programs through another filter of the
    same name does not, and a path through a symbolic link to our tasks is ours."""
    tasks_dir = Path(code_tasks.__file__).parent
    (tmp_path / "link").symlink_to(tasks_dir)

    def task(filter_fn: str) -> dict:
        return {"task": "t", "unsafe_code": True, "process_results": f"{tasks_dir}/code_tasks.pass_at_1",
                "filter_list": [{"name": "sandbox", "filter": [{"function": "custom", "filter_fn": filter_fn}]}]}

    assert sandboxed(task(f"{tasks_dir}/code_tasks.humaneval_sandbox"))
    assert sandboxed(task(f"{tmp_path}/link/livecodebench.sandbox"))
    assert not sandboxed(task(f"{tmp_path}/code_tasks.humaneval_sandbox"))  # another module of that name
    assert not sandboxed(task(f"{tasks_dir}/code_tasks.pass_at_1"))  # ours, but it runs nothing
    assert sandboxed({"task": "t"}) and sandboxed({"group": "g", "unsafe_code": True})


def test_the_config_allows_code_through_the_sandbox_settings_and_no_module_reads_hugging_faces_variable(
        monkeypatch, code_task_settings):
    """allow_code hands allow_code_execution to the code tasks as a field of their settings; it sets
    HF_ALLOW_CODE_EVAL for Hugging Face's own code_eval, which reads it itself, and no module of the
    library reads it: a shell that exports it allows nothing of ours."""
    lm_eval = OmegaConf.load(REPO / "configs/tiny/qwen3_evaluate.yaml").evaluation.lm_eval
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    lm_eval.allow_code_execution = False
    allow_code(lm_eval)
    assert not code_settings.sandbox_settings().allow_code
    with pytest.raises(RuntimeError, match="allow_code_execution"):
        code_tasks.mbpp_sandbox([["x"]], [{}])
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL")  # restored after the test, whatever allow_code set
    lm_eval.allow_code_execution = True
    allow_code(lm_eval)
    assert code_settings.sandbox_settings().allow_code and os.environ["HF_ALLOW_CODE_EVAL"] == "1"

    reads = []
    for path in (REPO / "entrodrop").rglob("*.py"):
        tree = ast.parse(path.read_text())
        written = {id(node.slice) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
                   and isinstance(node.ctx, ast.Store)}  # os.environ["HF_ALLOW_CODE_EVAL"] = "1"
        reads += [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value == "HF_ALLOW_CODE_EVAL" and id(node) not in written]
    assert reads == []
