"""Check an entropy cache against the token store and the model of a precompute config.

    tune run recipes/verify_entropy_cache.py --config configs/tiny/qwen3_precompute_entropy.yaml

Reads the same config as the precompute. Any difference (a token store of another tokenizer,
corpus or max_seq_len, another checkpoint) is one error naming everything that differs and the
first sample where it does; nothing is written.
"""

import sys

from omegaconf import DictConfig
from torchtune import config, utils

from entrodrop import schemas
from entrodrop.sample_store import SampleStore, entropy_cache_key

log = utils.get_logger("INFO")


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    schemas.check(cfg, schemas.PRECOMPUTE, schemas.PRECOMPUTE_RULES, "precompute")
    cache = SampleStore(cfg.cache_dir, "entropy")
    tokens = SampleStore(cfg.target_tokens, "tokens")
    checkpointer = config.instantiate(cfg.checkpointer)  # reads config.json only
    cache.verify(entropy_cache_key(tokens, cfg.checkpointer.checkpoint_dir, checkpointer.weight_files), tokens.table)
    log.info(f"entropy cache {cfg.cache_dir} matches: {len(cache)} samples, "
             f"{cache.manifest['num_tokens']} tokens")


if __name__ == "__main__":
    sys.exit(recipe_main())
