import importlib
import pkgutil

import entrodrop


def test_every_module_of_the_library_imports():
    names = [m.name for m in pkgutil.walk_packages(entrodrop.__path__, "entrodrop.")]
    assert "entrodrop.models.qwen3" in names and "entrodrop.checkpointing" in names
    for name in names:
        importlib.import_module(name)
