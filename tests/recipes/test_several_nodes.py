"""Several nodes as a cluster runs them, played by launchers on this machine: two `tune run`s that
meet by torchrun's c10d rendezvous train as one node of two processes does, the run resumes on
another number of nodes and processes, a folder that is not one folder on every node is refused
at start, and the `--master_addr` form most cluster guides show ends in one line at once."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CACHES, REPO, TUNE
from recipe_helpers import DISTRIBUTED, NO_EVAL, SINGLE, logged, run_ok, train_args
from safetensors.torch import load_file

pytestmark = pytest.mark.recipe  # starts tune run / torchrun in subprocesses

STEPS = ["total_tokens=16384", "save_every_n_steps=4", "keep_last_n_checkpoints=null", *NO_EVAL]  # 8 steps of 8 x 256
# Without PET_STANDALONE, which tests/conftest.py sets for every other torchrun: these meet by rendezvous.
ENV = {**{k: v for k, v in os.environ.items() if k != "PET_STANDALONE"}, "OMP_NUM_THREADS": "1", **CACHES}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nodes(*per_node: list, timeout: float = 600) -> list:
    """Start one `tune run --nnodes N --nproc_per_node 1` a list of arguments in ``per_node``, all
    meeting at one c10d rendezvous on this machine, and wait for every one to end; their
    ``(returncode, stderr)``."""
    port, job = free_port(), f"job{time.time_ns()}"
    rendezvous = ["--nnodes", str(len(per_node)), "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                  "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", job]
    started = [subprocess.Popen([TUNE, "run", *rendezvous, *args], cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for args in per_node]
    ended = []
    for process in started:
        stderr = process.communicate(timeout=timeout)[1]
        ended.append((process.returncode, stderr))
    return ended


# Slurm as these tests play it on one machine: srun starts its command once a node, with the
# variables Slurm sets, and waits for all; scontrol expands the job's node list.
SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_JOB_NUM_NODES; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node SLURM_LOCALID=0 "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""
SCONTROL = """#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] && tr ',' '\\n' <<< "$3"
"""


def sbatch(overrides: list, tmp_path: Path, num_nodes: int = 2) -> subprocess.CompletedProcess:
    """examples/slurm/entrodrop.sbatch as a job of ``num_nodes`` nodes, one CPU process each, with
    the stand-ins of srun and scontrol first on ``PATH``."""
    bin_dir = tmp_path / "slurm_bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**ENV, "PATH": f"{bin_dir}:{ENV['PATH']}", "SLURM_JOB_NUM_NODES": str(num_nodes),
           "SLURM_JOB_NODELIST": ",".join(["127.0.0.1"] * num_nodes), "SLURM_JOB_ID": str(time.time_ns()),
           "CONFIG": DISTRIBUTED, "GPUS_PER_NODE": "1", "PORT": str(free_port()), "TUNE": str(TUNE)}
    return subprocess.run(["bash", "examples/slurm/entrodrop.sbatch", *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def weights(checkpoint: Path) -> dict:
    return {k: v for f in sorted(checkpoint.glob("*.safetensors")) for k, v in load_file(f).items()}


def resumed_copy(run: Path, to: Path, step: int) -> Path:
    """A copy of ``run`` as a run stopped after its checkpoint ``step_<step>``: later checkpoints and the logs gone."""
    shutil.copytree(run, to)
    for checkpoint in (to / "checkpoints").glob("step_*"):
        if int(checkpoint.name.split("_")[1]) > step:
            shutil.rmtree(checkpoint)
    shutil.rmtree(to / "logs")
    return to


def test_two_nodes_by_the_slurm_script_train_as_one_node_of_two_and_resume_on_one_node_and_on_one_process(
        data, tune_run, tmp_path):
    run_ok(tune_run, *train_args(DISTRIBUTED, data, tmp_path / "one_node", *STEPS), nproc=2)
    # Two nodes, each a `tune run` of one process, started by the Slurm script's srun, meeting at the first.
    job = sbatch([f"output_dir={tmp_path / 'two_nodes'}", *data, *STEPS], tmp_path)
    assert job.returncode == 0 and "Traceback" not in job.stderr, job.stderr[-3000:]
    reference, two_nodes = logged(tmp_path / "one_node"), logged(tmp_path / "two_nodes")
    assert sorted(two_nodes) == sorted(reference) == list(range(1, 9))
    for step in reference:
        assert two_nodes[step]["loss"] == reference[step]["loss"], step  # the same reductions: bitwise
    last = weights(tmp_path / "one_node" / "checkpoints" / "step_8")
    assert weights(tmp_path / "two_nodes" / "checkpoints" / "step_8").keys() == last.keys()
    assert all((weights(tmp_path / "two_nodes" / "checkpoints" / "step_8")[k] == v).all() for k, v in last.items())

    # Stopped after step 4 on two nodes: resumed on one node of two processes, and by one process.
    two = resumed_copy(tmp_path / "two_nodes", tmp_path / "on_one_node", 4)
    run_ok(tune_run, *train_args(DISTRIBUTED, data, two, *STEPS, "resume=True"), nproc=2)
    one = resumed_copy(tmp_path / "two_nodes", tmp_path / "on_one_process", 4)
    said = run_ok(tune_run, *train_args(SINGLE, data, one, *STEPS, "resume=True")).stderr
    assert "was saved by 2 processes; resuming with 1: the data and the drop masks go on as one run's" in said
    for out, exact in ((two, True), (one, False)):
        resumed = logged(out)
        assert sorted(resumed) == [5, 6, 7, 8]
        for step in resumed:
            for key in ("loss", "gamma", "target_dropped"):
                if exact:
                    assert resumed[step][key] == reference[step][key], (out.name, step, key)
                else:  # one process sums in another order than two: 1e-5 apart (test_training_recipes.py)
                    assert float(resumed[step][key]) == pytest.approx(float(reference[step][key]), rel=1e-5)


def test_two_nodes_precompute_the_cache_one_process_computes_bitwise(data, tmp_path):
    target, reference = (dict(arg.split("=", 1) for arg in data)[key] for key in ("data.target_tokens",
                                                                               "data.target_entropy"))
    args = ["recipes/precompute_entropy.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
            f"target_tokens={target}", f"cache_dir={tmp_path / 'two_nodes'}"]
    (rc0, err0), (rc1, err1) = nodes(args, args)
    assert rc0 == rc1 == 0, (err0[-3000:], err1[-3000:])
    arrays = lambda root: {p.relative_to(root): p.read_bytes() for p in sorted(Path(root).rglob("*.npy"))}  # noqa: E731
    assert arrays(tmp_path / "two_nodes") == arrays(reference) and arrays(reference)


def test_an_output_dir_that_is_not_one_folder_on_every_node_is_refused_at_start(data, tmp_path):
    # Each "node" given its own folder for output_dir, as each node's local disk would be.
    (rc0, err0), (rc1, err1) = nodes(train_args(DISTRIBUTED, data, tmp_path / "node0", *STEPS),
                                     train_args(DISTRIBUTED, data, tmp_path / "node1", *STEPS))
    assert rc0 == rc1 == 1 and "Traceback" not in err0 + err1, (err0[-3000:], err1[-3000:])
    said = [line for line in err0.splitlines() if "is not one folder on every node" in line]
    assert said and said[-1].startswith(f"rank 0 failed: output_dir={tmp_path / 'node0'} is not one folder on every "
                                        f"node: rank 1 (host {socket.gethostname()}) does not see what rank 0")
    assert not list(tmp_path.glob("node*/checkpoints/step_*")) and not list(tmp_path.glob("node*/.written-by-rank-0"))


def test_the_master_addr_form_ends_at_once_in_one_line_with_the_fix():
    result = subprocess.run([TUNE, "run", "--nnodes", "2", "--node_rank", "0", "--nproc_per_node", "1", "--master_addr",
                             "10.0.0.1", "--master_port", "29611", "recipes/entrodrop_distributed.py", "--config",
                             DISTRIBUTED], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith("tune run --nnodes 2 needs --rdzv_endpoint: without it")
    assert "--rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29611 --rdzv_id" in result.stderr


def test_a_rendezvous_the_other_nodes_never_join_ends_in_one_line_naming_what_it_waited_for(tiny_assets):
    port = free_port()
    result = subprocess.run([TUNE, "run", "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                             "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "alone", "--rdzv_conf",
                             "join_timeout=3", "recipes/entrodrop_distributed.py", "--config", DISTRIBUTED],
                            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert (f"the nodes did not meet: this node waited for 2 nodes at 127.0.0.1:{port} (--rdzv_id alone) and gave up "
            "(RendezvousTimeoutError") in result.stderr
