"""Tokenize a corpus once into a memory-mapped token store, so training never tokenizes.

    tune run recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml
    tune run --nproc_per_node 2 recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml

Each entry of ``corpora`` (the target corpus, the general corpus) becomes a store of int32
token ids (``entrodrop.sample_store``) cut to ``max_seq_len`` exactly as the entropy
precompute cuts them (``entrodrop.corpus.tokenize_sample``). Several processes take every
N-th pending shard; a killed run keeps its finished shards and the same command completes it.

Every corpus file is read and checked before any store is written: a corpus without one
non-blank sample is refused, naming it and its file; a byte-order mark, blank lines and bytes
that are not UTF-8 are logged (``entrodrop.corpus.read_corpus``).
"""

import os
import sys
import time

import numpy as np
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torchtune import config, utils

from entrodrop import schemas
from entrodrop.corpus import CorpusError, CorpusRead, read_corpus, tokenize_sample
from entrodrop.sample_store import SampleStoreWriter, cache_key, sample_table

log = utils.get_logger("INFO")


def describe(name: str, path: str, read: CorpusRead) -> list:
    """Log lines for what reading a corpus found: its size, and whatever was repaired or skipped."""
    notes = [f"{name}: {path}: {len(read.texts)} samples, {read.nonblank} non-blank"]
    if read.bom:
        notes.append(f"{name}: {path}: skipped the UTF-8 byte-order mark at its start")
    if read.blank_lines:
        notes.append(f"{name}: {path}: {read.blank_lines} blank lines kept as empty samples at their line")
    if read.trailing_blank_lines:
        notes.append(f"{name}: {path}: ignored {read.trailing_blank_lines} blank lines at its end")
    if read.non_utf8_lines:
        notes.append(f"{name}: {path}: {read.non_utf8_lines} lines had bytes that are not UTF-8, replaced by U+FFFD; "
                     f"the first is line {read.first_non_utf8_line}")
    return notes


def check_corpora(cfg: DictConfig) -> None:
    """Read every corpus and refuse an empty one before any store is written; log what was found.

    The texts are not kept: each corpus is read again when its store is written, so that only
    one corpus is in memory at a time.
    """
    empty = []
    first_process = os.environ.get("RANK", "0") == "0"  # each process reads; one logs
    for name, corpus in cfg.corpora.items():
        read = read_corpus(corpus.path, corpus.text_field)
        for note in describe(name, corpus.path, read) if first_process else []:
            (log.warning if "not UTF-8" in note else log.info)(note)
        if not read.nonblank:
            empty.append(f"corpora.{name}.path={corpus.path} has no non-blank sample "
                         f"({len(read.texts)} samples, all empty or blank)")
    if empty:
        raise CorpusError("empty corpus, nothing written: " + "; ".join(empty))


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    schemas.check(cfg, schemas.TOKENIZE, [], "tokenize")
    check_corpora(cfg)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    world_size, rank = utils.get_world_size_and_rank()
    tokenizer = config.instantiate(cfg.tokenizer)
    tokenizer_cfg = OmegaConf.to_container(cfg.tokenizer, resolve=True)

    for name, corpus in cfg.corpora.items():
        texts = read_corpus(corpus.path, corpus.text_field).texts
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
