"""The training stream: target and general samples mixed at a fixed token ratio, packed into
rows, with each target token's cached entropy joined alongside.

Everything comes from memory-mapped stores (``entrodrop.data.sample_store``): the target and
general token stores (recipes/tokenize_corpus.py) and the target entropy cache
(recipes/precompute_entropy.py). Nothing is tokenized during training.

The stream is a pure function of the seed and a small cursor, the same on every rank:

- the target corpus is repeated epoch after epoch, in a fresh permutation of its non-empty
  samples each epoch (``numpy.random.default_rng((seed, 0, epoch))``);
- the general corpus is read once, without repetition, in one permutation
  (``default_rng((seed, 1))``); running out of it ends the stream (``plan_budget`` refuses
  budgets that would);
- the next sample is a target one while target tokens are at or below ``target_ratio`` of
  all tokens drawn so far, else a general one, so the realized ratio never strays by more
  than one sample from the setting;
- samples are packed whole into rows of ``seq_len`` tokens; a sample that does not fit the
  rest of a row starts the next row and the rest is padding. Each global batch has
  ``global_batch_size`` rows, and rank r gets rows ``[r * b, (r + 1) * b)`` with
  ``b = global_batch_size / world_size``, so the union over ranks is one process's batch.

A batch holds, per row position (all ``[b, seq_len]``):

    tokens        input ids (0 in padding)
    labels        the next token of the same document, IGNORE_INDEX at a document's last
                  token and in padding: already shifted, use them as they are
    entropy       the cached entropy of the input token (fp32; NaN for general tokens,
                  a document's first token and padding)
    domain        TARGET, GENERAL or PADDING
    document_ids  which document of the row a position belongs to (padding: -1); use
                  ``block_causal_mask`` so attention does not cross documents
    input_pos     the position within its document, for the rotary embedding
    sample        the target sample the position belongs to (-1 for general tokens and
                  padding): with input_pos, the token's place in the target corpus

and ``target_epoch``, how many passes over the target corpus the stream has made by the
end of the batch (a float).
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from torchdata.nodes import BaseNode, Loader

from entrodrop.data.packing import GENERAL, TARGET, pack_rows
from entrodrop.data.sample_store import KEY_FIELDS, SampleStore, mismatches
from entrodrop.errors import CacheMismatchError, ConfigError


@dataclass(frozen=True)
class TrainingBudget:
    """The training length a token budget implies; see ``plan_budget``."""

    num_steps: int
    tokens_per_step: int
    target_epochs: float
    target_tokens: int
    general_tokens_needed: int
    general_tokens: int

    def describe(self) -> str:
        """The budget in token slots (see ``MixedPackedStream.epochs_after`` for the epochs)."""
        return (
            f"{self.num_steps} steps x {self.tokens_per_step} token slots of a {self.target_tokens}-token target "
            f"corpus; at most {self.general_tokens_needed} of the {self.general_tokens} general tokens"
        )


def num_training_steps(total_tokens: int, global_batch_size: int, seq_len: int) -> int:
    """The steps a budget of ``total_tokens`` token slots makes: whole global batches of
    ``global_batch_size`` rows of ``seq_len`` slots (a remainder short of a batch is not trained).
    The one count of steps: the budget (``plan_budget``) and the resume check of a run's output
    directory (``entrodrop.train.run_dir.resume_run``) both call it.

    Example:
        >>> num_training_steps(8192, 4, 256), num_training_steps(8191, 4, 256)
        (8, 7)
    """
    return total_tokens // (global_batch_size * seq_len)


def plan_budget(total_tokens: int, global_batch_size: int, seq_len: int, target_ratio: float,
                target_tokens: int, general_tokens: int) -> TrainingBudget:
    """Steps and target epochs of a run of ``total_tokens`` token slots.

    ``target_epochs`` counts token slots; packing whole samples leaves some as padding, so it is
    an upper bound. ``MixedPackedStream.epochs_after`` gives the epochs a run will realize.

    Raises:
        ValueError: an empty target corpus, a budget shorter than one step, or one that needs
            more general tokens than the general corpus has (it is read without repetition).

    Example:
        >>> plan_budget(8192, 4, 256, 0.6, 1000, 10_000).num_steps
        8
    """
    tokens_per_step = global_batch_size * seq_len
    num_steps = num_training_steps(total_tokens, global_batch_size, seq_len)
    problems = []
    if target_tokens <= 0:
        problems.append("the target corpus has no tokens")
    if num_steps < 1:
        problems.append(f"total_tokens={total_tokens} is less than one step of {tokens_per_step} tokens")
    general_needed = int(np.ceil((1 - target_ratio) * num_steps * tokens_per_step))
    if general_needed > general_tokens:
        problems.append(f"the budget needs about {general_needed} general tokens at target_ratio={target_ratio}, "
                        f"the general corpus has {general_tokens} (it is never repeated)")
    if problems:
        raise ConfigError("invalid training budget:\n  " + "\n  ".join(problems))
    target_epochs = target_ratio * num_steps * tokens_per_step / target_tokens
    return TrainingBudget(num_steps, tokens_per_step, target_epochs, target_tokens, general_needed, general_tokens)



def check_join(tokens: SampleStore, entropy: SampleStore) -> None:
    """Raise unless the entropy cache was computed on exactly the token store's samples."""
    problems = mismatches(tokens.key, tokens.table, entropy.key, entropy.table,
                          fields=[f for f in KEY_FIELDS if f != "model"])
    if problems:
        raise CacheMismatchError(
            f"the entropy cache {entropy.dir} was not computed on the token store {tokens.dir}:\n  "
            + "\n  ".join(problems)
        )


class MixedPackedStream(BaseNode[Dict[str, Any]]):
    """A torchdata node yielding this rank's part of each global batch (see module docs).

    Args:
        target_tokens (SampleStore): token store of the target corpus.
        target_entropy (Optional[SampleStore]): entropy cache of the same samples; None for runs that
            need no entropy (plain training, NEFTune...): every entropy is then NaN.
        general_tokens (SampleStore): token store of the general corpus.
        seq_len (int): tokens per row.
        global_batch_size (int): rows per step over all ranks.
        target_ratio (float): share of target tokens, in (0, 1).
        seed (int): seeds every permutation.
        rank (int): this process.
        world_size (int): processes; must divide ``global_batch_size``.

    Raises:
        ValueError: invalid sizes or ratio, or samples longer than ``seq_len``.
        CacheMismatchError: the entropy cache does not belong to the target token store.
    """

    def __init__(self, target_tokens: SampleStore, target_entropy: Optional[SampleStore], general_tokens: SampleStore,
                 seq_len: int, global_batch_size: int, target_ratio: float, seed: int,
                 rank: int = 0, world_size: int = 1) -> None:
        super().__init__()
        problems = []
        if not 0 < target_ratio < 1:
            problems.append(f"target_ratio={target_ratio} must be in (0, 1)")
        if global_batch_size % world_size:
            problems.append(f"global_batch_size={global_batch_size} is not a multiple of {world_size} processes")
        for store in (target_tokens, general_tokens):
            if store.key["max_seq_len"] > seq_len:
                problems.append(f"{store.dir} holds samples of up to {store.key['max_seq_len']} tokens, "
                                f"longer than seq_len={seq_len}")
        if problems:
            raise ConfigError("invalid loader settings:\n  " + "\n  ".join(problems))
        if target_entropy is not None:
            check_join(target_tokens, target_entropy)
        self._target, self._entropy, self._general = target_tokens, target_entropy, general_tokens
        self._seq_len, self._global_batch_size, self._ratio, self._seed = seq_len, global_batch_size, target_ratio, seed
        self._rows = range(rank * global_batch_size // world_size, (rank + 1) * global_batch_size // world_size)
        self._target_len = target_tokens.table["length"]
        self._general_len = general_tokens.table["length"]
        self._target_ids = np.flatnonzero(self._target_len > 0)
        self._general_order = np.random.default_rng((seed, 1)).permutation(np.flatnonzero(self._general_len > 0))
        # Empty samples are skipped; the counts are reported at start-up.
        self.num_empty = {"target": int((self._target_len == 0).sum()), "general": int((self._general_len == 0).sum())}
        if not len(self._target_ids):
            raise ConfigError(f"the target corpus {target_tokens.dir} has no non-empty sample")

    @staticmethod
    def _initial_state() -> Dict[str, Any]:
        return {"target_epoch": 0, "target_pos": 0, "general_pos": 0,
                "target_tokens": 0, "general_tokens": 0, "carry": None}

    def reset(self, initial_state: Optional[Dict[str, Any]] = None) -> None:
        super().reset(initial_state)
        self._state = dict(initial_state) if initial_state is not None else self._initial_state()
        self._target_order = self._epoch_order(self._state["target_epoch"])

    def epochs_after(self, num_steps: int) -> float:
        """The target epoch the stream reaches after its first ``num_steps`` global batches, found
        by laying them out from the start (lengths only, no token read); the stream's own
        position is left as it was. What a run's logs will show, before the run."""
        saved = getattr(self, "_state", None), getattr(self, "_target_order", None)
        self._state, self._target_order = self._initial_state(), self._epoch_order(0)
        try:
            for _ in range(num_steps):
                self._layout()
            return self.target_epoch
        finally:
            self._state, self._target_order = saved

    def get_state(self) -> Dict[str, Any]:
        return dict(self._state)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng((self._seed, 0, epoch)).permutation(self._target_ids)

    @property
    def rows(self) -> range:
        """This rank's rows of each global batch."""
        return self._rows

    @property
    def target_tokens(self) -> int:
        """Tokens in the target corpus (one epoch)."""
        return int(self._target_len.sum())

    @property
    def general_tokens(self) -> int:
        """Tokens in the general corpus."""
        return int(self._general_len.sum())

    @property
    def target_epoch(self) -> float:
        """Passes over the target corpus so far, fractional."""
        return self._state["target_epoch"] + self._state["target_pos"] / len(self._target_ids)

    def _draw(self) -> Tuple[int, int]:
        """The next (domain, sample id) of the mixed stream; advances the cursor."""
        st = self._state
        if st["target_tokens"] <= self._ratio * (st["target_tokens"] + st["general_tokens"]):
            if st["target_pos"] == len(self._target_order):
                st["target_epoch"], st["target_pos"] = st["target_epoch"] + 1, 0
                self._target_order = self._epoch_order(st["target_epoch"])
            i = int(self._target_order[st["target_pos"]])
            st["target_pos"] += 1
            st["target_tokens"] += int(self._target_len[i])
            return TARGET, i
        if st["general_pos"] == len(self._general_order):
            raise StopIteration  # the general corpus is used up
        i = int(self._general_order[st["general_pos"]])
        st["general_pos"] += 1
        st["general_tokens"] += int(self._general_len[i])
        return GENERAL, i

    def _length(self, sample: Tuple[int, int]) -> int:
        domain, i = sample
        return int((self._target_len if domain == TARGET else self._general_len)[i])

    def _layout(self) -> List[List[Tuple[int, int]]]:
        """Which samples fill each row of the next global batch; reads lengths only."""
        rows = []
        for _ in range(self._global_batch_size):
            row, free = [], self._seq_len
            while True:
                sample = tuple(self._state["carry"]) if self._state["carry"] else self._draw()
                self._state["carry"] = None
                if self._length(sample) > free:
                    self._state["carry"] = list(sample)
                    break
                row.append(sample)
                free -= self._length(sample)
            rows.append(row)
        return rows

    def _fetch(self, domain: int, i: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        ids = (self._target if domain == TARGET else self._general)[i]
        if domain == GENERAL:
            # The general store is read once and may be far larger than the target store, so it
            # is not hashed at start-up (build_loader): each sample is checked as it is read.
            self._general.check_sample(i, ids)
            return ids, None
        if self._entropy is None:
            return ids, None
        self._entropy.check_sample(i, ids)
        return ids, self._entropy[i]

    def next(self) -> Dict[str, Any]:
        rows = self._layout()[self._rows.start : self._rows.stop]
        return {**pack_rows(rows, self._seq_len, self._fetch), "target_epoch": self.target_epoch}



def describe_budget(budget: TrainingBudget, stream: "MixedPackedStream", probe_steps: int = 100) -> str:
    """The budget line a run logs: ``budget.describe()`` in token slots, and the target epochs
    the logs will show, from laying out the first ``probe_steps`` steps (packing whole samples
    leaves padding, so token slots overcount the epochs)."""
    probe = min(budget.num_steps, probe_steps)
    epochs = stream.epochs_after(probe) * budget.num_steps / probe
    return (f"budget: {budget.describe()}; {epochs:.2f} target epochs as the rows pack (laid out for the "
            f"first {probe} steps); empty samples skipped: {stream.num_empty}")


def build_loader(target_tokens_dir: str, target_entropy_dir: Optional[str], general_tokens_dir: str, seq_len: int,
                 global_batch_size: int, target_ratio: float, seed: int, rank: int = 0,
                 world_size: int = 1) -> Loader:
    """A stateful ``torchdata.nodes.Loader`` over ``MixedPackedStream``: ``state_dict()`` after
    a batch and ``load_state_dict()`` on a fresh loader resume right after that batch.

    Before the first batch, every token id of the target store is read back and hashed against
    its table (``SampleStore.check_tokens``, about 2 s per 100M tokens), so a corrupted store stops
    the run before its first step; the entropy join ties the cache to that table. General samples
    are checked one by one as they are read.

    Raises:
        CacheMismatchError: the target token store holds other ids than it was written with, or
            the entropy cache was computed on other samples.
    """
    return stream_loader(SampleStore(target_tokens_dir, "tokens"),
                         SampleStore(target_entropy_dir, "entropy") if target_entropy_dir else None,
                         SampleStore(general_tokens_dir, "tokens"), seq_len, global_batch_size, target_ratio, seed,
                         rank, world_size)


def stream_loader(target: SampleStore, target_entropy: Optional[SampleStore], general: SampleStore, seq_len: int,
                  global_batch_size: int, target_ratio: float, seed: int, rank: int = 0, world_size: int = 1) -> Loader:
    """``build_loader`` over stores already open (``entrodrop.data.training_stores``)."""
    stream = MixedPackedStream(target, target_entropy, general, seq_len, global_batch_size, target_ratio, seed,
                               rank, world_size)
    target.check_tokens()  # after the stream's own checks, which read only the manifests
    return Loader(stream, restart_on_stop_iteration=False)
