"""Check an entropy cache against the token store and the model of a precompute config.

    tune run recipes/verify_entropy_cache.py --config configs/tiny/qwen3_precompute_entropy.yaml

Reads the same config as the precompute. Any difference (a token store of another tokenizer,
corpus or max_seq_len, another checkpoint) is one error naming everything that differs and the
first sample where it does; nothing is written.

Manifests are not enough: a token file edited after it was written keeps its manifest. So every
token id of the token store is read back and hashed (``SampleStore.token_table``, about 2 s per
100M tokens) and checked against both tables: the token store's own (what it was written with)
and the entropy cache's (what the entropies were computed on). The error says which differs.
Every value of the cache is read too: each must be an entropy over the model's vocabulary
(finite, 0 to ln V; ``SampleStore.entropy_problems``), which a shard overwritten at its size is not.
"""

import sys

from omegaconf import DictConfig
from torchtune import config, utils

from entrodrop.config import cli, schemas
from entrodrop.data.entropy_cache import model_vocab_size
from entrodrop.data.fingerprints import entropy_cache_key
from entrodrop.data.sample_store import SAMPLES, SampleStore, mismatches
from entrodrop.errors import CacheMismatchError

log = utils.get_logger("INFO")


@cli.parse
def recipe_main(cfg: DictConfig) -> None:
    schemas.check(cfg, schemas.PRECOMPUTE, schemas.PRECOMPUTE_RULES, "precompute")
    cache = SampleStore(cfg.cache_dir, "entropy")
    tokens = SampleStore(cfg.target_tokens, "tokens")
    checkpointer = config.instantiate(cfg.checkpointer)  # reads config.json only
    key = entropy_cache_key(tokens, cfg.checkpointer.checkpoint_dir, checkpointer.weight_files)
    problems = [f"manifests: {p}" for p in mismatches(key, tokens.table, cache.key, cache.table)]
    actual = tokens.token_table()  # the ids in the token files, hashed
    fixes = []
    own = tokens.differences(actual, tokens.table)
    if own:
        problems += [f"the token ids in {tokens.dir} differ from its own table ({tokens.dir / SAMPLES}):"]
        problems += [f"  {p}" for p in own]
        fixes.append(f"the token store was changed after it was written: delete {tokens.dir} and re-run "
                     "recipes/tokenize_corpus.py, then this check")
    computed_on = tokens.differences(actual, cache.table)
    if computed_on:
        problems += [f"the token ids in {tokens.dir} differ from the table the entropy cache was computed on "
                     f"({cache.dir / SAMPLES}):"]
        problems += [f"  {p}" for p in computed_on]
    values = cache.entropy_problems(model_vocab_size(cfg.checkpointer.checkpoint_dir))
    if values:
        problems += list(values.values())
        fixes.append(f"delete {' '.join(str(path.parent) for path in values)} and re-run recipes/precompute_entropy.py "
                     "with the same config: it computes those shards again and keeps the others")
    if problems and not own and len(values) < len(problems):
        fixes.append("the cache was computed from other tokens or another model: point target_tokens and "
                     "checkpointer at what it was computed from, or re-run recipes/precompute_entropy.py into "
                     "a new cache_dir")
    if problems:
        raise CacheMismatchError(f"the entropy cache {cfg.cache_dir} does not match:\n  " + "\n  ".join(problems)
                                 + "".join(f"\nFix: {fix}" for fix in fixes))
    log.info(f"entropy cache {cfg.cache_dir} matches: {len(cache)} samples, {cache.manifest['num_tokens']} tokens; "
             f"the token ids in {tokens.dir} hash to its own table and to the cache's")


if __name__ == "__main__":
    sys.exit(recipe_main())
