import ast
import graphlib
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import entrodrop


def test_every_module_of_the_library_imports():
    names = [m.name for m in pkgutil.walk_packages(entrodrop.__path__, "entrodrop.")]
    assert "entrodrop.models.qwen3" in names and "entrodrop.models.checkpointing" in names
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


def _imports_between_folders():
    """{folder: folders it imports}, over every import in the library (top level or in a function),
    a folder being a sub-package of ``entrodrop`` or one of its root modules."""
    root = Path(entrodrop.__file__).parent
    edges = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        source = parts[0] if len(parts) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")[1] if name.startswith("entrodrop.") else None
                if target and target != source and ((root / target).is_dir() or (root / f"{target}.py").is_file()):
                    edges.setdefault(source, set()).add(target)
    return edges


def test_the_library_root_holds_only_the_errors_and_the_devices():
    root = Path(entrodrop.__file__).parent
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py", "devices.py", "errors.py"]


def test_no_folder_of_the_library_imports_one_that_imports_it_back():
    edges = _imports_between_folders()
    assert "storage" in edges["models"] and "models" in edges["data"]  # the walk sees the imports
    order = list(graphlib.TopologicalSorter(edges).static_order())  # raises CycleError on a circle
    assert order.index("errors") < order.index("models") < order.index("data") < order.index("method") < order.index("train")


def test_the_readmes_layout_table_names_every_module_of_the_library():
    root = Path(entrodrop.__file__).parent
    readme = (root.parent / "README.md").read_text()
    table = readme[readme.index("## Layout"):].split("\n## ")[0]
    modules = [p for p in root.rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) > 60 and [
        str(p.relative_to(root)) for p in modules if not re.search(rf"[`/]{re.escape(p.name)}`", table)] == []
