"""The entropy cache recipes/precompute_entropy.py writes, checked before training reads it.

The cache is keyed by the model that computed it; ``check_cache_model`` refuses, at training
start-up, a cache of another model, and one holding a value that is no entropy over the model's
vocabulary (``model_vocab_size``). ``kept_shards`` says what a stopped precompute kept.
"""

import json
from pathlib import Path
from typing import Optional

from entrodrop.data.fingerprints import fingerprint_checkpoint
from entrodrop.data.sample_store import SampleStore, shards_written
from entrodrop.errors import CacheMismatchError, CheckpointError
from entrodrop.models.checkpointing import damaged_weights, find_weight_files


def model_vocab_size(checkpoint_dir: str) -> int:
    """The vocabulary of the Hugging Face checkpoint in ``checkpoint_dir`` (its config.json): the
    tokens each entropy is over, at most ln of it."""
    return json.loads((Path(checkpoint_dir) / "config.json").read_text())["vocab_size"]


def check_cache_model(checkpoint_dir: str, *caches: Optional[SampleStore]) -> None:
    """Refuse an entropy cache computed by another model than the one in ``checkpoint_dir``, at
    training start-up: the fingerprint recipes/verify_entropy_cache.py compares
    (``fingerprint_checkpoint``: config.json and three 1 MiB windows of each weight file,
    milliseconds; no forward pass) against the one in each cache's manifest. None: a cache
    the run does not read. Then every value of each cache is read once and refused unless it is
    an entropy over the model's vocabulary (``SampleStore.check_entropies``): the caches are of
    the target data, the small side of a run. The caches are open already (a token store given
    for one was refused as it opened: ``SampleStore(..., "entropy")``).

    Raises:
        CacheMismatchError: one line naming both fingerprints and the fix; or the shard files
            holding values that are no entropies, with how many, the first, and the fix.
        CheckpointError: a damaged weight file (an interrupted download), named as such rather
            than as another model.
    """
    caches = [cache for cache in caches if cache is not None]
    now = None
    for cache in caches:
        if now is None:
            damaged = damaged_weights(Path(checkpoint_dir))
            if damaged:
                raise CheckpointError(damaged)
            now = fingerprint_checkpoint(checkpoint_dir, find_weight_files(Path(checkpoint_dir)))
        if cache.key["model"] != now:
            raise CacheMismatchError(
                f"the entropy cache {cache.dir} was computed by another model (fingerprint {cache.key['model']}) than "
                f"checkpointer.checkpoint_dir={checkpoint_dir} (fingerprint {now}): point checkpoint_dir at the model "
                "that computed it, or re-run recipes/precompute_entropy.py with this one into a new cache_dir "
                "(recipes/verify_entropy_cache.py names everything that differs)")
    vocab_size = model_vocab_size(checkpoint_dir) if caches else None
    for cache in caches:
        cache.check_entropies(vocab_size)


def kept_shards(cache_dir: str) -> str:
    """What a precompute stopped by Ctrl-C keeps and how to go on, for the one line the recipe
    prints (``entrodrop.config.cli.reported``): the shards written (each is whole: it is renamed
    into place), which the same command keeps, computing the others."""
    done, total, _ = shards_written(cache_dir) or (0, 0, False)
    if done == 0:
        return f"no shard of the entropy cache {cache_dir} was written yet; run the same command again to compute it"
    return (f"{done} of {total} shards of the entropy cache {cache_dir} are written and kept; run the same command "
            f"again (the same cache_dir) to compute the other {total - done}")
