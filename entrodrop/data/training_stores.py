"""A training run's stores, each opened once at start-up, and checked on the objects opened.

``open_training_stores`` opens every store a training config names (``SampleStore``: its
manifest, its files' sizes, its sample table) and checks what those say: three distinct token
stores, made with the run's tokenizer (``check_training_stores``). Their identities go into each
checkpoint and a resume compares them (``entrodrop.train.run_dir``). ``training_data`` then
checks what the stores hold, on the same objects: the caches' model and values
(``check_cache_model``), the entropy join and the target's token ids (``stream_loader``), the
held-out pair (``checked_validation``); and builds the training stream and its budget.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from omegaconf import OmegaConf
from torchdata.nodes import Loader

from entrodrop.data.entropy_cache import check_cache_model
from entrodrop.data.loader import TrainingBudget, check_join, plan_budget, stream_loader
from entrodrop.data.sample_store import SampleStore
from entrodrop.data.store_identity import (
    ENTROPY_CACHES,
    TOKEN_STORES,
    check_training_stores,
    opened_identities,
    training_stores,
)

TARGET_TOKENS, GENERAL_TOKENS, VALIDATION_TOKENS = TOKEN_STORES
TARGET_ENTROPY, VALIDATION_ENTROPY = ENTROPY_CACHES


@dataclass
class TrainingStores:
    """Each store of a training config, open, by config key (None: the config names none), and
    their identities (``opened_identities``), which each checkpoint keeps."""

    stores: Dict[str, Optional[SampleStore]]
    identities: Dict[str, Dict[str, Any]]


@dataclass
class TrainingData:
    """What training reads, built from ``TrainingStores``: the stream (``loader.root`` is the
    ``MixedPackedStream``), the held-out pair (None: no validation), the run's budget, and the
    target entropy cache (``signal: loss`` starts from it)."""

    loader: Loader
    validation: Optional[Tuple[SampleStore, SampleStore]]
    budget: TrainingBudget
    target_entropy: Optional[SampleStore]


def open_training_stores(cfg) -> TrainingStores:
    """Open the stores of a training config, once each, and refuse two token stores that are one
    store or one made with another tokenizer than ``cfg.tokenizer``.

    Raises:
        FileNotFoundError, CacheMismatchError, MissingFileError: a store that is missing,
            incomplete, of the other kind, or cut (``SampleStore``).
        ConfigError: two of the target, general and validation token stores are one store.
        CacheMismatchError: a token store of another tokenizer.
    """
    paths = training_stores(cfg)
    stores = {key: SampleStore(path, "entropy" if key in ENTROPY_CACHES else "tokens") if path else None
              for key, path in paths.items()}
    identities = check_training_stores(opened_identities(stores), paths, OmegaConf.to_container(cfg.tokenizer, resolve=True))
    return TrainingStores(stores, identities)


def training_data(opened: TrainingStores, cfg, seed: int, rank: int = 0, world_size: int = 1) -> TrainingData:
    """The training stream, the validation pair and the budget of a training config, from its open
    stores, each checked first: every value of the caches (of the base model, ``check_cache_model``),
    the entropy join, and every token id of the target and validation stores against its table.

    Raises:
        CacheMismatchError: a cache of another model or of no entropies, a join that fails, ids
            that differ from the table.
        CheckpointError: a damaged base checkpoint.
        ConfigError: a budget the stores cannot give.
    """
    s = opened.stores
    check_cache_model(cfg.checkpointer.checkpoint_dir, s[TARGET_ENTROPY], s[VALIDATION_ENTROPY])
    loader = stream_loader(s[TARGET_TOKENS], s[TARGET_ENTROPY], s[GENERAL_TOKENS], cfg.data.seq_len,
                           cfg.global_batch_size, cfg.data.target_ratio, seed, rank, world_size)
    validation = checked_validation(s[VALIDATION_TOKENS], s[VALIDATION_ENTROPY]) if s[VALIDATION_TOKENS] else None
    stream = loader.root
    budget = plan_budget(cfg.total_tokens, cfg.global_batch_size, cfg.data.seq_len, cfg.data.target_ratio,
                         stream.target_tokens, stream.general_tokens)
    return TrainingData(loader, validation, budget, s[TARGET_ENTROPY])


def checked_validation(tokens: SampleStore, entropy: SampleStore) -> Tuple[SampleStore, SampleStore]:
    """The held-out token store and its entropy cache, checked before any model loads: the cache
    was computed on these samples (``check_join``) and the token files hold the ids they were
    written with (``SampleStore.check_tokens``)."""
    check_join(tokens, entropy)
    tokens.check_tokens()
    return tokens, entropy
