"""Tokenize a corpus once into a memory-mapped token store, so training never tokenizes.

    tune run recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml
    tune run --nproc_per_node 2 recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml

Each entry of ``corpora`` (the target corpus, the general corpus) becomes a store of int32
token ids (``entrodrop.sample_store``) cut to ``max_seq_len`` exactly as the entropy
precompute cuts them (``entrodrop.corpus.tokenize_sample``). Several processes take every
N-th pending shard; a killed run keeps its finished shards and the same command completes it.
"""

import os
import sys
import time

import numpy as np
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torchtune import config, utils

from entrodrop import schemas
from entrodrop.corpus import read_texts, tokenize_sample
from entrodrop.sample_store import SampleStoreWriter, cache_key, sample_table

log = utils.get_logger("INFO")


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    schemas.check(cfg, schemas.TOKENIZE, [], "tokenize")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    world_size, rank = utils.get_world_size_and_rank()
    tokenizer = config.instantiate(cfg.tokenizer)
    tokenizer_cfg = OmegaConf.to_container(cfg.tokenizer, resolve=True)

    for name, corpus in cfg.corpora.items():
        texts = read_texts(corpus.path, corpus.text_field)
        key = cache_key(None, [], tokenizer_cfg, corpus.path, corpus.text_field, cfg.max_seq_len)
        # One process creates (or checks) the manifest, then all list the pending shards
        # before any writes one.
        writer = None
        if rank == 0:
            writer = SampleStoreWriter(corpus.store_dir, "tokens", key, len(texts), cfg.samples_per_shard, create=True)
        if distributed:
            dist.barrier()
        writer = writer or SampleStoreWriter(corpus.store_dir, "tokens", key, len(texts), cfg.samples_per_shard, create=False)
        pending = writer.pending_shards()
        if distributed:
            dist.barrier()
        start, num_tokens = time.perf_counter(), 0
        for shard in pending[rank::world_size]:
            samples = [tokenize_sample(tokenizer, texts[i], cfg.max_seq_len) for i in writer.shard_samples(shard)]
            writer.write_shard(shard, [np.asarray(s, dtype=np.int32) for s in samples], sample_table(samples))
            num_tokens += sum(map(len, samples))
        seconds = time.perf_counter() - start
        log.info(f"{name} (rank {rank}): {len(pending[rank::world_size])} of {writer.num_shards} shards, "
                 f"{num_tokens} tokens in {seconds:.1f}s")
        if distributed:
            dist.barrier()
        if rank == 0:
            writer.finalize()
            log.info(f"{name}: token store complete at {corpus.store_dir}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(recipe_main())
