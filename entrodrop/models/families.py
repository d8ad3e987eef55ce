"""The model families a checkpoint may hold, one entry each in ``FAMILIES``: how to build the
model, how its weights are named on the Hugging Face side, what its ``config.json`` says, and the
shape of its tiny test model. Code that depends on the family reads it from here.

A family's key is what the configs give as ``checkpointer.model_type`` (``"QWEN3"``). Adding a
family is an entry here, its configs under ``configs/``, and its parity test against transformers
(``tests/models/test_parity.py``); the checkpointer, the config check, the tiny assets and the
round-trip test of every family read it from this table.

Builders and converters import their model code only when called: the config check imports this
table for the family names, and torchtune's model code is slow to import.

Example:
    >>> FAMILIES["QWEN3"].config_fields["embed_dim"]
    'hidden_size'
"""

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping

# A state dict, Hugging Face's or torchtune's: parameter name -> torch.Tensor (not imported here).
StateDict = Dict[str, Any]
# (state dict, the checkpoint's config.json) -> the state dict under the other side's names.
Converter = Callable[[StateDict, Mapping[str, Any]], StateDict]


@dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        name: ``checkpointer.model_type`` in the configs, and the key in ``FAMILIES``.
        builder: import path of the component builder that takes the builder arguments below.
        hf_to_tune: Hugging Face parameter names to torchtune's.
        tune_to_hf: torchtune parameter names to Hugging Face's (inverse of ``hf_to_tune``).
        config_fields: builder argument -> the ``config.json`` field it sets.
        config_extra: builder arguments -> the rest of the family's ``config.json`` (architecture,
            Hugging Face ``model_type``, fields the builder fixes).
        tiny_dir: the directory of its tiny test model under ``assets/tiny``.
        tiny_shape: the tiny model's builder arguments, less ``vocab_size`` (the tiny tokenizer's).
        tiny_seed: the seed of the tiny model's random weights.
    """

    name: str
    builder: str
    hf_to_tune: Converter
    tune_to_hf: Converter
    config_fields: Mapping[str, str]
    config_extra: Callable[[Mapping[str, Any]], Dict[str, Any]]
    tiny_dir: str
    tiny_shape: Mapping[str, Any]
    tiny_seed: int

    def build(self, **builder_args: Any) -> Any:
        """The family's model (a torchtune ``TransformerDecoder``) built from ``builder_args``."""
        module, _, function = self.builder.rpartition(".")
        return getattr(importlib.import_module(module), function)(**builder_args)


# builder argument -> config.json field, for the fields the families below share
_SHARED_FIELDS = {
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "embed_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
}


def _qwen3_hf_to_tune(state_dict: StateDict, config: Mapping[str, Any]) -> StateDict:
    from entrodrop.models.qwen3._convert_weights import qwen3_hf_to_tune

    return qwen3_hf_to_tune(state_dict, tie_word_embeddings=config["tie_word_embeddings"])


def _qwen3_tune_to_hf(state_dict: StateDict, config: Mapping[str, Any]) -> StateDict:
    from entrodrop.models.qwen3._convert_weights import qwen3_tune_to_hf

    return qwen3_tune_to_hf(state_dict)


def _qwen3_config(builder_args: Mapping[str, Any]) -> Dict[str, Any]:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}


def _attention_shape(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The arguments torchtune's Llama conversion needs to (un)permute q and k."""
    return dict(
        num_heads=config["num_attention_heads"],
        num_kv_heads=config["num_key_value_heads"],
        dim=config["hidden_size"],
        head_dim=config.get("head_dim"),
    )


def _llama3_hf_to_tune(state_dict: StateDict, config: Mapping[str, Any]) -> StateDict:
    from torchtune.models import convert_weights

    if config.get("tie_word_embeddings", False):
        state_dict = {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
    return convert_weights.hf_to_tune(state_dict, **_attention_shape(config))


def _llama3_tune_to_hf(state_dict: StateDict, config: Mapping[str, Any]) -> StateDict:
    from torchtune.models import convert_weights

    return convert_weights.tune_to_hf(state_dict, **_attention_shape(config))


# torchtune's Llama3ScaledRoPE fixes these; only scale_factor is a builder argument.
_LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}


def _llama3_config(builder_args: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "tie_word_embeddings": False,  # llama3_1() always builds a separate output projection
        "rope_scaling": {"factor": float(builder_args["scale_factor"]), **_LLAMA3_ROPE_SCALING},
    }


FAMILIES: Dict[str, Family] = {f.name: f for f in [
    Family(
        name="QWEN3",
        builder="entrodrop.models.qwen3.qwen3",
        hf_to_tune=_qwen3_hf_to_tune,
        tune_to_hf=_qwen3_tune_to_hf,
        config_fields={**_SHARED_FIELDS, "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"},
        config_extra=_qwen3_config,
        tiny_dir="qwen3",
        # tied embeddings, head_dim != embed_dim / num_heads, grouped-query attention: what a
        # conversion or a head lookup could get wrong
        tiny_shape=dict(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=192,
                        max_seq_len=2048, head_dim=32, norm_eps=1e-6, rope_base=1_000_000.0,
                        tie_word_embeddings=True),
        tiny_seed=0,
    ),
    # Llama 3.1 is torchtune's own model and conversion, which permute q and k.
    Family(
        name="LLAMA3",
        builder="torchtune.models.llama3_1.llama3_1",
        hf_to_tune=_llama3_hf_to_tune,
        tune_to_hf=_llama3_tune_to_hf,
        config_fields=_SHARED_FIELDS,
        config_extra=_llama3_config,
        tiny_dir="llama3_1",
        # untied output projection, llama3 rope scaling
        tiny_shape=dict(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=192,
                        max_seq_len=131_072, norm_eps=1e-5, rope_base=500_000, scale_factor=8),
        tiny_seed=1,
    ),
]}
