"""The small models that tests, the demo's checks and the CPU benchmarks build: each family's
tiny shape (``families.py``) over the tiny tokenizer's vocabulary (scripts/make_tiny_assets.py
trains it), and the larger Qwen3 the CPU benchmarks train."""

from entrodrop.models.families import FAMILIES
from entrodrop.models.qwen3._model_builders import QWEN3_SPECIAL_TOKENS

BPE_VOCAB_SIZE = 2048
# Special tokens follow the BPE vocabulary in Qwen3's order; the embedding is padded to a
# multiple of 64 as Qwen pads 151,669 tokens to 151,936.
NUM_SPECIAL = len(QWEN3_SPECIAL_TOKENS)
VOCAB_SIZE = -(-(BPE_VOCAB_SIZE + NUM_SPECIAL) // 64) * 64

# model_type -> the builder arguments of its tiny model: the family's shape, the tiny vocabulary
TINY = {name: {"vocab_size": VOCAB_SIZE, **family.tiny_shape} for name, family in FAMILIES.items()}
TINY_QWEN3, TINY_LLAMA3_1 = TINY["QWEN3"], TINY["LLAMA3"]  # the two the tests load by name
# The CPU benchmarks' model (benchmarks/bench_recipe.py, bench_loader.py); configs/demo trains
# a smaller one of its own.
DEMO_QWEN3 = dict(
    vocab_size=VOCAB_SIZE, num_layers=4, num_heads=8, num_kv_heads=4, embed_dim=256,
    intermediate_dim=768, max_seq_len=2048, head_dim=32, norm_eps=1e-6, rope_base=1_000_000.0,
    tie_word_embeddings=True,
)
