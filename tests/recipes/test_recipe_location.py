"""`tune run <path>` runs the file at that path, or refuses and says why; never other code.

The start-up line scripts/install_tune_run_hook.py writes (run by `make`) makes this hold;
docs/training.md, "Why `make` installs a start-up hook". Each test runs the real `tune` of this
environment from a directory outside the checkout, as a user would.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, TUNE

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess


SMOKE = ["--config", "configs/tiny/qwen3_smoke.yaml", "output_dir=out"]


def project(path: Path, *shared: str) -> Path:
    """A directory that sees the checkout's ``shared`` folders (configs, assets...)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in shared:
        (path / name).symlink_to(REPO / name)
    return path


def tune_run(cwd: Path, recipe: str) -> subprocess.CompletedProcess:
    return subprocess.run([TUNE, "run", recipe, *SMOKE], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_recipe_copied_into_a_users_project_runs(tiny_assets, tmp_path):
    user = project(tmp_path / "my_project", "configs", "assets")
    (user / "my_recipes").mkdir()
    source = (REPO / "recipes" / "smoke.py").read_text()
    (user / "my_recipes" / "run.py").write_text(source.replace('"processes":', '"copy": "mine", "processes":'))
    result = tune_run(user, "my_recipes/run.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((user / "out" / "smoke.json").read_text())["copy"] == "mine"


def test_a_recipe_copied_anywhere_runs_by_its_absolute_path(tiny_assets, tmp_path):
    """torchtune alone imports `/x/run.py` as the module `.x.run`: "Relative module names not supported"."""
    user = project(tmp_path / "my_project", "configs", "assets")
    source = (REPO / "recipes" / "smoke.py").read_text()
    copy = tmp_path / "elsewhere" / "my_recipe.py"
    copy.parent.mkdir()
    copy.write_text(source.replace('"processes":', '"copy": "mine", "processes":'))
    result = tune_run(user, str(copy))
    assert result.returncode == 0, (f"run `python scripts/install_tune_run_hook.py` (make does) if this is "
                                    f"torchtune's error:\n{result.stderr[-3000:]}")
    assert json.loads((user / "out" / "smoke.json").read_text())["copy"] == "mine"


def test_a_second_checkout_runs_its_own_recipes(tiny_assets, tmp_path):
    """Its own copy of a recipe, and its own edit of one that both checkouts have."""
    second = project(tmp_path / "second", "configs", "assets", "entrodrop")
    shutil.copytree(REPO / "recipes", second / "recipes", ignore=shutil.ignore_patterns("__pycache__"))
    smoke = second / "recipes" / "smoke.py"
    smoke.write_text(smoke.read_text().replace('"processes":', '"checkout": "second", "processes":'))
    shutil.copy(smoke, second / "recipes" / "my_run.py")
    for recipe in ("recipes/my_run.py", "recipes/smoke.py"):
        result = tune_run(second, recipe)
        assert result.returncode == 0, (recipe, result.stderr[-3000:])
        assert json.loads((second / "out" / "smoke.json").read_text())["checkout"] == "second"


def test_a_recipes_folder_without_init_runs_its_own_file_and_a_missing_file_is_named(tiny_assets, tmp_path):
    """torchtune alone imports `recipes.my_run` from its own `recipes` package, which shadows the folder."""
    user = project(tmp_path / "my_project", "configs", "assets")
    (user / "recipes").mkdir()  # no __init__.py
    source = (REPO / "recipes" / "smoke.py").read_text()
    (user / "recipes" / "my_run.py").write_text(source.replace('"processes":', '"copy": "mine", "processes":'))
    result = tune_run(user, "recipes/my_run.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((user / "out" / "smoke.json").read_text())["copy"] == "mine"
    # Where there is no recipes/ at all, the checkout's smoke.py is not run in its place.
    elsewhere = project(tmp_path / "elsewhere", "configs", "assets")
    result = tune_run(elsewhere, "recipes/smoke.py")
    assert result.returncode != 0 and f"there is no file {elsewhere / 'recipes' / 'smoke.py'}" in result.stderr
    assert not (elsewhere / "out").exists()
