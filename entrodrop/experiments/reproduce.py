"""Tables 3 and 4 of the paper at CPU scale, every setting with several seeds: `make reproduce`.

`make reproduce` runs it (scripts/reproduce.py, whose docstring lists SEEDS, RESUME and DEVICE).

It builds on the CPU demo's base (scripts/demo.py): the corpora, token stores, pre-trained base
model and entropies in outputs/demo, made if missing and reused where `make demo` left them. Then
it trains each setting of ``SETTINGS`` with each seed (the data order and every mask draw; the same
base) at the demo's compute (configs/demo/cpt_*.yaml: 320 steps, about 60 target epochs) into
outputs/reproduce/<setting>_seed<N>, as many runs at once as the machine holds
(``entrodrop.run_queue``): on the CPU one a core with one thread each; where torch sees a
GPU, every run on it, as many at once as its memory and the CPU cores allow. EntroDrop's
curriculum midpoint j0 is where the seed-0 baseline's validation loss stops falling, as in the
demo; two settings beyond the paper put it at half that epoch, and gamma_max at 0.8.

Last it writes outputs/reproduce/tables.md and val_loss_by_epoch.png. The tables: table 4
(gamma_max) and table 3 (targeting, schedule, the paper's baselines), each setting's mean over its
seeds with their range and, beside it, its difference from the baseline paired by seed with a 95%
t-interval (``entrodrop.analysis.multi_seed``); whether the baseline's seeds show the paper's regime; and each of
the paper's claims, at the minimum and at the end of training, with its paired interval and its
verdict: holds, reversed, or not resolved. The figure: the validation loss by target epoch, the
mean over seeds with its 95% band, baseline, EntroDrop and random targeting, and beneath it each
one's difference from the baseline, paired by seed.

The settings, claims and seeds were fixed before any run of this version: docs/reproduction.md
lists every setting tried.
"""

import os
from functools import lru_cache, partial
from typing import Optional

from entrodrop.analysis.multi_seed import CLAIM_HEADER, claim_row, draw_seed_bands, setting_figures
from entrodrop.analysis.report import markdown_table, read_run
from entrodrop.experiments import demo
from entrodrop.run_queue import Job, cores, run_jobs, runs_at_once

OUT = demo.REPO / "outputs" / "reproduce"
# Seeds a setting without SEEDS: 13 settings of 4 seeds (52 runs) fit an hour of this 2-core CPU (docs/reproduction.md).
DEFAULT_SEEDS = 4
# name -> (config, overrides); "{midpoint}" is the seed-0 baseline's proposed j0, "{half_midpoint}" half of it.
SETTINGS = {
    "baseline": ("cpt_baseline", []),
    "neftune": ("cpt_baseline", ["neftune_alpha=5.0"]),
    "hidden_dropout": ("cpt_baseline", ["hidden_dropout=0.1"]),
    "weight_decay": ("cpt_baseline", ["optimizer.weight_decay=0.1"]),
    "entrodrop": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}"]),  # gamma_max 0.1, low-entropy, the curriculum
    "gamma_max_0.05": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.05"]),
    "gamma_max_0.2": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.2"]),
    "gamma_max_0.4": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.4"]),
    "targeting_high": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.targeting=high"]),
    "targeting_random": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.targeting=random"]),
    "schedule_static": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.schedule=static"]),
    # Beyond the paper: does an earlier midpoint move the minimum, and a rate past the paper's largest?
    "midpoint_half": ("cpt_entrodrop", ["token_dropout.midpoint={half_midpoint}"]),
    "gamma_max_0.8": ("cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.8"]),
}
BEYOND = " (beyond the paper)"
TABLES = {
    "Table 4: gamma_max": {"baseline (gamma_max 0)": "baseline", "gamma_max 0.05": "gamma_max_0.05",
                           "gamma_max 0.1": "entrodrop", "gamma_max 0.2": "gamma_max_0.2", "gamma_max 0.4": "gamma_max_0.4",
                           "gamma_max 0.8" + BEYOND: "gamma_max_0.8"},
    "Table 3: where and when to drop, and the paper's baselines": {
        "baseline": "baseline", "EntroDrop (low-entropy targeting, curriculum, gamma_max 0.1)": "entrodrop",
        "high-entropy targeting": "targeting_high", "random targeting (every target token)": "targeting_random",
        "static schedule (gamma_max from the first step)": "schedule_static",
        "EntroDrop, j0 at half the baseline's best epoch" + BEYOND: "midpoint_half", "NEFTune (alpha 5)": "neftune",
        "hidden dropout 0.1": "hidden_dropout", "weight decay 0.1": "weight_decay"},
}
# Where each loss claim is read: the paper ranks methods at their best checkpoint (the CPU runs
# score the held-out text, so the minimum validation loss stands in for accuracy there), and its
# appendix B reads the end of training.
WHERE = (("min_val_loss", "at the minimum"), ("end_all", "at the end"))
GAMMA = lambda g: "entrodrop" if g == "0.1" else f"gamma_max_{g}"  # noqa: E731
# The paper's claims, each (claim, setting, reference, figure, lower is better), fixed before the runs.
CLAIMS = [
    *[(f"Table 4: gamma_max {g} delays the best epoch", GAMMA(g), "baseline", "best_epoch", False)
      for g in ("0.05", "0.1", "0.2", "0.4")],
    *[(f"Table 4: gamma_max {g} lowers the validation loss, {where}", GAMMA(g), "baseline", key, True)
      for g in ("0.05", "0.1", "0.2", "0.4") for key, where in WHERE],
    *[(f"Table 4: gamma_max 0.4 lowers it more than 0.1, {where}", "gamma_max_0.4", "entrodrop", key, True)
      for key, where in WHERE],
    *[(f"{source}: EntroDrop beats {other}, {where}", "entrodrop", reference, key, True)
      for source, other, reference in [("Table 3", "high-entropy targeting", "targeting_high"),
                                       ("Table 3", "random targeting", "targeting_random"),
                                       ("Section 5.3", "a static rate (the curriculum wins)", "schedule_static"),
                                       ("Table 2", "NEFTune", "neftune"), ("Table 2", "hidden dropout", "hidden_dropout"),
                                       ("Table 2", "weight decay", "weight_decay")]
      for key, where in WHERE],
    ("Appendix B: EntroDrop keeps the high-entropy loss from rebounding", "entrodrop", "baseline", "high_rise", True),
    ("Appendix B: EntroDrop ends with a lower high-entropy loss", "entrodrop", "baseline", "end_high", True),
]
# Questions of the two settings beyond the paper, in the same form.
QUESTIONS = [
    *[(f"j0 at half the baseline's best epoch lowers the validation loss against EntroDrop's j0, {where}",
       "midpoint_half", "entrodrop", key, True) for key, where in WHERE],
    ("j0 at half the baseline's best epoch delays the best epoch against the baseline", "midpoint_half", "baseline",
     "best_epoch", False),
    *[(f"gamma_max 0.8 lowers the validation loss against the baseline, {where}", "gamma_max_0.8", "baseline", key, True)
      for key, where in WHERE],
]
DIGITS = {"best_epoch": 2, "min_val_loss": 4, "end_all": 4, "high_rise": 4, "end_high": 4}
# The figure's settings: label -> setting.
FIGURE = {"baseline": "baseline", "EntroDrop": "entrodrop", "random targeting": "targeting_random"}


def seeds_from(value) -> range:
    """The seeds ``SEEDS`` (a count) asks for: 0 to N - 1; ``DEFAULT_SEEDS`` when unset.

    >>> seeds_from(None), seeds_from("10")
    (range(0, 4), range(0, 10))
    """
    if value in (None, ""):
        return range(DEFAULT_SEEDS)
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"SEEDS={value!r}: must be a number of seeds, 1 or more (seeds 0 to SEEDS - 1 of every setting)")
    return range(int(value))


def run_name(setting: str, seed: int) -> str:
    return f"{setting}_seed{seed}"


@lru_cache(maxsize=None)
def midpoints() -> dict:
    """What "{midpoint}" and "{half_midpoint}" are: the seed-0 baseline's proposed j0, and half of it."""
    midpoint, line = demo.choose_midpoint(read_run(OUT / run_name("baseline", 0)))
    print(f"    {line}", flush=True)
    return {"midpoint": midpoint, "half_midpoint": midpoint / 2}


def reads_midpoint(overrides: list) -> bool:
    """Whether a run's overrides hold "{midpoint}" or "{half_midpoint}" (it waits for the seed-0 baseline)."""
    return any("midpoint}" in o for o in overrides)


def runs(seeds: range) -> list:
    """Every (name, config, overrides), seed by seed, those that need no midpoint first (the seed-0
    baseline the very first), so the EntroDrop runs find the baseline's proposal."""
    plain, dropout = [], []
    for seed in seeds:
        for setting, (config, overrides) in SETTINGS.items():
            (dropout if reads_midpoint(overrides) else plain).append((run_name(setting, seed), config,
                                                                      [*overrides, f"seed={seed}"]))
    return plain + dropout


def jobs(seeds: range, device: str, *extra: str, base: Optional[str] = None) -> list:
    """``runs`` as ``entrodrop.run_queue`` jobs, on ``device`` (``extra`` overrides go to every
    run), from the base model in ``base`` (default: the demo's pre-trained one); a run that reads
    the midpoint waits for the seed-0 baseline."""
    first = run_name("baseline", 0)
    extra = ([f"device={device}"] if device != "cpu" else []) + list(extra)

    def argv(config: str, overrides: list, name: str) -> list:
        values = midpoints() if reads_midpoint(overrides) else {}
        return demo.run_command(demo.CONFIGS, config, OUT / name, base or demo.base(),
                                [*extra, *(o.format(**values) for o in overrides)])

    return [Job(name, partial(argv, config, overrides, name), [OUT / name], (first,) if reads_midpoint(overrides) else ())
            for name, config, overrides in runs(seeds)]


def parallel_on(device: str) -> int:
    """How many runs at once on ``device`` (``entrodrop.run_queue.runs_at_once``)."""
    if device == "cpu":
        return runs_at_once("cpu", cores())
    import torch

    return runs_at_once(device, cores(), torch.cuda.mem_get_info()[0])


def train(seeds: range, device: str) -> None:
    parallel = parallel_on(device)
    print(f"    {len(SETTINGS) * len(seeds)} runs on {device}, {parallel} at a time", flush=True)
    # warm starts (entrodrop.warm_start) on the CPU only: a fork after torch's import never met CUDA here
    run_jobs(jobs(seeds, device), parallel, OUT / "logs", OUT / ".runs", demo.run_env(threads=1), demo.REPO,
             on_done=lambda job: demo.print_figures(OUT, job.name), warm=device == "cpu")


def stages(seeds: range, device: str) -> list:
    return [(f"{len(SETTINGS)} settings x {len(seeds)} seeds on {device}", partial(train, seeds, device), []),
            (f"tables 3 and 4 over {len(seeds)} seeds", partial(tables, seeds), [OUT / "tables.md"]),
            (f"the figure over {len(seeds)} seeds", partial(figure, seeds), [OUT / "val_loss_by_epoch.png"])]


def read_settings(seeds: range) -> dict:
    """Each setting's runs, one a seed (a seed whose run is missing is left out: its pairs too)."""
    return {setting: [read_run(OUT / run_name(setting, s)) for s in seeds if (OUT / run_name(setting, s)).is_dir()]
            for setting in SETTINGS}


def tables(seeds: range) -> str:
    settings = read_settings(seeds)
    read = {run["name"]: run for runs in settings.values() for run in runs}
    text = demo.seed_tables(read, {title: {label: [run["name"] for run in settings[setting]]
                                           for label, setting in table.items()} for title, table in TABLES.items()})
    figures = setting_figures(settings)
    for title, claims, first in (("The paper's claims", CLAIMS, CLAIM_HEADER[0]),
                                 ("Beyond the paper", QUESTIONS, "the question")):
        rows = [claim_row(claim, figures, setting, reference, key, lower, DIGITS[key])
                for claim, setting, reference, key, lower in claims]
        table = "\n".join(markdown_table([first, *CLAIM_HEADER[1:]], rows))
        text += f"\n{title}, each paired by seed over {len(seeds)} seeds:\n\n{table}\n"
    (OUT / "tables.md").write_text(text)
    print(text)
    return text


def figure(seeds: range) -> None:
    settings = read_settings(seeds)
    draw_seed_bands({label: settings[setting] for label, setting in FIGURE.items()}, OUT / "val_loss_by_epoch.png")


def main() -> None:
    import torch

    device = demo.choose_device(os.environ.get("DEVICE", ""), torch.cuda.is_available())
    seeds = seeds_from(os.environ.get("SEEDS"))
    resume = os.environ.get("RESUME", "0") not in ("", "0")
    extra = [f"device={device}"] if device != "cpu" else []
    demo.run_stages(demo.data_and_base_stages(*extra), demo.OUT, resume=True)  # the demo's, reused where done
    demo.run_stages(stages(seeds, device), OUT, resume)
    print(f"tables: {OUT / 'tables.md'}, figure: {OUT / 'val_loss_by_epoch.png'}")


if __name__ == "__main__":
    main()
