"""entrodrop.experiments.tiny_data: what is there complete is read, what is missing is made."""

import shutil
from pathlib import Path

import pytest

from entrodrop.experiments import tiny_data


def test_a_folder_already_made_is_read_and_a_missing_cache_alone_is_made(data, monkeypatch, tmp_path):
    root = Path(dict(o.split("=", 1) for o in data)["data.target_tokens"]).parent
    monkeypatch.setattr(tiny_data, "tune", lambda *args, **env: pytest.fail(f"tune run {args}"))
    assert tiny_data.tiny_data(root) == data

    copy = tmp_path / "data"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("entropy_*"))  # entropy_val, and what benchmarks add
    ran = []
    monkeypatch.setattr(tiny_data, "tune", lambda *args, **env: ran.append(args))
    tiny_data.tiny_data(copy)
    assert ran == [("recipes/precompute_entropy.py", "--config", tiny_data.PRECOMPUTE, f"target_tokens={copy}/target_val",
                    f"cache_dir={copy}/entropy_val")]
    ran.clear()
    assert tiny_data.entropy_cache(copy, "other", "a.yaml", ["x=1"]) == copy / "entropy_other"
    assert ran == [("recipes/precompute_entropy.py", "--config", "a.yaml", "x=1", f"target_tokens={copy}/target",
                    f"cache_dir={copy}/entropy_other")]
