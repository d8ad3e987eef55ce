import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import entrodrop


def test_every_module_of_the_library_imports():
    names = [m.name for m in pkgutil.walk_packages(entrodrop.__path__, "entrodrop.")]
    assert "entrodrop.models.qwen3" in names and "entrodrop.checkpointing" in names
    for name in names:
        importlib.import_module(name)


@pytest.mark.slow  # a fresh process importing torch, torchtune and the recipe: 10 s beside another test worker
def test_starting_a_training_recipe_imports_no_analysis_library():
    # Every recipe start pays for what the recipe imports at its top (scipy.stats alone is 0.75 s or
    # more), beyond the floor of torchtune (which imports pandas and datasets): the statistics and
    # figures only some runs need are imported where they are used.
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "entrodrop_single_device.py"
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('recipe', sys.argv[1]); "
            "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
            "print(sorted(m for m in ('scipy', 'matplotlib') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code, str(recipe)], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
