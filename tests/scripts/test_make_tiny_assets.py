"""The Makefile rebuilds ``assets/tiny`` when what scripts/make_tiny_assets.py reads changes: its
``ASSET_SOURCES`` hold every library module the script imports, followed transitively."""

import ast
import shutil
import subprocess
from pathlib import Path
from typing import Set

import pytest
from conftest import REPO

from entrodrop.models.families import FAMILIES


def module_file(name: str) -> Path:
    """The repository file of the ``entrodrop`` module or package ``name``, or None."""
    path = REPO.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(source: Path) -> Set[str]:
    """Every ``entrodrop`` module ``source`` imports, at its top or inside a function, with the
    packages above each (importing ``a.b.c`` runs ``a`` and ``a.b`` first) and the ``from`` names
    that are modules themselves."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{source}: a relative import, which this test does not follow"
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    parts = [name.split(".") for name in names if name.split(".")[0] == "entrodrop"]
    return {".".join(p[:i]) for p in parts for i in range(1, len(p) + 1) if module_file(".".join(p[:i]))}


def read_by_make_tiny_assets() -> Set[Path]:
    """The library files scripts/make_tiny_assets.py runs: its imports, theirs in turn, and the
    builders the model families import by name when a model is built (``Family.build``)."""
    todo = {REPO / "scripts" / "make_tiny_assets.py"}
    todo |= {module_file(f.builder.rpartition(".")[0]) for f in FAMILIES.values() if f.builder.startswith("entrodrop.")}
    seen = set()
    while todo:
        source = todo.pop()
        seen.add(source)
        todo |= {module_file(name) for name in imported(source)} - seen
    return seen


def test_the_makefile_rebuilds_the_tiny_assets_when_what_they_are_made_from_changes():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    listed = subprocess.run([make, "-s", "--no-print-directory", "--eval", "print-asset-sources: ; @echo $(ASSET_SOURCES)",
                             "print-asset-sources"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    read = {str(path.relative_to(REPO)) for path in read_by_make_tiny_assets()}
    assert "entrodrop/models/qwen3/_component_builders.py" in read  # the walk reaches a builder's own imports
    assert not read - set(listed), f"add to ASSET_SOURCES in the Makefile: {sorted(read - set(listed))}"
