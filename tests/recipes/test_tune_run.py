"""`tune run recipes/<name>.py` works from the repository root, through the real CLI.

torchtune 0.6.1 installs a top-level `recipes` package that raises on import and, on one
process, imports `recipes.<name>` with the working directory appended after site-packages; the
start-up hook that scripts/install_tune_run_hook.py installs (run by `make`) runs the file
instead. These tests run the real `tune` executable of this environment in a subprocess, one process and two (gloo).
"""

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess



def test_recipes_resolves_to_this_checkout():
    origin = importlib.util.find_spec("recipes").origin
    assert origin == str(REPO / "recipes" / "__init__.py"), (
        f"`recipes` resolves to {origin}: run the tests from the checkout root"
    )


def smoke(tune_run, config: str, output_dir: Path, nproc: int) -> dict:
    result = tune_run("recipes/smoke.py", "--config", config, f"output_dir={output_dir}", nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output_dir / "smoke.json").read_text())


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])
def test_one_and_two_processes_give_the_same_loss(tiny_assets, tune_run, tmp_path, name):
    config = f"configs/tiny/{name}_smoke.yaml"
    single = smoke(tune_run, config, tmp_path / "one", nproc=1)
    sharded = smoke(tune_run, config, tmp_path / "two", nproc=2)
    assert (single["processes"], sharded["processes"]) == (1, 2)
    assert single["tokens"] == sharded["tokens"] == 8 * 127
    # A random tiny model is close to uniform over its 2,112 tokens: ln(2112) = 7.66.
    assert 7.0 < single["loss"] < 8.5
    assert sharded["loss"] == pytest.approx(single["loss"], rel=1e-5)


def test_a_config_that_does_not_match_the_checkpoint_fails_clearly(tiny_assets, tune_run, tmp_path):
    result = tune_run("recipes/smoke.py", "--config", "configs/tiny/qwen3_smoke.yaml",
                      f"output_dir={tmp_path}", "model.head_dim=16")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "model.head_dim=16, but assets/tiny/qwen3/config.json has head_dim: 32" in result.stderr
    assert not (tmp_path / "smoke.json").exists()
