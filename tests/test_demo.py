"""scripts/demo.py without running it: which version it picks, how its stages resume, the GPU
version's runs and the tables 3 and 4 its report writes. (The CPU demo itself runs in
`make demo`; the GPU version needs a GPU.)"""

import pytest
from omegaconf import OmegaConf

from conftest import REPO, _load_script
from entrodrop.report import comparison_table, read_run, seed_spread
from test_report import fake_run

demo = _load_script("demo")


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

    def stage(name, fail=False):
        def run():
            (out / name).mkdir(parents=True)
            (out / name / "part").write_text("half" if fail else "whole")
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
    # Without RESUME a demo starts afresh: everything goes, every stage runs.
    (out / "stray").write_text("x")
    demo.run_stages(stages, out, resume=False)
    assert ran[4:] == ["one", "two", "three"] and not (out / "stray").exists()


def test_the_gpu_runs_share_the_baselines_compute_and_differ_only_in_their_switch():
    configs = {name: OmegaConf.load(REPO / demo.GPU_CONFIGS / f"{name}.yaml") for name in ("cpt_baseline", "cpt_entrodrop")}
    for name, config, overrides in demo.GPU_RUNS:
        cfg = configs[config]
        assert (cfg.global_batch_size, cfg.data.seq_len, cfg.device) == (32, 1024, "cuda"), name
        keys = {o.split("=")[0] for o in overrides}
        assert keys <= {"seed", "token_dropout.midpoint", "token_dropout.gamma_max", "token_dropout.targeting",
                        "neftune_alpha", "hidden_dropout", "optimizer.weight_decay"}, name
    assert configs["cpt_baseline"].token_dropout.schedule == "none"
    assert configs["cpt_entrodrop"].token_dropout.gamma_max == 0.1
    # the steps of the budget: 448 of 32 x 1,024 tokens, the pre-trained base's last step named in the configs
    assert demo.GPU_CPT_TOKENS == 448 * 32 * 1024 and demo.GPU_PRETRAIN_TOKENS == 1024 * 32 * 1024
    assert configs["cpt_entrodrop"].checkpointer.checkpoint_dir.endswith("step_1024")


def test_tables_3_and_4_put_the_seed_spread_beside_each_difference(tmp_path):
    runs = {name: read_run(fake_run(tmp_path, name, losses)) for name, losses in [
        ("baseline", [2.0, 1.60, 1.7]), ("baseline_seed1", [2.0, 1.62, 1.7]),
        ("entrodrop", [2.0, 1.55, 1.5]), ("entrodrop_seed1", [2.0, 1.56, 1.51])]}
    spread = seed_spread(runs, [("baseline", "baseline_seed1"), ("entrodrop", "entrodrop_seed1")], "code")
    assert spread == {"min_val_loss": pytest.approx(0.02), "best_average": pytest.approx(0.02)}
    table = comparison_table(runs, [("baseline", "baseline"), ("gamma_max 0.1", "entrodrop")], "code", "baseline", spread)
    assert table[2] == "| baseline | 2.00 | 1.6000 | +0.0000 | -1.600 | +0.000 |"
    assert table[3] == "| gamma_max 0.1 | 3.00 | 1.5000 | -0.1000 | -1.500 | +0.100 |"
    assert "min val loss 0.0200, best code average 0.020. A difference within it is noise." in table[-1]


def test_the_gpu_runs_are_stages_of_at_most_gpu_parallel_runs_so_a_killed_call_loses_one_group():
    stages = demo.gpu_stages()
    titles = [title for title, _, _ in stages]
    groups = [(title, outputs) for title, _, outputs in stages if title.startswith("runs at the same compute")]
    assert len(groups) == -(-len(demo.GPU_RUNS) // demo.GPU_PARALLEL)  # 11 runs, 4 at a time: 3 stages
    assert all(len(outputs) <= demo.GPU_PARALLEL for _, outputs in groups)
    assert [p.name for _, outputs in groups for p in outputs] == [name for name, _, _ in demo.GPU_RUNS]
    assert len(set(titles)) == len(titles)  # a stage's mark names it: no two alike
    assert titles.index(groups[0][0]) > titles.index(next(t for t in titles if t.startswith("baseline")))
    assert titles[-1].startswith("report")
