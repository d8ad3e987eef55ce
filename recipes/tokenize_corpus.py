"""Tokenize corpora once into memory-mapped token stores, so training never tokenizes.

    tune run recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml
    tune run --nproc_per_node 2 recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml

Each entry of ``corpora`` is a JSON-lines file or a ``datasets.load_dataset`` source
(``entrodrop.data.store_plans``: which rows, rendered how, selected and held out how) and becomes a store
of int32 token ids (``entrodrop.data.sample_store``); a source with ``validation_size`` also writes
its held-out rows to ``validation_store_dir``. A record longer than ``max_seq_len`` is split
into samples of ``max_seq_len`` or cut, as its ``long_samples`` says, and the log says how many
were. Several processes share each store's blocks of rows (``entrodrop.data.token_stores``); a killed
run keeps what it finished and the same command completes it.

Every corpus is read, rendered and checked before any store is written (a streamed source: its
first rows in file order, and the rest as it is read, a bad row named by its place in its file):
a missing, empty or unreadable file, a missing column, a template field or turn key that rows
lack, a selection that leaves nothing, each is an error naming its ``corpora.<name>`` key. The
log says what the selection found (duplicates, rows sharing a problem, the held-out problems,
turns of unknown roles) and what each budget took and why it stopped (docs/data.md).
"""

import os
import sys

import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torchtune import config, utils

from entrodrop.config import cli, schemas
from entrodrop.data.fingerprints import store_key
from entrodrop.data.store_plans import plan_corpus
from entrodrop.data.token_stores import kept_stores, write_token_store
from entrodrop.errors import CorpusError, SourceError

log = utils.get_logger("INFO")


@cli.parse(how_to_go_on=lambda cfg: kept_stores(cfg.corpora))  # what Ctrl-C leaves
def recipe_main(cfg: DictConfig) -> None:
    schemas.check(cfg, schemas.TOKENIZE, schemas.TOKENIZE_RULES, "tokenize")
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    world_size, rank = utils.get_world_size_and_rank()
    plans, problems = [], []
    for name, entry in OmegaConf.to_container(cfg.corpora, resolve=True).items():
        try:
            plans += plan_corpus(name, entry)
        except (SourceError, CorpusError, FileNotFoundError) as e:
            problems.append(str(e))
    for line in [note for plan in plans for note in plan.notes] if rank == 0 else []:
        (log.warning if "not UTF-8" in line else log.info)(line)
    if problems:
        raise SourceError("corpora that cannot be read, nothing written:\n  " + "\n  ".join(problems))
    tokenizer = config.instantiate(cfg.tokenizer)
    tokenizer_cfg = OmegaConf.to_container(cfg.tokenizer, resolve=True)

    def all_gather(obj):
        gathered = [None] * world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    for plan in plans:
        key = store_key(tokenizer_cfg, plan.description, cfg.max_seq_len)
        lines = write_token_store(plan, tokenizer, key, cfg.max_seq_len, cfg.samples_per_shard, rank, world_size,
                                  *((all_gather, dist.barrier) if distributed else ()))
        for line in lines or []:
            log.info(line)
    if distributed:
        dist.barrier()  # no rank tears gloo down while another still writes or logs
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(recipe_main())
