"""lm-eval's task index at start-up (entrodrop.eval.task_checks.load_task_manager): the full index
once, then only the directories the configured tasks need, rebuilt whenever a YAML there or in
include_path changes. benchmarks/bench_startup.py times what it saves."""

import json
import os
import shutil

import pytest
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.eval.task_checks import check_tasks, load_task_manager, task_index, task_metrics

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
