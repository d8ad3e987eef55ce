"""Every YAML under configs/ is valid for torchtune and names a recipe that exists."""

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from torchtune import config

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))
LAUNCH = re.compile(r"tune run (?:--nproc_per_node \d+ )?(recipes/\w+\.py) --config (\S+)")


def test_there_are_configs_for_the_papers_models():
    names = {p.relative_to(REPO / "configs").as_posix() for p in CONFIGS}
    assert {"qwen3/0.6B_smoke.yaml", "qwen3/1.7B_smoke.yaml", "llama3_1/8B_instruct_smoke.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_config_validates_and_names_its_recipe(path):
    cfg = OmegaConf.load(path)
    config.validate(cfg)  # what `tune validate` runs: every _component_ resolves and binds
    OmegaConf.to_container(cfg, resolve=True)  # every ${...} interpolation resolves
    launches = LAUNCH.findall(path.read_text())
    assert launches, f"{path} does not open with the `tune run` command that launches it"
    for recipe, config_path in launches:
        assert (REPO / recipe).is_file(), recipe
        assert config_path == path.relative_to(REPO).as_posix()
