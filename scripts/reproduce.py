"""Tables 3 and 4 of the paper at CPU scale, three seeds of every setting: `make reproduce`.

    python scripts/reproduce.py           (what `make reproduce` runs)
    RESUME=1 python scripts/reproduce.py  (continue: skip the stages a killed run finished)

It builds on the CPU demo's base (scripts/demo.py): the corpora, token stores, pre-trained base
model and entropies in outputs/demo, made if missing and reused where `make demo` left them. Then
it trains each setting of ``SETTINGS`` with each seed of ``SEEDS`` (the data order and every mask
draw; the same base) at the demo's compute (configs/demo/cpt_*.yaml: 320 steps, about 60 target
epochs), ``demo.CPU_PARALLEL`` at a time with one thread each, into
outputs/reproduce/<setting>_seed<N>; EntroDrop's curriculum midpoint j0 is where the seed-0
baseline's validation loss stops falling, as in the demo. Last it writes
outputs/reproduce/tables.md: table 4 (gamma_max) and table 3 (targeting, schedule, the paper's
baselines), each setting's mean over its seeds with their range and every difference from the
baseline beside the seed spread; whether the baseline's seeds show the paper's regime; and each
of the paper's claims beside what was measured: holds, reversed, or within the seed spread.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo  # noqa: E402

from entrodrop.report import markdown_table, read_run  # noqa: E402
from entrodrop.seeds import mean_figures, seed_spread, setting_figures, verdict  # noqa: E402

OUT = demo.REPO / "outputs" / "reproduce"
SEEDS = (0, 1, 2)
# name -> (config, overrides); every EntroDrop setting gets the baseline's midpoint.
SETTINGS = {
    "baseline": ("cpt_baseline", []),
    "neftune": ("cpt_baseline", ["neftune_alpha=5.0"]),
    "hidden_dropout": ("cpt_baseline", ["hidden_dropout=0.1"]),
    "weight_decay": ("cpt_baseline", ["optimizer.weight_decay=0.1"]),
    "entrodrop": ("cpt_entrodrop", []),  # gamma_max 0.1, low-entropy targeting, the curriculum
    "gamma_max_0.05": ("cpt_entrodrop", ["token_dropout.gamma_max=0.05"]),
    "gamma_max_0.2": ("cpt_entrodrop", ["token_dropout.gamma_max=0.2"]),
    "gamma_max_0.4": ("cpt_entrodrop", ["token_dropout.gamma_max=0.4"]),
    "targeting_high": ("cpt_entrodrop", ["token_dropout.targeting=high"]),
    "targeting_random": ("cpt_entrodrop", ["token_dropout.targeting=random"]),
    "schedule_static": ("cpt_entrodrop", ["token_dropout.schedule=static"]),
}
TABLES = {
    "Table 4: gamma_max": {"baseline (gamma_max 0)": "baseline", "gamma_max 0.05": "gamma_max_0.05",
                           "gamma_max 0.1": "entrodrop", "gamma_max 0.2": "gamma_max_0.2", "gamma_max 0.4": "gamma_max_0.4"},
    "Table 3: where and when to drop, and the paper's baselines": {
        "baseline": "baseline", "EntroDrop (low-entropy targeting, curriculum, gamma_max 0.1)": "entrodrop",
        "high-entropy targeting": "targeting_high", "random targeting (every target token)": "targeting_random",
        "static schedule (gamma_max from the first step)": "schedule_static", "NEFTune (alpha 5)": "neftune",
        "hidden dropout 0.1": "hidden_dropout", "weight decay 0.1": "weight_decay"},
}
# The paper's claims, each as (claim, setting, reference, figure, lower is better). The paper ranks
# its methods by benchmark accuracy; the CPU runs score the held-out target text, so the minimum
# validation loss stands in for it.
CLAIMS = [
    *[(f"Table 4: gamma_max {g} delays the best epoch", f"gamma_max_{g}" if g != "0.1" else "entrodrop",
       "baseline", "best_epoch", False) for g in ("0.05", "0.1", "0.2", "0.4")],
    *[(f"Table 4: gamma_max {g} lowers the minimum validation loss", f"gamma_max_{g}" if g != "0.1" else "entrodrop",
       "baseline", "min_val_loss", True) for g in ("0.05", "0.1", "0.2", "0.4")],
    ("Table 4: gamma_max 0.4 lowers it more than 0.1", "gamma_max_0.4", "entrodrop", "min_val_loss", True),
    ("Table 3: low-entropy targeting beats high-entropy targeting", "entrodrop", "targeting_high", "min_val_loss", True),
    ("Table 3: low-entropy targeting beats random targeting", "entrodrop", "targeting_random", "min_val_loss", True),
    ("Section 5.3: the curriculum beats a static rate", "entrodrop", "schedule_static", "min_val_loss", True),
    ("Table 2: EntroDrop beats NEFTune", "entrodrop", "neftune", "min_val_loss", True),
    ("Table 2: EntroDrop beats hidden dropout", "entrodrop", "hidden_dropout", "min_val_loss", True),
    ("Table 2: EntroDrop beats weight decay", "entrodrop", "weight_decay", "min_val_loss", True),
    ("Appendix B: EntroDrop keeps the high-entropy loss from rebounding", "entrodrop", "baseline", "high_rise", True),
    ("Appendix B: EntroDrop ends with a lower validation loss", "entrodrop", "baseline", "end_all", True),
]
DIGITS = {"best_epoch": 2, "min_val_loss": 4, "high_rise": 4, "end_all": 4}


def run_name(setting: str, seed: int) -> str:
    return f"{setting}_seed{seed}"


def runs() -> list:
    """Every (name, config, overrides), those that need no midpoint first (the seed-0 baseline in
    the first group), so the EntroDrop runs can read the baseline's proposal."""
    plain, dropout = [], []
    for setting, (config, overrides) in SETTINGS.items():
        for seed in SEEDS:
            midpoint = ["token_dropout.midpoint={midpoint}"] if config == "cpt_entrodrop" else []
            (dropout if midpoint else plain).append((run_name(setting, seed), config, [*midpoint, *overrides, f"seed={seed}"]))
    return plain + dropout


def stages() -> list:
    return [*[demo.run_stage(OUT, demo.CONFIGS, group, threads=1, base_out=demo.OUT, baseline=run_name("baseline", 0))
              for group in demo.groups(runs(), demo.CPU_PARALLEL)],
            ("tables 3 and 4", tables, [OUT / "tables.md"])]


def claim_rows(figures: dict, spread: dict) -> list:
    """``CLAIMS`` as markdown rows: the claim, the two settings' means, their difference, the seed
    spread and the verdict."""
    rows = []
    for claim, setting, reference, key, lower_is_better in CLAIMS:
        value, ref = mean_figures(figures[setting])[key], mean_figures(figures[reference])[key]
        width, d = spread.get(key), DIGITS[key]
        rows.append([claim, f"{setting} {value:.{d}f} vs {reference} {ref:.{d}f}: {value - ref:+.{d}f}",
                     "-" if width is None else f"{width:.{d}f}", verdict(value, ref, width, lower_is_better)])
    return rows


def tables() -> str:
    read = {name: read_run(OUT / name) for name, _, _ in runs()}
    named = {setting: [run_name(setting, seed) for seed in SEEDS] for setting in SETTINGS}
    text = demo.seed_tables(read, {title: {label: named[setting] for label, setting in table.items()}
                                   for title, table in TABLES.items()})
    figures = setting_figures({setting: [read[n] for n in names] for setting, names in named.items()})
    claims = markdown_table(["the paper's claim", "measured (means of 3 seeds)", "seed spread", "verdict"],
                            claim_rows(figures, seed_spread(figures)))
    text += "\nThe paper's claims:\n\n" + "\n".join(claims) + "\n"
    (OUT / "tables.md").write_text(text)
    print(text)
    return text


def main() -> None:
    resume = os.environ.get("RESUME", "0") not in ("", "0")
    demo.run_stages(demo.data_and_base_stages(), demo.OUT, resume=True)  # the demo's, reused where done
    demo.run_stages(stages(), OUT, resume)
    print(f"tables: {OUT / 'tables.md'}")


if __name__ == "__main__":
    main()
