"""Shared fixtures: the repository root and the tiny offline assets."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"


def load_script(name: str):
    """Import ``scripts/<name>.py`` as a module (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_assets() -> Path:
    """``assets/tiny``, built by scripts/make_tiny_assets.py if `make` has not built it."""
    if not (TINY / ".built").exists():
        load_script("make_tiny_assets").main(TINY)
        (TINY / ".built").touch()
    return TINY
