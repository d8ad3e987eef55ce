"""Runs per hour of `make reproduce` on this machine: a subset of its runs, as it schedules them.

    python benchmarks/bench_reproduce.py                       (4 settings x 2 seeds, forked runs)
    python benchmarks/bench_reproduce.py --cold                (each run a fresh `tune run`)
    python benchmarks/bench_reproduce.py --quick [--data DIR]  (2 runs of 20 steps of the tiny Qwen3: a test runs it)
    python benchmarks/bench_reproduce.py --settings baseline,entrodrop --seeds 3 --device cpu

It trains the runs `make reproduce` (``entrodrop.experiments.reproduce``) would for ``--settings`` and seeds 0 to ``--seeds`` - 1
(``reproduce.jobs``, in its order: the seed-0 baseline first, the runs that read its midpoint after
it) on the demo's base (made first if missing, as `make reproduce` does), as many at once as
``entrodrop.experiments.run_queue.runs_at_once`` says, into a temporary folder, and prints a table of the
wall time and the runs per hour. A figure of it belongs in docs/performance.md with its date and
the machine's load: two runs side by side on this VM moved by up to 15% from one hour to the next,
so compare two settings one after the other, and again in the other order.

``--quick`` needs no demo: the runs continue the tiny Qwen3 (assets/tiny/qwen3) on the tiny
corpora's stores with its entropies (``entrodrop.experiments.tiny_data``), made in the temporary
folder or found in ``--data``.
"""

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from entrodrop.analysis.markdown import markdown_table
from entrodrop.experiments import demo, reproduce
from entrodrop.experiments.run_queue import run_jobs
from entrodrop.experiments.tiny_data import tiny_data

STEP_TOKENS = 8 * 256  # configs/demo/cpt_*.yaml: global_batch_size x seq_len


def quick_base_and_data(root: Path) -> tuple:
    """The tiny Qwen3 as the base, and the tiny corpora's token stores and its entropies under
    ``root`` (made there if missing): the base's folder and the overrides of a run, the tiny
    model's shape and the data."""
    from entrodrop.models.tiny import TINY_QWEN3

    print("the tiny Qwen3 as the base, the tiny corpora's stores and its entropies", flush=True)
    shape = [f"model.{k}={v}" for k, v in TINY_QWEN3.items()]
    return str(demo.REPO / "assets" / "tiny" / "qwen3"), [*shape, *tiny_data(root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="baseline,entrodrop,neftune,targeting_random",
                        help="settings of entrodrop.experiments.reproduce.SETTINGS, comma-separated")
    parser.add_argument("--seeds", type=int, default=2, help="seeds 0 to N - 1 of each")
    parser.add_argument("--steps", type=int, default=None, help="steps a run (default: the configs', 320)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda where torch sees a GPU")
    parser.add_argument("--cold", action="store_true", help="each run a fresh `tune run`, no forked runs")
    parser.add_argument("--quick", action="store_true", help="baseline and EntroDrop, one seed, 20 steps, the tiny Qwen3")
    parser.add_argument("--data", type=Path, help="--quick: where its stores and caches are made or found "
                        "(default: the temporary folder)")
    args = parser.parse_args()
    if args.quick:
        args.settings, args.seeds, args.steps = "baseline,entrodrop", 1, 20
    settings = args.settings.split(",")
    unknown = set(settings) - set(reproduce.SETTINGS)
    if unknown or "baseline" not in settings:
        raise SystemExit(f"--settings {args.settings}: {sorted(unknown) or 'baseline missing'}; choose among "
                         f"{', '.join(reproduce.SETTINGS)}, baseline included (the others read its midpoint)")
    with tempfile.TemporaryDirectory(prefix="bench_reproduce.") as out:
        base, data = None, []
        if args.quick:
            base, data = quick_base_and_data(args.data or Path(out) / "data")
        else:
            print("the demo's base (made if missing):", flush=True)
            demo.run_stages(demo.data_and_base_stages(*([f"device={args.device}"] if args.device != "cpu" else [])),
                            demo.OUT, resume=True)
        regime = dataclasses.replace(reproduce.DEMO, out=Path(out) / "runs")  # its jobs and midpoint read this folder
        steps = [f"total_tokens={args.steps * STEP_TOKENS}"] if args.steps else []
        jobs = [job for job in reproduce.jobs(range(args.seeds), args.device, *steps, *data, base=base, regime=regime)
                if job.name.rsplit("_seed", 1)[0] in settings]
        print(f"{len(jobs)} runs:", flush=True)
        parallel = reproduce.parallel_on(args.device)
        forked = not args.cold and args.device == "cpu"
        start = time.perf_counter()
        run_jobs(jobs, parallel, Path(out) / "logs", Path(out) / ".runs", demo.run_env(threads=1), demo.REPO,
                 on_done=lambda job: print(f"  {job.name} done at {time.perf_counter() - start:.0f} s", flush=True),
                 forked=forked)
        seconds = time.perf_counter() - start
    mode = f"{'forked' if forked else 'fresh'} runs, {parallel} at a time"
    print("\n".join(markdown_table(["runs", "steps a run", "device", "mode", "wall s", "runs per hour"],
                                   [[str(len(jobs)), str(args.steps or 320), args.device, mode, f"{seconds:.0f}",
                                     f"{len(jobs) * 3600 / seconds:.1f}"]])))


if __name__ == "__main__":
    main()
