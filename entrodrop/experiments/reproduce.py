"""Tables 3 and 4 of the paper at CPU scale, every setting with several seeds: `make reproduce`.

`make reproduce` runs it (scripts/reproduce.py, whose docstring lists SEEDS, RESUME, DEVICE and REGIME).

``REGIME=premise`` runs the paper's settings of tables 3 and 4 (``REGIMES``) on another base, the
premise regime's (entrodrop/experiments/premise.py), whose held-out low-entropy tokens are
near-certain, into outputs/reproduce_premise; last it sets EntroDrop's gain in each regime trained
with those seeds against the base's entropy of the held-out low half (``across_regimes``), anew at
every call, so that ``RESUME=1`` after training the demo's regime too adds it.

It builds on the CPU demo's base (scripts/demo.py): the corpora, token stores, pre-trained base
model and entropies in outputs/demo, made if missing and reused where `make demo` left them. Then
it trains each setting of ``SETTINGS`` with each seed (the data order and every mask draw; the same
base) at the demo's compute (configs/demo/cpt_*.yaml: 320 steps, about 60 target epochs) into
outputs/reproduce/<setting>_seed<N>, as many runs at once as the machine holds
(``entrodrop.experiments.run_queue``): on the CPU one a core with one thread each; where torch sees a
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

from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Optional, Tuple

from entrodrop.analysis.markdown import markdown_table
from entrodrop.analysis.multi_seed import (
    CLAIM_HEADER,
    claim_row,
    difference_cell,
    draw_differences_by_entropy,
    draw_seed_bands,
    paired,
    setting_figures,
    verdict,
)
from entrodrop.analysis.run_figures import read_run
from entrodrop.experiments import demo, premise
from entrodrop.experiments.run_queue import Job, cores, run_jobs, runs_at_once

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


@dataclass(frozen=True)
class Regime:
    """Where a reproduction's base comes from and what it trains on it: ``base_stages(*extra)``
    makes the corpora, stores, base model and entropies in ``base_out`` (marked done there, reused);
    every run of ``settings`` (names of ``SETTINGS``) trains by the configs in ``configs`` into ``out``."""

    name: str
    out: Path
    configs: str
    base_out: Path
    base_stages: Callable[..., list]
    settings: Tuple[str, ...]


# `make reproduce`: every setting on the CPU demo's base. REGIME=premise: the paper's settings of
# tables 3 and 4 on the premise regime's base, whose low-entropy tokens are near-certain
# (entrodrop.experiments.premise; the settings fixed before any run of it, docs/reproduction.md).
REGIMES = {
    "demo": Regime("demo", demo.REPO / "outputs" / "reproduce", demo.CONFIGS, demo.OUT, demo.data_and_base_stages,
                   tuple(SETTINGS)),
    "premise": Regime("premise", demo.REPO / "outputs" / "reproduce_premise", premise.CONFIGS, premise.OUT,
                      premise.data_and_base_stages, ("baseline", "entrodrop", "gamma_max_0.4", "targeting_high",
                                                     "targeting_random", "schedule_static")),
}
DEMO = REGIMES["demo"]
# Where the gain begins: each (what, setting, reference, figure, lower is better), paired by seed in
# every regime trained, against its base's mean entropy of the held-out low half.
ACROSS = (("EntroDrop minus baseline, at the minimum", "entrodrop", "baseline", "min_val_loss", True),
          ("EntroDrop minus baseline, at the end", "entrodrop", "baseline", "end_all", True),
          ("low- minus random targeting, at the end", "entrodrop", "targeting_random", "end_all", True))


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


def regime_from(value) -> Regime:
    """The regime ``REGIME`` names (``REGIMES``); the demo's when unset.

    >>> regime_from(None).name, regime_from("premise").name
    ('demo', 'premise')
    """
    if value in (None, ""):
        return DEMO
    if value not in REGIMES:
        raise SystemExit(f"REGIME={value!r}: must be one of {', '.join(REGIMES)} (unset: demo)")
    return REGIMES[value]


def run_name(setting: str, seed: int) -> str:
    return f"{setting}_seed{seed}"


@lru_cache(maxsize=None)
def midpoints(regime: Regime = DEMO) -> dict:
    """What "{midpoint}" and "{half_midpoint}" are: the seed-0 baseline's proposed j0, and half of it."""
    midpoint, line = demo.choose_midpoint(read_run(regime.out / run_name("baseline", 0)))
    print(f"    {line}", flush=True)
    return {"midpoint": midpoint, "half_midpoint": midpoint / 2}


def reads_midpoint(overrides: list) -> bool:
    """Whether a run's overrides hold "{midpoint}" or "{half_midpoint}" (it waits for the seed-0 baseline)."""
    return any("midpoint}" in o for o in overrides)


def runs(seeds: range, regime: Regime = DEMO) -> list:
    """Every (name, config, overrides) of ``regime``'s settings, seed by seed, those that need no
    midpoint first (the seed-0 baseline the very first), so the EntroDrop runs find the baseline's proposal."""
    plain, dropout = [], []
    for seed in seeds:
        for setting in regime.settings:
            config, overrides = SETTINGS[setting]
            (dropout if reads_midpoint(overrides) else plain).append((run_name(setting, seed), config,
                                                                      [*overrides, f"seed={seed}"]))
    return plain + dropout


def jobs(seeds: range, device: str, *extra: str, base: Optional[str] = None, regime: Regime = DEMO) -> list:
    """``runs`` as ``entrodrop.experiments.run_queue`` jobs, on ``device`` (``extra`` overrides go to every
    run), from the base model in ``base`` (default: ``regime``'s pre-trained one); a run that reads
    the midpoint waits for the seed-0 baseline."""
    first = run_name("baseline", 0)
    extra = ([f"device={device}"] if device != "cpu" else []) + list(extra)

    def argv(config: str, overrides: list, name: str) -> list:
        values = midpoints(regime) if reads_midpoint(overrides) else {}
        return demo.run_command(regime.configs, config, regime.out / name, base or demo.base(regime.base_out),
                                [*extra, *(o.format(**values) for o in overrides)])

    return [Job(name, partial(argv, config, overrides, name), [regime.out / name],
                (first,) if reads_midpoint(overrides) else ()) for name, config, overrides in runs(seeds, regime)]


def parallel_on(device: str) -> int:
    """How many runs at once on ``device`` (``entrodrop.experiments.run_queue.runs_at_once``)."""
    if device == "cpu":
        return runs_at_once("cpu", cores())
    import torch

    return runs_at_once(device, cores(), torch.cuda.mem_get_info()[0])


def train(seeds: range, device: str, regime: Regime = DEMO) -> None:
    parallel = parallel_on(device)
    out = regime.out
    print(f"    {len(regime.settings) * len(seeds)} runs on {device}, {parallel} at a time", flush=True)
    # forked runs (entrodrop.experiments.forked_runs) on the CPU only: a fork after torch's import never met CUDA here
    run_jobs(jobs(seeds, device, regime=regime), parallel, out / "logs", out / ".runs", demo.run_env(threads=1),
             demo.REPO, on_done=lambda job: demo.print_figures(out, job.name), forked=device == "cpu")


def stages(seeds: range, device: str, regime: Regime = DEMO) -> list:
    out = regime.out
    return [(f"{len(regime.settings)} settings x {len(seeds)} seeds on {device}", partial(train, seeds, device, regime), []),
            (f"tables 3 and 4 over {len(seeds)} seeds", partial(tables, seeds, regime), [out / "tables.md"]),
            (f"the figure over {len(seeds)} seeds", partial(figure, seeds, regime), [out / "val_loss_by_epoch.png"])]


def read_settings(seeds: range, regime: Regime = DEMO, settings: Optional[tuple] = None) -> dict:
    """Each setting's runs (of ``settings``, default all ``regime``'s), one a seed (a seed whose run
    is missing is left out: its pairs too)."""
    present = lambda setting, s: (regime.out / run_name(setting, s)).is_dir()  # noqa: E731
    return {setting: [read_run(regime.out / run_name(setting, s)) for s in seeds if present(setting, s)]
            for setting in settings or regime.settings}


def tables(seeds: range, regime: Regime = DEMO) -> str:
    """Tables 3 and 4, the regime check and every claim of ``CLAIMS`` and ``QUESTIONS`` whose two
    settings ``regime`` trains, into ``regime.out``/tables.md."""
    settings = read_settings(seeds, regime)
    read = {run["name"]: run for runs in settings.values() for run in runs}
    text = demo.seed_tables(read, {title: {label: [run["name"] for run in settings[setting]]
                                           for label, setting in table.items() if setting in settings}
                                   for title, table in TABLES.items()})
    figures = setting_figures(settings)
    for title, claims, first in (("The paper's claims", CLAIMS, CLAIM_HEADER[0]),
                                 ("Beyond the paper", QUESTIONS, "the question")):
        rows = [claim_row(claim, figures, setting, reference, key, lower, DIGITS[key])
                for claim, setting, reference, key, lower in claims if {setting, reference} <= set(settings)]
        if rows:
            table = "\n".join(markdown_table([first, *CLAIM_HEADER[1:]], rows))
            text += f"\n{title}, each paired by seed over {len(seeds)} seeds:\n\n{table}\n"
    (regime.out / "tables.md").write_text(text)
    print(text)
    return text


def figure(seeds: range, regime: Regime = DEMO) -> None:
    settings = read_settings(seeds, regime)
    draw_seed_bands({label: settings[setting] for label, setting in FIGURE.items()}, regime.out / "val_loss_by_epoch.png")


def across_regimes(seeds: range, out: Path, regimes: Optional[list] = None) -> str:
    """``ACROSS`` in every regime of ``regimes`` (default ``REGIMES``) whose runs of ``seeds`` are
    there (in its ``out``, with the base's entropy recorded): a markdown table, a row a regime,
    lowest base entropy first, into ``out``/across_regimes.md, and the figure ``across_regimes.png``
    beside it."""
    needed = tuple({name: None for _, setting, reference, _, _ in ACROSS for name in (setting, reference)})
    found = []
    for regime in regimes or REGIMES.values():
        figures = setting_figures(read_settings(seeds, regime, tuple(s for s in needed if s in regime.settings)))
        entropies = {f["base_low_entropy"] for f in figures.get("baseline", {}).values()} - {None}
        if entropies and all(figures.get(name) for name in needed):
            found.append((regime.name, sum(entropies) / len(entropies),
                          [paired(figures[s], figures[r], key) for _, s, r, key, _ in ACROSS]))
    found.sort(key=lambda row: row[1])
    header = ["regime", "base entropy of the held-out low half (nats)",
              *[f"{what} [95% interval]" for what, *_ in ACROSS]]
    rows = [[name, f"{entropy:.3f}", *[f"{difference_cell(d, 4)}: {verdict(d, lower)}"
                                       for d, (*_, lower) in zip(differences, ACROSS)]]
            for name, entropy, differences in found]
    text = "\n".join(markdown_table(header, rows)) + "\n"
    (out / "across_regimes.md").write_text(text)
    draw_differences_by_entropy({what: [(entropy, differences[k], name) for name, entropy, differences in found]
                                 for k, (what, *_) in enumerate(ACROSS)}, out / "across_regimes.png")
    print(text)
    return text


def main(regime_name: Optional[str] = None, device: str = "", seeds_wanted: Optional[str] = None,
         resume: bool = False) -> None:
    """The reproduction of the regime ``regime_name`` (``regime_from``), on ``device``
    (``demo.choose_device``), seeds 0 to ``seeds_wanted`` - 1 (``seeds_from``, text as Make gives
    it), ``resume`` continuing what a stopped call finished. scripts/reproduce.py passes Make's
    ``REGIME``, ``DEVICE``, ``SEEDS`` and ``RESUME``."""
    import torch

    regime = regime_from(regime_name)
    device = demo.choose_device(device, torch.cuda.is_available())
    seeds = seeds_from(seeds_wanted)
    extra = [f"device={device}"] if device != "cpu" else []
    command = (f"SEEDS={seeds_wanted} " if seeds_wanted else "") + "make reproduce" + (
        "" if regime is DEMO else f" REGIME={regime.name}")
    with demo.continue_hint(command):
        demo.run_stages(regime.base_stages(*extra), regime.base_out, resume=True, command=command)  # reused where done
        demo.run_stages(stages(seeds, device, regime), regime.out, resume, command)
    print(f"tables: {regime.out / 'tables.md'}, figure: {regime.out / 'val_loss_by_epoch.png'}")
    if regime is not DEMO:  # drawn anew each time (a second): RESUME=1 adds a regime trained since
        across_regimes(seeds, regime.out)
        print(f"across regimes: {regime.out / 'across_regimes.md'}, {regime.out / 'across_regimes.png'}")


if __name__ == "__main__":
    main()
