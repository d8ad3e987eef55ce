"""Map between a Hugging Face ``config.json`` and the arguments of our model builders.

Two uses: writing the ``config.json`` of a checkpoint we create (the tiny test models), and
checking that the model a YAML config builds describes the checkpoint being loaded, so a
mismatch is an error that names the field rather than a shape error deep in
``load_state_dict``. ``model_config_problems`` reads the YAML's model off its build on the meta
device, so the config check finds a mismatch before any weight is read or allocated.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch
from torch import nn
from torchtune import config as tune_config
from torchtune.modules import TiedLinear

from entrodrop.errors import ConfigError
from entrodrop.models.families import FAMILIES


def hf_config(model_type: str, builder_args: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """The ``config.json`` of a model of the family ``model_type`` (a key of ``FAMILIES``) built
    with ``builder_args``; ``extra`` fields (dtype, token ids) are added last.

    Example:
        >>> hf_config("QWEN3", dict(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
        ...     embed_dim=16, intermediate_dim=32, max_seq_len=32, head_dim=8, norm_eps=1e-6,
        ...     rope_base=1e6, tie_word_embeddings=True))["architectures"]
        ['Qwen3ForCausalLM']
    """
    family = FAMILIES[model_type]
    config = {hf: builder_args[arg] for arg, hf in family.config_fields.items()}
    config.update(hidden_act="silu", attention_bias=False, max_position_embeddings=builder_args["max_seq_len"])
    config.update(family.config_extra(builder_args))
    config.update(extra)
    return config


def describe(model: nn.Module) -> Dict[str, Any]:
    """The ``config.json`` fields a built torchtune decoder implies, read off its modules."""
    attn = model.layers[0].attn
    return {
        "vocab_size": model.tok_embeddings.num_embeddings,
        "hidden_size": model.tok_embeddings.embedding_dim,
        "num_hidden_layers": len(model.layers),
        "num_attention_heads": attn.num_heads,
        "num_key_value_heads": attn.num_kv_heads,
        "head_dim": attn.head_dim,
        "intermediate_size": model.layers[0].mlp.w1.out_features,
        "rms_norm_eps": model.layers[0].sa_norm.eps,
        "rope_theta": attn.pos_embeddings.base,
        "tie_word_embeddings": isinstance(model.output, TiedLinear),
    }


def built_on_meta(model_cfg: Mapping[str, Any]) -> nn.Module:
    """The model a YAML ``model:`` entry builds, on the meta device: its shapes, no weight allocated.

    Raises:
        ConfigError: the builder refuses its arguments (an unknown one, heads that do not divide),
            with the builder's own reason.
    """
    try:
        with torch.device("meta"):
            return tune_config.instantiate(model_cfg)
    except (TypeError, ValueError, AssertionError) as error:
        raise ConfigError(f"model: {model_cfg.get('_component_')} cannot be built with these arguments: "
                          f"{type(error).__name__}: {error}") from None


def as_transformers_reads(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` with the fields it leaves out at Hugging Face's defaults
    (``head_dim = hidden_size // num_attention_heads``, untied embeddings), and the rotary base
    where transformers 5 writes it (inside ``rope_parameters``)."""
    expected = {
        "head_dim": config["hidden_size"] // config["num_attention_heads"],
        "tie_word_embeddings": False,
        **config,
    }
    if "rope_theta" in config.get("rope_parameters", {}):
        expected["rope_theta"] = config["rope_parameters"]["rope_theta"]
    return expected


def differences(model: nn.Module, config: Dict[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """config.json field -> (``model``'s value, ``config``'s as transformers reads it) for each
    field where they differ."""
    expected = as_transformers_reads(config)
    return {field: (value, expected[field]) for field, value in describe(model).items()
            if field in expected and value != expected[field]}


# config.json field -> the builder argument that sets it, in any family (some builders take a subset)
_ARGUMENT_OF = {hf: arg for family in FAMILIES.values() for arg, hf in family.config_fields.items()}


def _problem(model_cfg: Mapping[str, Any], field: str, ours: Any, theirs: Any, config_path: str) -> str:
    """One differing field, named by the builder argument that sets it where the YAML gives it."""
    arg = _ARGUMENT_OF[field]
    if model_cfg.get(arg, None) == ours:
        return (f"model.{arg}={ours}, but {config_path} has {field}: {theirs} (set model.{arg}={theirs}, or use a "
                "checkpoint of this model)")
    return (f"model._component_={model_cfg['_component_']} builds {field}={ours}, but {config_path} has {field}: "
            f"{theirs} (use the builder of the checkpoint's model, or a checkpoint of this one)")


def model_config_problems(model_cfg: Mapping[str, Any], config_paths: Sequence[str]) -> List[str]:
    """Every field where the model of ``model_cfg`` (a YAML ``model:`` entry) differs from each
    ``config.json`` of ``config_paths``, one line each, or nothing.

    The model is built on the meta device, so this runs with the config check: a model of
    another size than the checkpoint is named field by field before its weights are read. A
    config.json equal to one already compared (the checkpoints of one run) is not compared again.
    """
    model, seen, problems = built_on_meta(model_cfg), [], []
    for path in config_paths:
        config = json.loads(Path(path).read_text())
        if config not in seen:
            seen.append(config)
            problems += [_problem(model_cfg, field, ours, theirs, path)
                         for field, (ours, theirs) in differences(model, config).items()]
    return problems
