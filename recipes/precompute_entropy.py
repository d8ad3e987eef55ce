"""Precompute each target token's contextual entropy under the base model, once.

    tune run recipes/precompute_entropy.py --config configs/tiny/qwen3_precompute_entropy.yaml
    tune run --nproc_per_node 2 recipes/precompute_entropy.py --config <same>

The samples are read from the target corpus's token store (recipes/tokenize_corpus.py), the
very tokens the training loader reads; the entropies are computed with the output projection
applied in chunks of tokens and of vocabulary (memory independent of batch x sequence x
vocabulary), and written to a sharded fp16 cache (``entrodrop.data.sample_store``) whose key is
the token store's plus the model's. With ``pack_len`` the samples are packed whole into rows
of ``pack_len`` tokens with a block-causal mask, as training packs them: one batch shape
(what ``compile`` wants) and almost no padding; with ``pack_len: null`` they are batched by
length. The cache is the same either way, to rounding.

Several processes each hold a full copy of the model and take every N-th pending shard; a
shard's batches do not depend on how many processes run, so the cache is the same. A run
that is killed keeps its finished shards; running the same command again computes the rest.
"""

import os
import sys
from pathlib import Path

import torch.distributed as dist
from omegaconf import DictConfig
from torchtune import config, training, utils
from tqdm import tqdm

from entrodrop import devices
from entrodrop.config import cli, schemas
from entrodrop.data.entropy_cache import kept_shards
from entrodrop.data.fingerprints import entropy_cache_key
from entrodrop.data.sample_store import SampleStore, SampleStoreWriter, sample_table
from entrodrop.errors import OutputDirError
from entrodrop.method.entropy import shard_entropies
from entrodrop.method.throughput import Throughput
from entrodrop.storage.files import refused_on_every_rank, release_dir_lock, take_dir_lock

log = utils.get_logger("INFO")


class PrecomputeEntropyRecipe:
    """Open the token store, open or resume the cache, and fill this process's shards."""

    def __init__(self, cfg: DictConfig) -> None:
        schemas.check(cfg, schemas.PRECOMPUTE, schemas.PRECOMPUTE_RULES, "precompute")
        self._device = devices.get_device(cfg.device)  # refuses a device torch cannot use
        self._dtype = training.get_dtype(cfg.dtype, device=self._device)
        self._distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if self._distributed:
            dist.init_process_group(devices.process_group_backend(self._device))
        self._world_size, self._rank = utils.get_world_size_and_rank()
        self._batch_size = cfg.batch_size
        self._chunk_size = cfg.chunk_size
        self._vocab_chunk_size = cfg.vocab_chunk_size
        self._pack_len = cfg.pack_len
        self._cache_dir, self._lock = Path(cfg.cache_dir), None  # held from setup to the end (release)

    def _barrier(self) -> None:
        if self._distributed:
            dist.barrier()

    def setup(self, cfg: DictConfig) -> None:
        # One precompute writes a cache at a time: rank 0 holds cache_dir for every rank until the cache is whole.
        refused = None
        if self._rank == 0:
            try:
                self._lock = take_dir_lock(self._cache_dir, "cache_dir")
            except OutputDirError as error:
                refused = error
        refused_on_every_rank(refused, self._distributed)
        self._tokens = SampleStore(cfg.target_tokens, "tokens")
        checkpointer = config.instantiate(cfg.checkpointer)
        key = entropy_cache_key(self._tokens, cfg.checkpointer.checkpoint_dir, checkpointer.weight_files)
        # One process creates (or checks) the manifest before the others read it, and
        # every process lists the pending shards before any process writes a new one.
        if self._rank == 0:
            self._writer = SampleStoreWriter(cfg.cache_dir, "entropy", key, len(self._tokens), cfg.samples_per_shard, create=True)
        self._barrier()
        if self._rank != 0:
            self._writer = SampleStoreWriter(cfg.cache_dir, "entropy", key, len(self._tokens), cfg.samples_per_shard,
                                             create=False)
        pending = self._writer.pending_shards()
        self._barrier()
        self._shards = pending[self._rank :: self._world_size]
        batches = (f"{self._batch_size} samples a batch, batched by length" if self._pack_len is None
                   else f"{self._batch_size} rows of {self._pack_len} tokens a batch, samples packed whole")
        log.info(
            f"rank {self._rank}: {len(self._tokens)} samples, {self._tokens.manifest['num_tokens']} tokens, "
            f"{self._writer.num_shards - len(pending)} of {self._writer.num_shards} shards already "
            f"cached, {len(self._shards)} to compute here, {batches}"
        )
        if not self._shards:
            return
        with training.set_default_dtype(self._dtype), self._device:
            model = config.instantiate(cfg.model)
        model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)
        if cfg.compile:
            # Per layer, as training compiles: layerwise_hidden_states calls the layers one by one.
            training.compile_model(model, verbose=self._rank == 0)
        self._model = model.eval()

    def run(self) -> None:
        lengths = self._tokens.table["length"]
        total = int(sum(lengths[i] for s in self._shards for i in self._writer.shard_samples(s)))
        progress = tqdm(total=total, unit="tok", unit_scale=True, disable=self._rank != 0,
                        desc=f"entropy ({self._world_size} proc)")
        # The compile warm-up (first batches) apart: the figure to compare is the steady state.
        throughput = Throughput()

        def on_batch(num_tokens: int) -> None:
            progress.update(num_tokens)
            throughput(num_tokens)

        for shard in self._shards:
            samples = [self._tokens[i] for i in self._writer.shard_samples(shard)]
            entropies = shard_entropies(self._model, samples, self._batch_size, self._chunk_size,
                                        self._vocab_chunk_size, self._pack_len, on_batch=on_batch)
            self._writer.write_shard(shard, [h.numpy() for h in entropies], sample_table(samples))
        progress.close()
        if self._shards:
            log.info(f"rank {self._rank}: {throughput.summary()}")
        self._barrier()
        if self._rank == 0:
            self._writer.finalize()
            log.info(f"entropy cache complete: {self._writer.dir}")

    def release(self) -> None:
        """Let go of cache_dir (rank 0), whether the cache is whole or the run failed; a cache_dir
        this run made and wrote nothing into goes too."""
        if self._lock is not None:
            release_dir_lock(self._lock)
            self._lock = None
            if not any(self._cache_dir.iterdir()):
                self._cache_dir.rmdir()

    def cleanup(self) -> None:
        if self._distributed:
            dist.barrier()  # no rank tears gloo down while rank 0 still finalizes the cache
            dist.destroy_process_group()


@cli.parse(how_to_go_on=lambda cfg: kept_shards(cfg.cache_dir))  # what Ctrl-C leaves
def recipe_main(cfg: DictConfig) -> None:
    recipe = PrecomputeEntropyRecipe(cfg)
    try:
        recipe.setup(cfg)
        recipe.run()
    finally:
        recipe.release()
    recipe.cleanup()


if __name__ == "__main__":
    sys.exit(recipe_main())
