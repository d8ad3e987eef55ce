"""A YAML ``model:`` entry that does not describe the checkpoint's config.json is a config problem,
found with the config check (before any weight loads), naming every differing field."""

import json

import pytest
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.config import schemas
from entrodrop.errors import ConfigError
from entrodrop.models.hf_config import built_on_meta, model_config_problems

TINY = "configs/tiny/qwen3_{}.yaml"


@pytest.mark.parametrize("what, schema, rules", [
    ("entrodrop_single_device", schemas.TRAINING, schemas.TRAINING_RULES),
    ("precompute_entropy", schemas.PRECOMPUTE, schemas.PRECOMPUTE_RULES),
    ("smoke", schemas.SMOKE, schemas.SMOKE_RULES),
])
def test_every_builder_argument_that_differs_from_config_json_is_one_config_problem(tiny_assets, what, schema,
                                                                                     rules):
    """It was a ValueError traceback, raised once the checkpoint's weights had been read."""
    cfg = OmegaConf.load(REPO / TINY.format(what))
    cfg.model.num_layers, cfg.model.intermediate_dim = 3, 128
    with pytest.raises(ConfigError) as e:
        schemas.check(cfg, schema, rules, what)
    config_json = "assets/tiny/qwen3/config.json"
    for line in (f"model.num_layers=3, but {config_json} has num_hidden_layers: 2 (set model.num_layers=2, or use a "
                 "checkpoint of this model)",
                 f"model.intermediate_dim=128, but {config_json} has intermediate_size: 192 (set "
                 "model.intermediate_dim=192, or use a checkpoint of this model)"):
        assert f"\n  {line}" in str(e.value), str(e.value)


def test_a_builder_without_arguments_is_named_by_its_component(tiny_assets, tmp_path):
    """qwen3_0_6b() sets its sizes inside; checkpoints of one run (one config.json) are compared once."""
    for step in (1, 2):
        (tmp_path / f"step_{step}").mkdir()
        (tmp_path / f"step_{step}" / "config.json").write_text((tiny_assets / "qwen3" / "config.json").read_text())
    problems = model_config_problems(OmegaConf.create({"_component_": "entrodrop.models.qwen3.qwen3_0_6b"}),
                                     [str(tmp_path / "step_1" / "config.json"), str(tmp_path / "step_2" / "config.json")])
    config = json.loads((tiny_assets / "qwen3" / "config.json").read_text())
    assert f"model._component_=entrodrop.models.qwen3.qwen3_0_6b builds num_hidden_layers=28, but {tmp_path}/step_1/" \
           f"config.json has num_hidden_layers: {config['num_hidden_layers']} (use the builder of the checkpoint's " \
           "model, or a checkpoint of this one)" in problems
    # every size differs; the norm's eps, the rotary base and the tied embeddings do not
    assert len(problems) == 7 and not any("step_2" in p for p in problems), problems


def test_builder_arguments_the_builder_refuses_are_a_config_error_with_its_reason():
    model = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml").model
    model.num_kv_heads = 3  # was: a ValueError traceback from the meta build
    with pytest.raises(ConfigError, match=r"model: entrodrop.models.qwen3.qwen3 cannot be built with these arguments: "
                                          r"ValueError: num_heads \(4\) must be divisible by num_kv_heads \(3\)"):
        built_on_meta(model)
