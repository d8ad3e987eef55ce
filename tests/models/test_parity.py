"""Our models, loaded from checkpoints that transformers wrote, give transformers' logits.

Every weight, RMSNorm scales included, is perturbed away from its initial value: with unit
norm scales, Qwen3's q/k norm commutes with the rotary embedding (a rotation keeps the RMS),
and a norm applied after RoPE would pass unnoticed.
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torchtune.models.llama3_1 import llama3_1

from entrodrop.models.checkpointing import INDEX_FNAME, HFCheckpointer, find_weight_files
from entrodrop.models.families import FAMILIES
from entrodrop.models.hf_config import differences
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.qwen3._convert_weights import qwen3_hf_to_tune

transformers = pytest.importorskip("transformers")

VOCAB = 256
LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def random_reference(model_cls, config, seed: int):
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


def hf_weights(directory: Path) -> dict:
    return {k: v for f in find_weight_files(directory) for k, v in load_file(directory / f).items()}


def check_parity_and_round_trip(reference, model, model_type: str, tmp_path, shard=None) -> None:
    """Load what transformers wrote into ``model``, compare logits, save back, compare tensors,
    and load our save in transformers again."""
    src = tmp_path / "hf"
    reference.save_pretrained(src, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert len(find_weight_files(src)) > 1, "the case meant to test several shards has one"
    checkpointer = HFCheckpointer(str(src), model_type, str(tmp_path / "out"))
    assert differences(model, checkpointer.config) == {}
    model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)

    tokens = torch.randint(0, VOCAB, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = reference(tokens).logits
        torch.testing.assert_close(model(tokens), expected, atol=1e-4, rtol=0)

    saved = checkpointer.save_checkpoint({"model": model.state_dict()}, "step_1")
    original, written = hf_weights(src), hf_weights(saved)
    assert written.keys() == original.keys()
    for key in original:
        assert torch.equal(written[key], original[key]), key
    assert json.loads((saved / "config.json").read_text()) == json.loads((src / "config.json").read_text())
    assert len(find_weight_files(saved)) == len(find_weight_files(src))
    # A checkpointer that never loaded (a resumed run's) keeps the split too.
    again = HFCheckpointer(str(src), model_type, str(tmp_path / "out")).save_checkpoint(
        {"model": model.state_dict()}, "step_2")
    assert (again / INDEX_FNAME).exists() == (saved / INDEX_FNAME).exists()
    if (saved / INDEX_FNAME).exists():
        assert json.loads((again / INDEX_FNAME).read_text()) == json.loads((saved / INDEX_FNAME).read_text())
    with torch.no_grad():
        reloaded = type(reference).from_pretrained(saved).eval()
        torch.testing.assert_close(reloaded(tokens).logits, expected, atol=0, rtol=0)


QWEN3_CASES = {
    # name: (tied, num_kv_heads, head_dim, max_shard_size)
    "tied-gqa-wide-heads": (True, 2, 32, None),
    "untied-mha": (False, 4, 16, None),
    "tied-gqa-sharded": (True, 1, 24, "60KB"),
}


@pytest.mark.parametrize("case", QWEN3_CASES)
def test_qwen3_matches_transformers_and_round_trips(case, tmp_path):
    tied, num_kv_heads, head_dim, shard = QWEN3_CASES[case]
    config = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=head_dim,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
        tie_word_embeddings=tied,
    )
    reference = random_reference(transformers.Qwen3ForCausalLM, config, seed=len(case))
    model = qwen3(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=num_kv_heads,
                  embed_dim=64, intermediate_dim=96, max_seq_len=512, head_dim=head_dim,
                  norm_eps=1e-6, rope_base=1_000_000.0, tie_word_embeddings=tied).eval()
    check_parity_and_round_trip(reference, model, "QWEN3", tmp_path, shard)


def test_llama3_1_matches_transformers_and_round_trips(tmp_path):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=131_072,
        rms_norm_eps=1e-5, rope_theta=500_000.0, rope_scaling=LLAMA3_ROPE_SCALING,
        tie_word_embeddings=False,
    )
    reference = random_reference(transformers.LlamaForCausalLM, config, seed=7)
    model = llama3_1(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64,
                     intermediate_dim=96, max_seq_len=131_072, norm_eps=1e-5,
                     rope_base=500_000, scale_factor=8).eval()
    check_parity_and_round_trip(reference, model, "LLAMA3", tmp_path)


@pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES.keys())
def test_tiny_assets_load_in_transformers_with_our_logits(tiny_assets, make_tiny_assets, family, tmp_path):
    args, checkpoint = make_tiny_assets.TINY[family.name], tiny_assets / family.tiny_dir
    checkpointer = HFCheckpointer(str(checkpoint), family.name, str(tmp_path))
    model = family.build(**args).eval()
    model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)
    (model_cls,) = checkpointer.config["architectures"]
    reference = getattr(transformers, model_cls).from_pretrained(checkpoint).eval()
    tokens = torch.randint(0, args["vocab_size"], (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), reference(tokens).logits, atol=1e-4, rtol=0)


# Published config.json values of Qwen/Qwen3-0.6B and Qwen/Qwen3-1.7B.
PUBLISHED_QWEN3 = {
    "qwen3_0_6b": dict(hidden_size=1024, intermediate_size=3072),
    "qwen3_1_7b": dict(hidden_size=2048, intermediate_size=6144),
}


@pytest.mark.parametrize("builder", PUBLISHED_QWEN3)
def test_full_size_qwen3_has_the_published_shapes(builder):
    import entrodrop.models.qwen3 as qwen3_models

    config = transformers.Qwen3Config(
        vocab_size=151_936, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, max_position_embeddings=40_960, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
        tie_word_embeddings=True, **PUBLISHED_QWEN3[builder],
    )
    with torch.device("meta"):
        reference = transformers.Qwen3ForCausalLM(config)
        model = getattr(qwen3_models, builder)()
    expected = {k: v.shape for k, v in qwen3_hf_to_tune(reference.state_dict(), True).items()}
    assert {k: v.shape for k, v in model.state_dict().items()} == expected
    assert differences(model, config.to_dict()) == {}
