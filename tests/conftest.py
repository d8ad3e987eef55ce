"""Shared fixtures: the repository root, the tiny offline assets, the real `tune` CLI, and the
device of the GPU tests.

Three tiers, by marker: unit tests (the rest: seconds each, no `tune run`; ``make test-fast``),
``recipe`` tests (they start the real `tune run`, torchrun, a script or two processes; every
test that uses the ``tune_run`` fixture is one), and ``gpu`` tests. ``make test`` runs all three.

Tests marked ``gpu`` check the CUDA paths (``make test-gpu`` runs them alone); without a CUDA GPU
they are skipped. ``GPU_TESTS_ON_CPU=1`` runs them on the CPU instead, with the checks that only
CUDA has (liger-kernel, flex attention, peak memory, nccl) skipped: a check of the tests
themselves for a machine without a GPU, never of a GPU.

What more than one test folder uses is here; a helper one folder alone uses is in that folder's
own module (``tests/recipes/recipe_helpers.py``, ``tests/sandbox/sandbox_helpers.py``), named
apart from every other: pytest puts each test file's folder on ``sys.path``, so the tests import
it by name. That folder's fixtures stay here (the sandbox's ``sandbox`` and
``configure_code_tasks``): a ``conftest.py`` in a sub-folder would take this one's place in
``sys.modules``, and every ``from conftest import`` of a test collected after it would import it.
"""

import fcntl
import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Callable, List

import pytest

# pytest-xdist runs one worker a core (`-n 2` on CI's two cores); the default of a thread a core
# in each worker (torch's, and numpy's BLAS) would run twice as many threads as cores and slow
# every test. Set before torch and numpy are imported, as OMP_NUM_THREADS must be.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import torch  # noqa: E402

from entrodrop.sandbox.code_runner import sandbox_in_use

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"
TUNE = str(Path(sys.executable).parent / "tune")
# Caches (lm-eval's task index, datasets') of the recipes tests start go under outputs/, not the user's ~/.cache.
CACHES = {"XDG_CACHE_HOME": str(REPO / "outputs" / "test_cache")}
GPU_TESTS_ON_CPU = os.environ.get("GPU_TESTS_ON_CPU") == "1"


# Every torchrun the tests start (tune run --nproc_per_node N, in a recipe header or a script)
# meets on a free port, not the default 29500: test files run side by side (pytest-xdist).
os.environ["PET_STANDALONE"] = "1"


def descendants(pid: int) -> list:
    """The processes ``pid`` started, and the ones they started, read off each process's parent in /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # it ended while /proc was read
            continue
    found, generation = [], [pid]
    while generation:
        generation = [child for child, parent in parents.items() if parent in generation]
        found += generation
    return sorted(found)


def running(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (it ended, and its new parent has not reaped it yet) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "tune_run" in fixtures or "data" in fixtures:  # data: made by `tune run`s
            item.add_marker(pytest.mark.recipe)
        if "shipped_tasks" in fixtures:  # lm-eval's whole index: 10 s or more for the first test that asks
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available() or GPU_TESTS_ON_CPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make test-gpu` on a machine with one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu() -> torch.device:
    """The device of the ``gpu`` tests: the first CUDA device (or the CPU, with GPU_TESTS_ON_CPU=1)."""
    return torch.device("cpu") if GPU_TESTS_ON_CPU else torch.device("cuda", 0)


def cuda_only(device: torch.device, what: str) -> None:
    """Skip the rest of a ``gpu`` test that runs on the CPU (GPU_TESTS_ON_CPU=1): ``what`` needs CUDA."""
    if device.type != "cuda":
        pytest.skip(f"{what} needs CUDA (GPU_TESTS_ON_CPU=1 runs the rest of the GPU tests on the CPU)")


# ------------------------------------------------------------------ the sandbox's tests

def usable_sandbox(layer: str) -> str:
    """``layer`` ("bubblewrap" or "own"), or skip the test where bubblewrap cannot run here."""
    if layer == "bubblewrap" and sandbox_in_use("auto") != "bubblewrap":
        pytest.skip("bubblewrap cannot run here (no user namespaces?); the own layer is tested alone")
    return layer


@pytest.fixture(params=["bubblewrap", "own"])
def sandbox(request) -> str:
    """Each layer a sandbox test runs under: bubblewrap (where it runs here), then the own layer."""
    return usable_sandbox(request.param)


@pytest.fixture
def configure_code_tasks(monkeypatch):
    """``configure(**sandbox)`` sets the code tasks up as a run does before lm-eval runs
    (``task_checks.allow_code``), from the tiny evaluation config's ``evaluation.lm_eval`` with
    code allowed and ``sandbox`` keys overridden; the settings before are restored after."""
    from omegaconf import OmegaConf

    from entrodrop.eval.task_checks import allow_code
    from entrodrop.tasks import code_settings

    before = code_settings.sandbox_settings()
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")  # allow_code sets it for Hugging Face's code_eval; undone after

    def configure(**sandbox) -> None:
        lm_eval = OmegaConf.load(REPO / "configs/tiny/qwen3_evaluate.yaml").evaluation.lm_eval
        lm_eval.allow_code_execution = True
        lm_eval.sandbox.update(sandbox)
        allow_code(lm_eval)

    yield configure
    code_settings.use_sandbox(before)


@pytest.fixture
def code_task_settings():
    """``use(**fields)``: the code tasks' sandbox settings (``code_settings.use_sandbox``) with
    those fields changed, as a run sets them before lm-eval runs (``allow_code=True``: code may
    run); the settings before are restored after."""
    from dataclasses import replace

    from entrodrop.tasks import code_settings

    before = code_settings.sandbox_settings()
    yield lambda **fields: code_settings.use_sandbox(replace(before, **fields))
    code_settings.use_sandbox(before)


# ------------------------------------------------------------------ the report's tests

def fake_run(root, name, val_losses, groups=("code",), **fields):
    """A run directory as the training recipes leave it: a metric log and one evaluation an epoch
    (each record with ``fields`` too, e.g. the ``limit`` its tasks were scored with)."""
    run = root / name
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "log_1.txt").write_text(
        "".join(f"Step {s} | loss:{3 - s / 100} gamma_max:0.0 gamma:0.0\n" for s in range(1, 11)))
    (run / "eval").mkdir()
    (run / "eval" / "evals.jsonl").write_text("".join(
        json.dumps({"step": epoch * 10, "target_epoch": float(epoch), "val_loss": {"all": loss, "low": loss, "high": loss},
                    "groups": {g: -loss for g in groups}, **fields}) + "\n"
        for epoch, loss in enumerate(val_losses, start=1)))
    return run


def columns_of(table: str) -> List[List[str]]:
    """The columns of each markdown table in ``table`` (header first), as lists of cells."""
    tables, rows = [], []
    for line in table.splitlines() + [""]:
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif not line.startswith("|") and rows:
            tables += [list(column) for column in zip(*rows)]
            rows = []
    return tables


def _load_script(name: str, folder: str = "scripts"):
    """Import ``<folder>/<name>.py`` as a module: a script, or a benchmark with ``folder="benchmarks"``
    (neither folder is a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script_main(name: str, args, monkeypatch, capsys) -> tuple:
    """``scripts/<name>.py``'s main() in this process, with ``args``: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *map(str, args)])
    try:
        _load_script(name).main()
        status = 0
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="session")
def make_tiny_assets():
    """The module scripts/make_tiny_assets.py (its hyper-parameters and builders)."""
    return _load_script("make_tiny_assets")


@pytest.fixture(scope="session")
def tiny_assets(make_tiny_assets) -> Path:
    """``assets/tiny``, built by scripts/make_tiny_assets.py if `make` has not built it."""
    if not (TINY / ".built").exists():
        make_tiny_assets.main(TINY)
        (TINY / ".built").touch()
    return TINY


def shared_tmp(tmp_path_factory) -> Path:
    """This test run's temporary folder that its pytest-xdist workers share (each one's own is inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@pytest.fixture(scope="session")
def shipped_tasks(tmp_path_factory):
    """lm-eval's ``TaskManager`` over its tasks and ``entrodrop/tasks``, as a run's index holds them.

    Indexing lm-eval's ~14,000 YAMLs costs each process that does it 10 s or more, so the first test
    worker to ask builds it and leaves a pickle in the run's temporary folder, and the others read
    that, in turn under a file lock. Nothing the tests call changes the index (lm-eval builds each
    task from a copy of its config), so one copy serves a whole worker. Tests that add their own task
    YAMLs index them beside ``entrodrop/tasks`` alone (``include_defaults=False``), in under a second.
    """
    from lm_eval.tasks import TaskManager

    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process: nothing to share, and no folder of this run alone
        return TaskManager(include_path=str(REPO / "entrodrop" / "tasks"))
    shared = shared_tmp(tmp_path_factory) / "shipped_tasks.pickle"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if shared.exists():
            return pickle.loads(shared.read_bytes())
        manager = TaskManager(include_path=str(REPO / "entrodrop" / "tasks"))
        partial = shared.with_suffix(f".{os.getpid()}")  # a worker killed while writing leaves no half pickle
        partial.write_bytes(pickle.dumps(manager))
        os.replace(partial, shared)
    return manager


@pytest.fixture(scope="session")
def tune_run() -> Callable[..., subprocess.CompletedProcess]:
    """Run the real ``tune run [--nproc_per_node N] <args>`` from the repository root."""

    def run(*args: str, nproc: int = 1, timeout: float = 600) -> subprocess.CompletedProcess:
        launcher = ["--nproc_per_node", str(nproc)] if nproc > 1 else []
        env = {**os.environ, "OMP_NUM_THREADS": "1", **CACHES}
        return subprocess.run([TUNE, "run", *launcher, *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def data(tiny_assets, tmp_path_factory):
    """Token stores and entropy caches of the tiny corpora, as `make demo` builds them: the
    overrides that point a tiny training config at them. Made once for all the test workers, in
    the run's common temporary folder (``entrodrop.experiments.tiny_data``); tests copy what they
    change."""
    from entrodrop.experiments.tiny_data import tiny_data

    return tiny_data(shared_tmp(tmp_path_factory) / "data", env=CACHES)
