"""Map between a Hugging Face ``config.json`` and the arguments of our model builders.

Two uses: writing the ``config.json`` of a checkpoint we create (the tiny test models), and
checking that the model a YAML config builds describes the checkpoint being loaded, so a
mismatch is an error that names the field rather than a shape error deep in
``load_state_dict``.
"""

from typing import Any, Dict

from torch import nn
from torchtune.modules import TiedLinear

# builder argument -> config.json field, shared by Qwen3 and Llama3.1
_COMMON = {
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "embed_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
}
_FIELDS = {
    "QWEN3": {**_COMMON, "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"},
    "LLAMA3": _COMMON,
}
# torchtune's Llama3ScaledRoPE fixes these; only scale_factor is a builder argument.
_LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}


def hf_config(model_type: str, builder_args: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """The ``config.json`` of a model built with ``builder_args`` (``qwen3(...)`` or ``llama3_1(...)``).

    Example:
        >>> hf_config("QWEN3", dict(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
        ...     embed_dim=16, intermediate_dim=32, max_seq_len=32, head_dim=8, norm_eps=1e-6,
        ...     rope_base=1e6, tie_word_embeddings=True))["architectures"]
        ['Qwen3ForCausalLM']
    """
    config = {hf: builder_args[arg] for arg, hf in _FIELDS[model_type].items()}
    config.update(hidden_act="silu", attention_bias=False, max_position_embeddings=builder_args["max_seq_len"])
    if model_type == "QWEN3":
        config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    else:
        config.update(
            architectures=["LlamaForCausalLM"],
            model_type="llama",
            tie_word_embeddings=False,
            rope_scaling={"factor": float(builder_args["scale_factor"]), **_LLAMA3_ROPE_SCALING},
        )
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


def check_matches_checkpoint(model: nn.Module, config: Dict[str, Any], config_path: str) -> None:
    """Raise one ``ValueError`` naming every field where ``model`` disagrees with ``config.json``.

    This turns a YAML ``model:`` entry that does not describe the checkpoint (another size,
    another family) into an error before any weight is loaded. Fields that ``config.json``
    leaves out take Hugging Face's defaults: ``head_dim = hidden_size // num_attention_heads``
    and untied embeddings.
    """
    expected = {
        "head_dim": config["hidden_size"] // config["num_attention_heads"],
        "tie_word_embeddings": False,
        **config,
    }
    # transformers 5 writes the rotary base inside "rope_parameters".
    if "rope_theta" in config.get("rope_parameters", {}):
        expected["rope_theta"] = config["rope_parameters"]["rope_theta"]
    problems = [
        f"{field}: model has {value}, {config_path} says {expected[field]}"
        for field, value in describe(model).items()
        if field in expected and value != expected[field]
    ]
    if problems:
        raise ValueError(
            "the model in the config does not match the checkpoint:\n  " + "\n  ".join(problems)
        )
