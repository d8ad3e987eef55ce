"""scripts/reproduce.py without training: its runs (every setting with every seed, none reading the
baseline's midpoint before the baseline has run), and the tables and claim verdicts it writes from
recorded runs. (`make reproduce` itself trains 33 runs: docs/reproduction.md has its figures.)"""

from conftest import _load_script
from test_report import fake_run

reproduce = _load_script("reproduce")


def test_every_setting_runs_with_every_seed_and_the_entrodrop_runs_after_the_baselines_group():
    runs = reproduce.runs()
    names = [name for name, _, _ in runs]
    assert len(names) == len(set(names)) == len(reproduce.SETTINGS) * len(reproduce.SEEDS) == 33
    for name, _, overrides in runs:
        assert overrides[-1] == f"seed={name.rsplit('_seed', 1)[1]}"
    groups = reproduce.demo.groups(runs, reproduce.demo.CPU_PARALLEL)
    assert "baseline_seed0" in [name for name, _, _ in groups[0]]
    for group in groups[:1]:
        assert not any("{midpoint}" in o for _, _, overrides in group for o in overrides)
    # every dropout setting reads the midpoint; the model-level baselines do not drop tokens at all
    for name, config, overrides in runs:
        assert (config == "cpt_entrodrop") == ("token_dropout.midpoint={midpoint}" in overrides), name
    stages = reproduce.stages()
    assert len(stages) == len(groups) + 1 and len({title for title, _, _ in stages}) == len(stages)
    # the tables and claims name only settings that run
    for table in reproduce.TABLES.values():
        assert set(table.values()) <= set(reproduce.SETTINGS)
    for _, setting, reference, key, _ in reproduce.CLAIMS:
        assert {setting, reference} <= set(reproduce.SETTINGS) and key in reproduce.DIGITS


def test_the_tables_put_three_seeds_beside_each_other_and_give_each_claim_its_verdict(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    # min val loss a seed: the baseline around 1.61 (range 0.02), EntroDrop 0.05 lower, high-entropy
    # targeting 0.015 above EntroDrop (within the spread), NEFTune 0.05 higher
    centre = {"baseline": 1.61, "entrodrop": 1.56, "targeting_high": 1.575, "neftune": 1.66}
    for setting in reproduce.SETTINGS:
        for seed in reproduce.SEEDS:
            low = centre.get(setting, 1.61) + (seed - 1) / 100
            fake_run(tmp_path, reproduce.run_name(setting, seed), [2.0, low, 1.7], groups=())
    text = reproduce.tables()
    assert (tmp_path / "tables.md").read_text() == text
    assert text.startswith("Table 4: gamma_max\n\n| setting | seeds |")
    assert "| gamma_max 0.1 | 3 | 2.00 [2.00, 2.00] | +0.00 (within the spread 0.00) | 1.5600 [1.5500, 1.5700] " \
           "| -0.0500 (beyond the spread 0.0200) |" in text
    claims = {row.split(" | ")[0].lstrip("| "): row.rsplit(" | ", 1)[1].rstrip(" |")
              for row in text.split("The paper's claims:")[1].strip().splitlines()[2:]}
    assert claims["Table 4: gamma_max 0.1 lowers the minimum validation loss"] == "holds"
    assert claims["Table 3: low-entropy targeting beats high-entropy targeting"] == "within the seed spread"
    assert claims["Table 2: EntroDrop beats NEFTune"] == "holds"
    assert claims["Table 4: gamma_max 0.05 lowers the minimum validation loss"] == "within the seed spread"
    assert claims["Table 4: gamma_max 0.1 delays the best epoch"] == "within the seed spread"
    assert "| Table 2: EntroDrop beats NEFTune | entrodrop 1.5600 vs neftune 1.6600: -0.1000 | 0.0200 | holds |" in text
    assert "| criterion | baseline_seed0 | baseline_seed1 | baseline_seed2 |" in text
