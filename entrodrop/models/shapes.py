"""The paper's models at their published shapes, as builder arguments.

``entrodrop.models.qwen3.qwen3(**QWEN3_0_6B)`` is ``qwen3_0_6b()``;
``torchtune.models.llama3_1.llama3_1(**LLAMA3_1_8B)`` is torchtune's ``llama3_1_8b()``.
``entrodrop.models.hf_config.hf_config`` turns them into a ``config.json``, so benchmarks build
random-weight checkpoints of these shapes without the hub.
"""

QWEN3_0_6B = dict(vocab_size=151_936, num_layers=28, num_heads=16, num_kv_heads=8, embed_dim=1024,
                  intermediate_dim=3072, max_seq_len=40_960, head_dim=128, norm_eps=1e-6, rope_base=1_000_000.0,
                  tie_word_embeddings=True)
QWEN3_1_7B = {**QWEN3_0_6B, "embed_dim": 2048, "intermediate_dim": 6144}
LLAMA3_1_8B = dict(vocab_size=128_256, num_layers=32, num_heads=32, num_kv_heads=8, embed_dim=4096,
                   intermediate_dim=14_336, max_seq_len=131_072, norm_eps=1e-5, rope_base=500_000, scale_factor=8)
