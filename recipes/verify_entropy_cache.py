"""Check an entropy cache against the corpus, tokenizer, model and max_seq_len of a config.

    tune run recipes/verify_entropy_cache.py --config configs/tiny/qwen3_precompute_entropy.yaml

Reads the same config as the precompute. Any difference (another tokenizer, an edited
corpus, another max_seq_len, another checkpoint) is one error naming everything that differs
and the first sample where it does; nothing is written.
"""

import sys

from omegaconf import DictConfig, OmegaConf
from torchtune import config, utils

from entrodrop.corpus import tokenize_corpus
from entrodrop.sample_store import SampleStore, cache_key, sample_table

log = utils.get_logger("INFO")


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    cache = SampleStore(cfg.cache_dir, "entropy")
    tokenizer = config.instantiate(cfg.tokenizer)
    samples = tokenize_corpus(tokenizer, cfg.dataset.path, cfg.dataset.text_field, cfg.max_seq_len)
    checkpointer = config.instantiate(cfg.checkpointer)  # reads config.json only
    key = cache_key(
        cfg.checkpointer.checkpoint_dir,
        checkpointer.weight_files,
        OmegaConf.to_container(cfg.tokenizer, resolve=True),
        cfg.dataset.path,
        cfg.dataset.text_field,
        cfg.max_seq_len,
    )
    cache.verify(key, sample_table(samples))
    log.info(f"entropy cache {cfg.cache_dir} matches: {len(cache)} samples, "
             f"{cache.manifest['num_tokens']} tokens")


if __name__ == "__main__":
    sys.exit(recipe_main())
