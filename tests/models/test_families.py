"""Every registered model family: its tiny checkpoint goes Hugging Face -> torchtune -> Hugging Face
unchanged, and the config.json it writes says everything the model check compares."""

import json

import pytest
import torch
from safetensors.torch import load_file

from entrodrop.models.checkpointing import SINGLE_FNAME, HFCheckpointer
from entrodrop.models.families import FAMILIES, Family
from entrodrop.models.hf_config import as_transformers_reads, describe, differences, hf_config

EVERY_FAMILY = pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES.keys())


@EVERY_FAMILY
def test_the_tiny_checkpoint_round_trips(family: Family, tiny_assets, make_tiny_assets, tmp_path):
    checkpoint = tiny_assets / family.tiny_dir
    checkpointer = HFCheckpointer(str(checkpoint), family.name, str(tmp_path))
    model = family.build(**make_tiny_assets.TINY[family.name])
    model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)  # every key, every shape
    saved = checkpointer.save_checkpoint({"model": model.state_dict()}, "step_1")
    original, written = load_file(checkpoint / SINGLE_FNAME), load_file(saved / SINGLE_FNAME)
    assert written.keys() == original.keys()
    for key in original:
        assert torch.equal(written[key], original[key]), key
    assert json.loads((saved / "config.json").read_text()) == json.loads((checkpoint / "config.json").read_text())


@EVERY_FAMILY
def test_config_json_names_every_field_the_model_check_compares(family: Family, make_tiny_assets):
    args = make_tiny_assets.TINY[family.name]
    config = hf_config(family.name, args)
    with torch.device("meta"):
        model = family.build(**args)
    # differences() skips a field that config.json lacks and transformers has no default for.
    assert describe(model).keys() <= as_transformers_reads(config).keys()
    assert differences(model, config) == {}


@EVERY_FAMILY
def test_every_builder_argument_is_in_config_json(family: Family, make_tiny_assets):
    """A builder argument that config.json does not record would be lost on the way to transformers."""
    args = make_tiny_assets.TINY[family.name]
    config = hf_config(family.name, args)
    for arg, value in args.items():
        other = (not value) if isinstance(value, bool) else value * 2
        assert hf_config(family.name, {**args, arg: other}) != config, arg
