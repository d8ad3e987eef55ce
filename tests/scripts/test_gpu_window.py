"""scripts/gpu_window.py, the GPU window's prepared commands: what they carry is summed against the
64 MiB a call may carry, a command past its cap is stopped and what it wrote still comes back. The
profile command at tiny size is benchmarks/bench_gpu.py --profile, run on this CPU by
tests/benchmarks/test_bench_gpu.py; the reproduction's and the demo's plans on a GPU are checked by
tests/experiments/test_reproduce.py and test_demo.py."""

import importlib.util
import subprocess
import sys

from conftest import REPO

spec = importlib.util.spec_from_file_location("gpu_window", REPO / "scripts" / "gpu_window.py")
gpu_window = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_window)


def test_the_carry_is_summed_and_a_missing_or_too_large_one_fails(tmp_path):
    (tmp_path / "folder" / "sub").mkdir(parents=True)
    (tmp_path / "folder" / "sub" / "a").write_bytes(b"x" * 1000)
    (tmp_path / "file").write_bytes(b"y" * 24)
    sizes = gpu_window.carried_bytes([tmp_path / "folder", tmp_path / "file", tmp_path / "none"])
    assert list(sizes.values()) == [1000, 24, None]
    result = subprocess.run([sys.executable, "scripts/gpu_window.py", "--carry", "profile"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.stdout.splitlines()[-1].startswith("carry: ['.whl', 'assets'], ")
    assert result.returncode == (0 if (REPO / ".whl").is_dir() else 1)  # the wheels come from fetch_gpu_wheels.sh


def test_a_command_past_its_cap_is_stopped_and_what_it_wrote_comes_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_window, "REPO", tmp_path)
    (tmp_path / "outputs" / "run").mkdir(parents=True)
    (tmp_path / "outputs" / "run" / "table.md").write_text("| a |\n")
    (tmp_path / "outputs" / "run" / "big.md").write_bytes(b"z" * (gpu_window.MAX_FILE_BYTES + 1))
    log = tmp_path / "out.log"
    ended = gpu_window.run_capped([sys.executable, "-c", "import time; time.sleep(600)"], {}, 0.5, log)
    assert ended.startswith("cut at the 0.5 s cap") and log.exists()
    assert gpu_window.run_capped([sys.executable, "-c", "print('done')"], {}, 60, log) == "exit status 0"
    assert log.read_text() == "done\n"
    assert gpu_window.bring_back(["outputs/run/*.md"], tmp_path / "OUT") == 1
    assert (tmp_path / "OUT" / "outputs" / "run" / "table.md").read_text() == "| a |\n"
