"""scripts/gpu_check.py on CPU, with stages of its own: one that passes with a table, one that
runs past its cap (its process group ended, the row it printed first and its log kept), one
that fails, and a real pytest run read test by test; summary.md and summary.json say it all."""

import json
import os
import sys
import tarfile

import pytest
from conftest import _load_script

PY = sys.executable


@pytest.mark.slow
def test_a_stage_that_fails_or_runs_out_of_time_is_a_row_and_the_rest_still_runs(tmp_path):
    check = _load_script("gpu_check")
    child_pid = tmp_path / "child.pid"
    (tmp_path / "work").mkdir()
    table = "print('| what | tokens/s |'); print('|---|---|'); print('| decode | 5,106 |', flush=True)"
    stages = [
        check.Stage("slow", [PY, "-c", f"{table}; import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
                                       f"open({str(child_pid)!r}, 'w').write(str(p.pid)); "
                                       f"open({str(tmp_path / 'work' / 'run.log')!r}, 'w').write('step 1'); "
                                       "time.sleep(60)"],
                    cap_s=3, what="prints a row and a log, then hangs with a child", logs=tmp_path / "work"),
        check.Stage("broken", [PY, "-c", f"{table}; import sys; sys.exit('CUDA error: out of memory')"], cap_s=30,
                    what="prints a row, then fails"),
        check.Stage("fine", [PY, "-c", table], cap_s=30, what="passes"),
    ]
    results = check.run_check(stages, tmp_path / "check", logs=tmp_path / "logs")

    assert [r["status"] for r in results] == ["timeout", "fail", "pass"]
    assert results[0]["note"] == "stopped at its cap of 3 s" and results[0]["seconds"] < 30
    assert results[1]["note"] == "exit status 1: CUDA error: out of memory"
    for r in results:  # the row printed before the hang or the failure is kept
        assert r["tables"] == [[{"what": "decode", "tokens/s": "5,106"}]], r
    assert (tmp_path / "logs" / "slow_logs" / "run.log").read_text() == "step 1"  # copied after the timeout
    pid = int(child_pid.read_text())
    try:  # the slow stage's child went with its process group (or is a zombie about to be reaped)
        state = open(f"/proc/{pid}/stat").read().split()[2]
        assert state == "Z", state
    except FileNotFoundError:
        pass

    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert summary["passed"] is False and [s["status"] for s in summary["stages"]] == ["timeout", "fail", "pass"]
    markdown = (tmp_path / "check" / "summary.md").read_text()
    assert "| slow | timeout | " in markdown and "| broken | fail | " in markdown and "| fine | pass | " in markdown
    assert markdown.count("\n| decode | 5,106 |\n") == 3
    assert (tmp_path / "logs" / "broken.err").read_text().strip() == "CUDA error: out of memory"
    # the output directory holds three files, whatever the stages wrote: a device call brings back eight
    assert sorted(os.listdir(tmp_path / "check")) == ["logs.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(tmp_path / "check" / "logs.tar.gz") as tar:
        assert {"logs/slow.out", "logs/broken.err", "logs/fine.out", "logs/slow_logs/run.log"} <= set(tar.getnames())


def test_the_suite_stage_reads_each_tests_outcome_and_seconds(tmp_path):
    check = _load_script("gpu_check")
    tests = tmp_path / "test_example.py"
    tests.write_text("def test_passes():\n    pass\n\ndef test_fails():\n    assert False\n")
    # each test's time on its own line, as the check runs the suite (a suite cut off keeps them)
    stage = check.Stage("suite", [PY, "-m", "pytest", "-v", "-n", "0", "-o", "console_output_style=times",
                                  "-p", "no:cacheprovider", str(tests)], cap_s=120, what="a pass and a failure",
                        parse=check.pytest_results)
    [result] = check.run_check([stage], tmp_path / "check", logs=tmp_path / "logs")
    assert result["status"] == "fail" and result["note"].startswith("1 failed, 1 passed; exit status 1: ")
    assert result["note"].endswith("1 failed, 1 passed in " + result["note"].split(" in ")[-1])  # pytest's last line
    outcomes = {t["test"].split("::")[1]: t for t in result["tests"]}
    assert {name: t["outcome"] for name, t in outcomes.items()} == {"test_passes": "passed", "test_fails": "failed"}
    assert all(t["seconds"] is not None for t in outcomes.values())
    markdown = (tmp_path / "check" / "summary.md").read_text()
    assert "| suite | fail |" in markdown and "test_example.py::test_fails | failed |" in markdown
    assert os.path.exists(tmp_path / "logs" / "suite.out")


def test_the_default_stages_fit_a_device_call_and_the_measured_benchmarks_are_asked_for_by_name(tmp_path):
    check = _load_script("gpu_check")
    stages = check.default_stages(tmp_path)
    # a device call runs 10 minutes at most; the set-up and the summary need the rest
    assert [s.name for s in stages] == ["kernels", "recipes", "generate"]
    assert sum(s.cap_s for s in stages) <= 500
    assert [s.name for s in check.optional_stages(tmp_path)] == ["bench_gpu", "loss"]
