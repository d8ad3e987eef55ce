"""The reproduction (entrodrop/experiments/reproduce.py) without training: its runs (every
setting with every seed, none reading the baseline's midpoint before the baseline has run, on
the device and as many at once as it is told), and the tables, claim verdicts and figure it
writes from recorded runs. (`make reproduce` itself trains 13 settings of several seeds:
docs/reproduction.md has its figures.)"""

import dataclasses

import pytest
from conftest import REPO, fake_run, run_script_main

from entrodrop.experiments import reproduce


def test_seeds_is_a_count_of_seeds_from_zero():
    assert reproduce.seeds_from(None) == range(reproduce.DEFAULT_SEEDS) == reproduce.seeds_from("")
    assert reproduce.seeds_from("10") == range(10)
    for bad in ("0", "-2", "ten", "3.5"):
        with pytest.raises(SystemExit, match="must be a number of seeds, 1 or more"):
            reproduce.seeds_from(bad)


def test_every_setting_runs_with_every_seed_and_the_entrodrop_runs_wait_for_the_seed_0_baseline():
    seeds = range(3)
    runs = reproduce.runs(seeds)
    names = [name for name, _, _ in runs]
    assert len(names) == len(set(names)) == len(reproduce.SETTINGS) * 3 == 39
    assert names[0] == "baseline_seed0"
    for name, _, overrides in runs:
        assert overrides[-1] == f"seed={name.rsplit('_seed', 1)[1]}"
    # every dropout setting reads a midpoint; the model-level baselines do not drop tokens at all
    for name, config, overrides in runs:
        assert (config == "cpt_entrodrop") == reproduce.reads_midpoint(overrides), name
    jobs = reproduce.jobs(seeds, "cpu")
    assert [job.name for job in jobs] == names
    for job, (name, config, overrides) in zip(jobs, runs):
        assert job.after == (("baseline_seed0",) if config == "cpt_entrodrop" else ())
        assert job.outputs == [reproduce.DEMO.out / name]
    # the tables and claims name only settings that run, and every figure they read has its digits
    for table in reproduce.TABLES.values():
        assert set(table.values()) <= set(reproduce.SETTINGS)
    for _, setting, reference, key, _ in reproduce.CLAIMS + reproduce.QUESTIONS:
        assert {setting, reference} <= set(reproduce.SETTINGS) and key in reproduce.DIGITS
    titles = [title for title, _, _ in reproduce.stages(seeds, "cpu")]
    assert titles[0] == "13 settings x 3 seeds on cpu" and len(set(titles)) == 3
    # a stage's mark names its seeds: SEEDS=10 after SEEDS=3 runs again, and skips the runs done


def test_each_run_is_the_demos_run_on_the_device_with_its_midpoint_filled_in(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce.demo, "base", lambda out=None: "outputs/demo/pretrain/checkpoints/step_600")
    monkeypatch.setattr(reproduce, "midpoints", lambda regime: {"midpoint": 11.0, "half_midpoint": 5.5})
    jobs = {job.name: job for job in reproduce.jobs(range(2), "cuda")}
    argv = jobs["midpoint_half_seed1"].argv()
    assert argv[1:5] == ["run", "recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml"]
    assert argv[5:] == ["checkpointer.checkpoint_dir=outputs/demo/pretrain/checkpoints/step_600",
                        "output_dir=outputs/reproduce/midpoint_half_seed1", "device=cuda", "token_dropout.midpoint=5.5",
                        "seed=1"]
    assert jobs["gamma_max_0.8_seed0"].argv()[-3:] == ["token_dropout.midpoint=11.0", "token_dropout.gamma_max=0.8", "seed=0"]
    assert "device=cuda" not in reproduce.jobs(range(1), "cpu")[0].argv()


def test_the_tables_pair_each_claim_by_seed_and_give_its_verdict_with_the_interval(tmp_path):
    regime = dataclasses.replace(reproduce.DEMO, out=tmp_path)
    seeds = range(3)
    # min val loss a seed: the baseline 1.60, 1.62, 1.59; EntroDrop 0.05 lower in every seed;
    # high-entropy targeting within 0.02 of EntroDrop either way; NEFTune 0.05 higher
    offset = {"baseline": 0.0, "entrodrop": -0.05, "neftune": 0.05}
    wobble = {"targeting_high": [-0.07, -0.03, -0.05]}
    for setting in reproduce.SETTINGS:
        for seed in seeds:
            base = [1.60, 1.62, 1.59][seed]
            low = base + wobble[setting][seed] if setting in wobble else base + offset.get(setting, 0.0)
            run = fake_run(tmp_path, reproduce.run_name(setting, seed), [2.0, low, 1.7], groups=())
            (run / "torchtune_config.yaml").write_text(f"seed: {seed}\n")
    text = reproduce.tables(seeds, regime)
    assert (tmp_path / "tables.md").read_text() == text
    assert text.startswith("Table 4: gamma_max\n\n| setting | seeds |")
    assert "| gamma_max 0.1 | 3 | 2.00 [2.00, 2.00] | +0.00 [+0.00, +0.00] | 1.5533 [1.5400, 1.5700] " \
           "| -0.0500 [-0.0500, -0.0500] |" in text
    assert "| gamma_max 0.8 (beyond the paper) | 3 |" in text
    claims = {row.split(" | ")[0].lstrip("| "): row.split(" | ")[2:] for row in text.splitlines()
              if row.startswith("| Table") or row.startswith("| Section") or row.startswith("| Appendix")
              or row.startswith("| j0") or row.startswith("| gamma_max 0.8 lowers")}
    assert claims["Table 4: gamma_max 0.1 lowers the validation loss, at the minimum"][-2:] == ["3 of 3", "holds |"]
    assert claims["Table 3: EntroDrop beats high-entropy targeting, at the minimum"][-2:] == ["1 of 3", "not resolved |"]
    assert claims["Table 2: EntroDrop beats NEFTune, at the minimum"] == ["-0.1000 [-0.1000, -0.1000]", "3 of 3", "holds |"]
    assert claims["Table 4: gamma_max 0.05 lowers the validation loss, at the end"][-1] == "not resolved |"  # ties
    assert "j0 at half the baseline's best epoch lowers the validation loss against EntroDrop's j0, at the minimum" in claims
    assert "| criterion | baseline_seed0 | baseline_seed1 | baseline_seed2 |" in text
    assert "The paper's claims, each paired by seed over 3 seeds:" in text and "Beyond the paper, each" in text

    # a seed's run missing (it failed): that setting pairs over the two others
    import shutil

    shutil.rmtree(tmp_path / "neftune_seed2")
    text = reproduce.tables(seeds, regime)
    assert "| NEFTune (alpha 5) | 2 |" in text
    reproduce.figure(seeds, regime)
    assert (tmp_path / "val_loss_by_epoch.png").read_bytes()[:4] == b"\x89PNG"


def test_on_a_gpu_the_base_and_every_run_train_there_and_forked_runs_stay_on_the_cpu(monkeypatch, tmp_path):
    """What `make reproduce` does where torch sees a GPU, checked without one: the base's
    pre-training and entropies get device=cuda, every run too, and the runs go as many at once as
    the GPU's memory and the cores allow, each a fresh process."""
    called = []
    monkeypatch.setattr(reproduce.demo, "tune", lambda *args: called.append(args))
    monkeypatch.setattr(reproduce.demo, "base", lambda out=None: "base")
    stages = reproduce.demo.data_and_base_stages("device=cuda")
    for title, fn, _ in stages[3:]:  # pre-training and the two entropy caches
        fn()
    assert len(called) == 3 and all(args[-1] == "device=cuda" for args in called)
    queued = {}
    monkeypatch.setattr(reproduce, "run_jobs", lambda jobs, parallel, *a, **k: queued.update(parallel=parallel, **k))
    monkeypatch.setattr(reproduce, "parallel_on", lambda device: reproduce.runs_at_once(device, 16, 80 << 30))
    reproduce.train(range(2), "cuda")
    assert queued["parallel"] == 16 and queued["forked"] is False
    reproduce.train(range(2), "cpu")
    assert queued["forked"] is True


def test_the_premise_regime_trains_the_papers_settings_on_its_own_base_and_charts_the_gain_across_regimes(tmp_path):
    """REGIME=premise: six settings from the premise base, by configs/premise, into their own folder;
    its tables hold only the claims both of whose settings it trains, and last it sets each
    regime's paired differences against the base's entropy of the held-out low half."""
    premise = reproduce.regime_from("premise")
    with pytest.raises(SystemExit, match="REGIME='paper': must be one of demo, premise"):
        reproduce.regime_from("paper")
    runs = reproduce.runs(range(10), premise)
    assert len(runs) == 60 and runs[0][0] == "baseline_seed0"
    assert {name.rsplit("_seed", 1)[0] for name, _, _ in runs} == set(premise.settings)
    assert [title for title, _, _ in reproduce.stages(range(10), "cpu", premise)][0] == "6 settings x 10 seeds on cpu"

    # fake runs of both regimes: EntroDrop 0.05 below the baseline in the premise regime, level in the demo's
    regimes = {"demo": (0.72, 0.0), "premise": (0.08, -0.05)}
    replaced = {}
    for name, (entropy, gain) in regimes.items():
        replaced[name] = dataclasses.replace(reproduce.REGIMES[name], out=tmp_path / name)
        for setting in replaced[name].settings:
            for seed in range(3):
                loss = [1.60, 1.62, 1.59][seed] + (gain if setting == "entrodrop" else 0.0)
                run = fake_run(replaced[name].out, reproduce.run_name(setting, seed), [2.0, loss, 1.7], groups=(),
                               base_entropy={"all": 1.5, "low": entropy, "high": 3.0})
                (run / "torchtune_config.yaml").write_text(f"seed: {seed}\n")
    text = reproduce.tables(range(3), replaced["premise"])
    assert "gamma_max 0.05" not in text and "Beyond the paper" not in text and "NEFTune" not in text
    assert "| Table 4: gamma_max 0.1 lowers the validation loss, at the minimum |" in text
    assert "base entropy 0.080" in text  # the fourth criterion, in the regime table
    chart = reproduce.across_regimes(range(3), tmp_path, list(replaced.values()))
    rows = [line for line in chart.splitlines() if line.startswith("| premise") or line.startswith("| demo")]
    assert rows[0].startswith("| premise | 0.080 | -0.0500 [-0.0500, -0.0500]: holds |")
    assert rows[1].startswith("| demo | 0.720 | +0.0000 [+0.0000, +0.0000]: not resolved |")
    assert (tmp_path / "across_regimes.png").read_bytes()[:4] == b"\x89PNG"


def test_the_scripts_take_makes_variables_as_their_defaults_and_the_library_reads_none(monkeypatch, capsys):
    # `SEEDS=x make reproduce` reaches scripts/reproduce.py through the environment; the library takes arguments.
    monkeypatch.setenv("SEEDS", "x")
    status, _, _ = run_script_main("reproduce", ["--device", "cpu"], monkeypatch, capsys)
    assert status == "SEEDS='x': must be a number of seeds, 1 or more (seeds 0 to SEEDS - 1 of every setting)"
    status, _, _ = run_script_main("reproduce", ["--regime", "paper"], monkeypatch, capsys)
    assert status.startswith("REGIME='paper': must be one of demo, premise")
    monkeypatch.setenv("DEVICE", "gpu")
    status, _, _ = run_script_main("demo", [], monkeypatch, capsys)
    assert status == "DEVICE='gpu': must be cpu or cuda (or unset: cuda where a GPU is)"
    for module in (REPO / "entrodrop").rglob("*.py"):
        text = module.read_text()
        for variable in ("DEVICE", "RESUME", "SEEDS", "REGIME"):
            assert f'environ.get("{variable}"' not in text and f'environ["{variable}"]' not in text, (module, variable)
