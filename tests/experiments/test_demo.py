"""The demo (entrodrop/experiments/demo.py) without running it: which version it picks, how its stages resume, the runs
of each version, the held-out target task they are scored on, and the tables 3 and 4 the GPU
report writes. (The CPU demo itself runs in `make demo`; the GPU version needs a GPU.)"""

import json
import subprocess
import sys

import lm_eval
import pytest
import yaml
from conftest import REPO, columns_of, fake_run
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager
from omegaconf import OmegaConf

from entrodrop.analysis.run_figures import read_run
from entrodrop.experiments import demo, premise

TASKS = REPO / "entrodrop" / "tasks"


def test_the_gpu_version_runs_where_a_gpu_is_unless_device_cpu_says_otherwise():
    assert demo.choose_device("", cuda_available=True) == "cuda"
    assert demo.choose_device("", cuda_available=False) == "cpu"
    assert demo.choose_device("cpu", cuda_available=True) == "cpu"
    with pytest.raises(SystemExit, match="DEVICE=cuda, but torch sees no CUDA GPU"):
        demo.choose_device("cuda", cuda_available=False)
    with pytest.raises(SystemExit, match="DEVICE='gpu': must be cpu or cuda"):
        demo.choose_device("gpu", cuda_available=True)


def test_stages_resume_where_a_killed_demo_stopped(tmp_path, capsys):
    out, ran = tmp_path / "demo", []

    def stage(name, fail=False, folder=out):
        def run():
            (folder / name).mkdir(parents=True)
            (folder / name / "part").write_text("half" if fail else "whole")
            ran.append(name)
            if fail:
                raise SystemExit(f"{name} killed")
        return run

    stages = [("one", stage("one"), [out / "one"]), ("two", stage("two", fail=True), [out / "two"]),
              ("three", stage("three"), [out / "three"])]
    with pytest.raises(SystemExit, match="two killed"):
        demo.run_stages(stages, out, resume=False)
    assert ran == ["one", "two"]
    # Resumed: stage one is done and skipped; stage two starts over from nothing, then three runs.
    stages[1] = ("two", stage("two"), [out / "two"])
    demo.run_stages(stages, out, resume=True)
    assert ran == ["one", "two", "two", "three"]
    assert (out / "two" / "part").read_text() == "whole"
    assert "[1/3] one: done before, skipped" in capsys.readouterr().out
    demo.run_stages(stages, out, resume=True)  # all done: nothing runs
    assert ran == ["one", "two", "two", "three"]
    # Without RESUME, an earlier call's results stop it before anything runs, and nothing is deleted.
    (out / "stray").write_text("x")
    (out / ".runs").mkdir()
    (out / ".runs" / "baseline.done").write_text("")
    with pytest.raises(SystemExit) as stopped:
        demo.run_stages(stages, out, resume=False, command="make reproduce")
    assert str(stopped.value) == (
        f"make reproduce stopped before anything ran: {out} holds an earlier call's results (3 finished stages, "
        f"1 finished run), which it never deletes. RESUME=1 make reproduce continues them; to start afresh, move or "
        f"delete {out} first")
    assert ran == ["one", "two", "two", "three"] and (out / "stray").read_text() == "x"
    assert (out / "one" / "part").read_text() == "whole"
    # An empty folder, or none, is a fresh start.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    demo.run_stages([("one", stage("one", folder=fresh), [fresh / "one"])], fresh, resume=False)
    assert ran[-1] == "one" and (fresh / ".stages" / "01.done").read_text() == "one"
    assert (fresh / "one" / "part").read_text() == "whole"


LIVE_CALL = """
import sys, time
from pathlib import Path
from entrodrop.experiments import demo

def stage():
    (Path(sys.argv[1]) / "run").mkdir()
    (Path(sys.argv[1]) / "run" / "part").write_text("half")
    print("running", flush=True)
    time.sleep(120)

demo.run_stages([("stage", stage, [Path(sys.argv[1]) / "run"])], Path(sys.argv[1]), resume=True)
"""


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_call_into_a_folder_a_live_call_writes_stops_before_anything_runs(tmp_path, resume):
    # Resumed, the second would remove what the first writes now (a stage not done starts over from nothing).
    out = tmp_path / "demo"
    first = subprocess.Popen([sys.executable, "-c", LIVE_CALL, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().startswith("[1/1] stage") and first.stdout.readline() == "running\n"
        with pytest.raises(SystemExit) as stopped:
            demo.run_stages([("stage", lambda: None, [out / "run"])], out, resume=resume, command="make demo")
        assert str(stopped.value).startswith(f"make demo stopped before anything ran: another call writes into {out} "
                                             f"now (PID {first.pid} on host ")
        assert str(stopped.value).endswith("); wait for it to end, or stop it")
        assert (out / "run" / "part").read_text() == "half"
    finally:
        first.kill()
        first.communicate()


def test_ctrl_c_in_an_experiment_ends_in_one_line_that_says_how_to_continue():
    with pytest.raises(SystemExit, match=r"^make reproduce REGIME=premise interrupted: RESUME=1 make reproduce "
                                         r"REGIME=premise continues from the stages and runs it finished"):
        with demo.continue_hint("make reproduce REGIME=premise"):
            raise KeyboardInterrupt


def test_the_gpu_runs_share_the_baselines_compute_and_differ_only_in_their_switch():
    configs = {name: OmegaConf.load(REPO / demo.GPU_CONFIGS / f"{name}.yaml") for name in ("cpt_baseline", "cpt_entrodrop")}
    for name, config, overrides in demo.GPU_RUNS:
        cfg = configs[config]
        assert (cfg.global_batch_size, cfg.data.seq_len, cfg.device) == (32, 1024, "cuda"), name
        keys = {o.split("=")[0] for o in overrides}
        assert keys <= {"seed", "token_dropout.midpoint", "token_dropout.gamma_max", "token_dropout.targeting",
                        "token_dropout.signal", "neftune_alpha", "hidden_dropout", "optimizer.weight_decay"}, name
    assert configs["cpt_baseline"].token_dropout.schedule == "none"
    assert configs["cpt_entrodrop"].token_dropout.gamma_max == 0.1
    # signal: loss at EntroDrop's midpoint, its one difference from the entrodrop run
    runs = {name: overrides for name, _, overrides in demo.GPU_RUNS}
    assert runs["entrodrop_loss"] == runs["entrodrop"] + ["token_dropout.signal=loss"]
    # the steps of the budget: 448 of 32 x 1,024 tokens, the pre-trained base's last step named in the configs
    assert demo.GPU_CPT_TOKENS == 448 * 32 * 1024 and demo.GPU_PRETRAIN_TOKENS == 1024 * 32 * 1024
    assert configs["cpt_entrodrop"].checkpointer.checkpoint_dir.endswith("step_1024")


def test_the_tables_pair_each_setting_with_the_baseline_by_seed_and_check_the_regime_of_each_baseline_seed(tmp_path):
    runs = {name: read_run(fake_run(tmp_path, name, losses, groups=("target",))) for name, losses in [
        ("baseline", [2.0, 1.60, 1.7]), ("baseline_seed1", [2.0, 1.62, 1.7]),
        ("entrodrop", [2.0, 1.55, 1.6]), ("entrodrop_seed1", [2.0, 1.56, 1.6]), ("gamma_max_0.4", [2.0, 1.9, 1.4])]}
    text = demo.seed_tables(runs, {"Table 4": {"baseline": ["baseline", "baseline_seed1"],
                                               "gamma_max 0.1": ["entrodrop", "entrodrop_seed1"]},
                                   "Table 3": {"baseline": ["baseline", "baseline_seed1"],
                                               "gamma_max 0.4": ["gamma_max_0.4"]}}, "target")
    assert text.startswith("Table 4\n\n| setting | seeds |")
    # paired by seed: -0.05 and -0.06, whose t-interval over two seeds is wide
    assert "| gamma_max 0.1 | 2 | 2.00 [2.00, 2.00] | +0.00 [+0.00, +0.00] | 1.5550 [1.5500, 1.5600] " \
           "| -0.0550 [-0.1185, +0.0085] |" in text
    # one seed (seed 0, the first run): one pair, no interval
    assert "| gamma_max 0.4 | 1 | 3.00 | +1.00 (1 seed) | 1.4000 | -0.2000 (1 seed) |" in text
    assert "paired by seed" in text and "95% t-interval" in text
    assert "| criterion | baseline | baseline_seed1 |" in text  # the regime of each baseline seed


def test_the_gpu_runs_are_stages_of_at_most_gpu_parallel_runs_so_a_killed_call_loses_one_group():
    stages = demo.gpu_stages()
    titles = [title for title, _, _ in stages]
    groups = [(title, outputs) for title, _, outputs in stages if title.startswith("runs at the same compute")]
    assert len(groups) == -(-len(demo.GPU_RUNS) // demo.GPU_PARALLEL)  # 12 runs, 4 at a time: 3 stages
    assert all(len(outputs) <= demo.GPU_PARALLEL for _, outputs in groups)
    assert [p.name for _, outputs in groups for p in outputs] == [name for name, _, _ in demo.GPU_RUNS]
    assert len(set(titles)) == len(titles)  # a stage's mark names it: no two alike
    assert titles.index(groups[0][0]) > titles.index(next(t for t in titles if t.startswith("baseline")))
    assert titles[-1].startswith("report")


def test_the_cpu_runs_come_in_groups_after_the_base_each_group_after_the_baseline_it_reads():
    stages = demo.cpu_stages()
    titles = [title for title, _, _ in stages]
    assert len(set(titles)) == len(titles) and titles[-1] == "report"
    # the stages make reproduce shares come first
    assert [title for title, _, _ in demo.data_and_base_stages()] == titles[:6]
    groups = [paths for title, _, paths in stages if title.startswith("runs at the same compute")]
    assert [[p.name for p in paths] for paths in groups] == [["baseline", "entrodrop_auto"], ["entrodrop", "entrodrop_loss"]]
    # a run that reads the baseline's midpoint is never in the baseline's group
    needs_midpoint = {name for name, _, overrides in demo.CPU_RUNS if any("{midpoint}" in o for o in overrides)}
    assert not needs_midpoint & {p.name for p in groups[0]}
    runs = {name: (config, overrides) for name, config, overrides in demo.CPU_RUNS}
    # signal: loss is EntroDrop's run with one switch
    assert runs["entrodrop_loss"] == ("cpt_entrodrop", runs["entrodrop"][1] + ["token_dropout.signal=loss"])
    assert sorted(n for names in demo.CPU_SETTINGS.values() for n in names) == sorted(runs)
    # one budget: the base's last step is what the configs name; both runs at the same compute
    base = OmegaConf.load(REPO / demo.CONFIGS / "pretrain.yaml")
    steps = base.total_tokens // (base.global_batch_size * base.data.seq_len)
    for config in ("cpt_baseline", "cpt_entrodrop", "precompute_entropy"):
        cfg = OmegaConf.load(REPO / demo.CONFIGS / f"{config}.yaml")
        assert cfg.checkpointer.checkpoint_dir == f"outputs/demo/pretrain/checkpoints/step_{steps}", config
        assert cfg.model == base.model, config
    cpt = [OmegaConf.load(REPO / demo.CONFIGS / f"{c}.yaml") for c in ("cpt_baseline", "cpt_entrodrop")]
    assert len({(c.total_tokens, c.global_batch_size, c.optimizer.lr, c.data.target_ratio) for c in cpt}) == 1


@pytest.mark.slow
def test_the_target_is_blocks_of_addition_cases_half_held_out_and_the_base_never_sees_addition(tmp_path):
    demo.build_corpora(tmp_path)
    read = lambda name: [json.loads(line)["text"] for line in (tmp_path / "corpora" / f"{name}.jsonl").open()]  # noqa: E731
    target, held_out, pretrain = read("target"), read("target_val"), read("pretrain_decimal")
    assert len(target) == len(held_out) == demo.TARGET_BLOCKS // 2
    # at most BLOCK_CHARS, unless a single test case is longer
    assert all(len(block) <= demo.BLOCK_CHARS or "\n" not in block for block in target + held_out + pretrain)
    assert not set(target) & set(held_out)
    cases = lambda blocks: {line.split()[0] for b in blocks for line in b.splitlines() if " -> " in line}  # noqa: E731
    assert not cases(target) & cases(held_out)  # no test case on both sides of the split
    assert all(case.startswith("addx") for case in cases(target) | cases(held_out))
    operations = {line.split()[1] for b in pretrain for line in b.splitlines() if " -> " in line}
    assert "add" not in operations and "subtract" not in operations and {"multiply", "divide"} <= operations


    # The premise regime's corpora: the same cases as doctests, 64 blocks, the same split and the same exclusions.
    premise_out = tmp_path / "premise"
    demo.build_corpora(premise_out, premise.doctest_blocks, premise.TARGET_BLOCKS)
    read = lambda name: [json.loads(line)["text"] for line in (premise_out / "corpora" / f"{name}.jsonl").open()]  # noqa: E731
    target, held_out, pretrain = read("target"), read("target_val"), read("pretrain_decimal")
    assert len(target) == len(held_out) == premise.TARGET_BLOCKS // 2
    calls = lambda blocks: [line for b in blocks for line in b.splitlines() if line.startswith(">>> ctx.") and "(" in line]  # noqa: E731
    assert all(call.startswith(">>> ctx.add(Decimal('") for call in calls(target) + calls(held_out))
    assert {call.split("(")[0] for call in calls(pretrain)} >= {">>> ctx.multiply", ">>> ctx.divide"}
    assert not {call.split("(")[0] for call in calls(pretrain)} & {">>> ctx.add", ">>> ctx.subtract"}
    # each call has its result on the next line, and no call is cut from its result at a block's end
    for block in target + held_out + pretrain:
        lines = block.splitlines()
        assert all(lines[k + 1].startswith("Decimal('") for k, line in enumerate(lines) if "(" in line and line.startswith(">>>"))


@pytest.mark.slow
def test_the_held_out_target_tasks_read_the_file_each_demo_writes_and_never_trains_on(shipped_tasks):
    """The GPU runs' target group scores its held-out blocks; the CPU runs score no task (the
    validation loss already scores the same text: docs/demo.md), and the task an override adds reads
    the CPU demo's held-out file."""
    path = lambda task: REPO / shipped_tasks.task_index[task].cfg["dataset_kwargs"]["data_files"]["test"]  # noqa: E731
    assert path("demo_target_held_out") == demo.OUT / "corpora" / "target_val.jsonl"
    for config in ("cpt_baseline", "cpt_entrodrop"):
        cpu = OmegaConf.load(REPO / "configs/demo" / f"{config}.yaml").evaluation
        assert dict(cpu.lm_eval.tasks) == {} and cpu.lm_eval.metrics.demo_target_held_out == "logprob_per_char,none"
        gpu = OmegaConf.load(REPO / demo.GPU_CONFIGS / f"{config}.yaml").evaluation
        (task,) = gpu.lm_eval.tasks[gpu.lm_eval.target_group]
        assert path(task) == demo.GPU_OUT / "corpora" / "target_val.jsonl", config
        assert gpu.lm_eval.metrics[task] == "logprob_per_char,none"
        # training reads the target store, the held-out one only validation
        for cfg, out in ((cpu, "demo"), (gpu, "demo_gpu")):
            train = OmegaConf.load(REPO / "configs" / out / f"{config}.yaml").data
            assert (train.target_tokens, cfg.validation.target_tokens) == (
                f"outputs/{out}/tokens/target", f"outputs/{out}/tokens/target_val")


class RollingLM(LM):
    """Scores each text's rolling log-likelihood as -(1 + its index) a character; records the texts."""

    def __init__(self):
        super().__init__()
        self.texts = []

    def loglikelihood_rolling(self, requests):
        self.texts += [r.args[0] for r in requests]
        return [-(1.0 + k) * len(text) for k, text in enumerate(r.args[0] for r in requests)]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def generate_until(self, requests):
        raise NotImplementedError


@pytest.mark.slow
def test_the_held_out_task_scores_each_whole_block_per_character(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    blocks = ["def parse(src):\n    return src\n", "# a comment\nKEY = 1\n\n\nother = 2"]
    data = tmp_path / "target_val.jsonl"
    data.write_text("".join(json.dumps({"text": b}) + "\n" for b in blocks))
    local = tmp_path / "tasks"
    local.mkdir()
    (local / "held_out_local.yaml").write_text(yaml.safe_dump({
        "include": str(TASKS / "demo_target_held_out.yaml"), "task": "held_out_local",
        "dataset_kwargs": {"data_files": {"test": str(data)}}}))
    lm = RollingLM()
    out = lm_eval.simple_evaluate(model=lm, tasks=["held_out_local"], log_samples=False,
                                  task_manager=TaskManager(include_path=[str(TASKS), str(local)], include_defaults=False))
    assert sorted(lm.texts) == sorted(blocks)  # each block whole, nothing before it
    # the mean over blocks of log-likelihood / characters: -1 and -2 a character
    assert out["results"]["held_out_local"]["logprob_per_char,none"] == pytest.approx(-1.5)


def test_no_table_the_demos_print_has_a_column_empty_in_every_row(tmp_path):
    """The CPU demo scores no lm-eval task: its table has no average or documents column of
    dashes (the report leaves out a column nothing fills); the GPU tables keep theirs."""

    from entrodrop.analysis.report import write_report

    switches = {"baseline": "schedule: none", "entrodrop": "schedule: sigmoid\n  signal: entropy",
                "entrodrop_loss": "schedule: sigmoid\n  signal: loss", "entrodrop_auto": "schedule: sigmoid"}
    main = ("baseline", "entrodrop", "entrodrop_loss", "entrodrop_auto")
    for k, name in enumerate(main):  # as scripts/demo.py's report() reads them
        run = fake_run(tmp_path, name, [2.0, 1.6 - k / 100, 1.7], groups=())
        (run / "torchtune_config.yaml").write_text(f"token_dropout:\n  targeting: low\n  {switches[name]}\n"
                                                   f"  midpoint: {'auto' if name.endswith('auto') else 2}\n"
                                                   "  midpoint_unit: epochs\n")
    write_report([read_run(tmp_path / name) for name in main], tmp_path / "report", baseline="baseline")
    table = (tmp_path / "report" / "table.md").read_text()
    assert "best target average" not in table and "documents per task" not in table
    assert table.startswith("| run | best epoch | min val loss | curriculum j0 (epoch) | signal |")
    assert all(any(cell not in ("", "-") for cell in column[1:]) for column in columns_of(table))

    runs = {name: read_run(fake_run(tmp_path / "gpu", name, [2.0, 1.6 - k / 100, 1.7], groups=("target",)))
            for k, name in enumerate(("baseline", "baseline_seed1", "entrodrop", "entrodrop_seed1"))}
    seeds = {"baseline": ["baseline", "baseline_seed1"], "EntroDrop": ["entrodrop", "entrodrop_seed1"]}
    text = demo.seed_tables(runs, {"t": seeds}, "target")
    assert all(any(cell not in ("", "-") for cell in column[1:]) for column in columns_of(text))
