"""A token store written from a ``StorePlan`` (``entrodrop.data.store_plans``), by one process or N.

The plan's rows, in their order, are cut into blocks of ``samples_per_shard`` rows. Process p of
N tokenizes blocks p, p + N, ... into part files (``<store_dir>/.parts-<key>/``); after each
round of N blocks the processes share how many rows and tokens their blocks hold
(``all_gather``: each row's tokens), so all of them offer the rows to the budget in the same
order (``selection.RowBudget``: a row that does not fit what is left is skipped) and stop at the same
round once it has ended. Then one process lays the samples of the rows the budget took, in block
order (``selection.rows_within_budget``), into the store's shards (``SampleStoreWriter``), and
removes the parts; the log says what the budget took and why it stopped. A record longer than
``max_seq_len`` is split or cut there as the plan says, so a block may hold more samples than
rows, and the shards, of ``samples_per_shard`` samples, do not line up with blocks.

Nothing depends on N: the same store comes out of one process or eight. A killed run keeps
its finished parts (and the store's finished shards); the same command completes it. Parts of
another key (an edited config) are removed: they are scratch, never a store.
"""

import hashlib
import json
import math
import os
import shutil
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import numpy as np

from entrodrop.data.corpus import sample_pieces
from entrodrop.data.sample_store import SampleStoreWriter, sample_table, shards_written, store_complete
from entrodrop.data.selection import RowBudget, rows_within_budget
from entrodrop.data.store_plans import VALIDATION, StorePlan
from entrodrop.errors import OutputDirError, SourceError, naming_full_disk
from entrodrop.storage.files import LOCK_NAME, release_dir_lock, take_dir_lock, temp_file

PARTS = ".parts-"


def _parts_dir(store_dir: str, key: Dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(store_dir) / f"{PARTS}{digest}"


def tokenize_block(tokenizer, rows: List, max_seq_len: int, long_samples: str) -> Dict[str, np.ndarray]:
    """A block's samples, flat, and per row: its pieces and the tokens cut off it."""
    pieces, row_pieces, row_cut = [], [], []
    for row in rows:
        samples, cut = sample_pieces(tokenizer, row, max_seq_len, long_samples)
        pieces += samples
        row_pieces.append(len(samples))
        row_cut.append(cut)
    lengths = np.array([len(p) for p in pieces], np.int64)
    flat = np.fromiter((t for p in pieces for t in p), np.int32, count=int(lengths.sum()))
    return {"tokens": flat, "lengths": lengths, "row_pieces": np.array(row_pieces, np.int64),
            "row_cut": np.array(row_cut, np.int64)}


def _write_part(path: Path, block: Dict[str, np.ndarray]) -> None:
    with naming_full_disk(path):
        fd, tmp = temp_file(path.parent, f".{path.name}.tmp-")  # the user's umask, not mkstemp's 0600
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **block)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a part half written; the finished ones stay, and a rerun goes on from them
            raise
    os.replace(tmp, path)


def _read_part(path: Path, *keys: str) -> Dict[str, np.ndarray]:
    """A part's arrays, or only ``keys`` (an ``.npz`` reads each array alone: the row counts of
    a part are read without its tokens)."""
    with np.load(path) as part:
        return {k: part[k] for k in keys or part.files}


def _row_tokens(part: Dict[str, np.ndarray]) -> np.ndarray:
    """Tokens of each row of a part (the sum of its pieces)."""
    ends = np.cumsum(part["row_pieces"])
    starts = ends - part["row_pieces"]
    sums = np.concatenate([[0], np.cumsum(part["lengths"])])
    return sums[ends] - sums[starts]


def write_token_store(plan: StorePlan, tokenizer, key: Dict[str, Any], max_seq_len: int, samples_per_shard: int,
                      rank: int = 0, world_size: int = 1,
                      all_gather: Callable[[Any], List[Any]] = lambda x: [x],
                      barrier: Callable[[], None] = lambda: None) -> Optional[List[str]]:
    """Tokenize ``plan`` into its store; returns rank 0's log lines of what was stored (None elsewhere).
    Rank 0 holds the store directory's lock (``entrodrop.storage.files``) throughout: two runs writing one
    store would remove or replace each other's shards half written.

    Raises:
        OutputDirError: another live run writes the store (on every rank, before any work).
        CacheMismatchError: the store directory holds another store (before any work).
        SourceError: a budget the rows cannot fill, or a selection that leaves no sample;
            raised on every rank, before the store is written, its scratch removed.
    """
    if store_complete(plan.store_dir, "tokens", key, plan.description) and not _killed_shards(plan.store_dir):
        return [f"{plan.name}: {plan.store_dir} is complete already (the same source, selection and tokenizer)"]
    lock, refused = None, None
    if rank == 0:
        try:
            lock = take_dir_lock(Path(plan.store_dir), _store_dir_key(plan))
        except OutputDirError as error:
            refused = str(error)
    refusals = [r for r in all_gather(refused) if r]  # every rank raises it: none waits at a barrier
    if refusals:
        raise OutputDirError(refusals[0])
    try:
        return _write_token_store(plan, tokenizer, key, max_seq_len, samples_per_shard, rank, world_size,
                                  all_gather, barrier)
    finally:
        if lock is not None:
            release_dir_lock(lock)


def _store_dir_key(plan: StorePlan) -> str:
    """The config key of ``plan``'s store directory, for a message."""
    where = plan.name.removesuffix(VALIDATION)
    return f"{where}.validation_store_dir" if where != plan.name else f"{where}.store_dir"


def _killed_shards(store_dir: str) -> List[Path]:
    """The half-written shards (``.shard-*.tmp-*``) that a run killed or stopped while writing
    left, in a store another run finished."""
    return sorted(Path(store_dir).glob(".shard-*.tmp-*"))


def _remove_killed_shards(store_dir: str) -> List[str]:
    """Remove ``_killed_shards``; a line for the log each."""
    stale = _killed_shards(store_dir)
    for path in stale:
        shutil.rmtree(path)
    return [f"removed {path}, a shard left half written by a run that was stopped" for path in stale]


def _write_token_store(plan: StorePlan, tokenizer, key: Dict[str, Any], max_seq_len: int, samples_per_shard: int,
                       rank: int, world_size: int, all_gather: Callable[[Any], List[Any]],
                       barrier: Callable[[], None]) -> Optional[List[str]]:
    """``write_token_store``, its lock held."""
    if store_complete(plan.store_dir, "tokens", key, plan.description):
        removed = _remove_killed_shards(plan.store_dir) if rank == 0 else []
        return removed + [f"{plan.name}: {plan.store_dir} is complete already (the same source, selection and "
                          "tokenizer)"]
    parts = _parts_dir(plan.store_dir, {**key, "samples_per_shard": samples_per_shard})  # blocks are that many rows
    if rank == 0:
        for stale in Path(plan.store_dir).glob(f"{PARTS}*"):
            if stale != parts:
                shutil.rmtree(stale)  # scratch of another config, never a store
        parts.mkdir(parents=True, exist_ok=True)
    barrier()

    num_blocks, rows, tokens, shortest = 0, 0, 0, math.inf
    budget = RowBudget(plan.max_tokens, plan.max_samples)
    blocks = plan.blocks(samples_per_shard)
    while not budget.done:
        round_blocks = list(islice(blocks, world_size))  # every process reads the same rounds
        if not round_blocks:
            break
        mine: List[int] = []  # the tokens of each row of this process's block
        if rank < len(round_blocks):
            path = parts / f"block-{num_blocks + rank:06d}.npz"
            if path.exists():  # tokenized by a run that was killed
                part = _read_part(path, "lengths", "row_pieces")
            else:
                part = tokenize_block(tokenizer, round_blocks[rank](), max_seq_len, plan.long_samples)
                _write_part(path, part)
            mine = _row_tokens(part).tolist()
        for block_rows in all_gather(mine):  # in block order
            for row_tokens in block_rows:
                budget.offer(row_tokens)
            rows, tokens = rows + len(block_rows), tokens + sum(block_rows)
            shortest = min([shortest, *block_rows])
        num_blocks += len(round_blocks)
    problem = None
    if rows == 0:
        problem = "the selection leaves no sample"
    elif plan.max_tokens is not None and tokens < plan.max_tokens:
        problem = (f"max_tokens={plan.max_tokens}, but the selected rows hold {tokens} tokens ({rows} rows): lower "
                   "max_tokens, or choose a larger source")
    elif budget.rows == 0:
        problem = (f"max_tokens={plan.max_tokens} is fewer than every selected row's tokens (the shortest has "
                   f"{shortest}): the selection leaves no sample")
    elif plan.max_samples is not None and rows < plan.max_samples:
        problem = f"max_samples={plan.max_samples}, but the selection leaves {rows} rows"
    if problem:  # every rank knows: all raise, and the scratch goes (its key names this budget)
        barrier()
        if rank == 0:
            shutil.rmtree(parts)
            if all(p.name == LOCK_NAME for p in Path(plan.store_dir).iterdir()):  # made for the scratch alone
                shutil.rmtree(plan.store_dir)
        raise SourceError(f"{plan.name}: {problem}")
    barrier()  # every part is on disk
    lines = _assemble(plan, key, parts, num_blocks, samples_per_shard) + plan.counted() if rank == 0 else None
    barrier()
    return lines


def _samples(parts: Path, num_blocks: int, taken: np.ndarray) -> Iterator[np.ndarray]:
    """The samples of the rows ``taken`` (a mask over every row of the parts), in order, one part
    in memory at a time."""
    first_row, last = 0, int(np.flatnonzero(taken)[-1]) if taken.any() else -1
    for b in range(num_blocks):
        if first_row > last:
            return
        part = _read_part(parts / f"block-{b:06d}.npz")
        row_pieces = part["row_pieces"]
        ends = np.cumsum(part["lengths"])
        piece = 0
        for row, take in zip(row_pieces.tolist(), taken[first_row : first_row + len(row_pieces)].tolist()):
            if take:
                yield from (part["tokens"][end - n : end] for end, n in
                            zip(ends[piece : piece + row].tolist(), part["lengths"][piece : piece + row].tolist()))
            piece += row
        first_row += len(row_pieces)


def _assemble(plan: StorePlan, key: Dict[str, Any], parts: Path, num_blocks: int, samples_per_shard: int) -> List[str]:
    """The store's shards from the parts, up to the budget in whole rows; the parts removed after."""
    row_tokens, row_pieces, row_cut = [], [], []
    for b in range(num_blocks):
        part = _read_part(parts / f"block-{b:06d}.npz", "lengths", "row_pieces", "row_cut")
        row_tokens.append(_row_tokens(part))
        row_pieces.append(part["row_pieces"])
        row_cut.append(part["row_cut"])
    row_tokens, row_pieces, row_cut = (np.concatenate(a) for a in (row_tokens, row_pieces, row_cut))
    taken, budget = rows_within_budget(row_tokens, plan.max_tokens, plan.max_samples)
    num_rows, num_samples = int(taken.sum()), int(row_pieces[taken].sum())
    writer = SampleStoreWriter(plan.store_dir, "tokens", key, num_samples, samples_per_shard, create=True,
                               source=plan.description)
    pending = set(writer.pending_shards())
    samples = _samples(parts, num_blocks, taken)
    for shard in range(writer.num_shards):
        values = list(islice(samples, len(writer.shard_samples(shard))))
        if shard in pending:
            writer.write_shard(shard, values, sample_table(values))
    writer.finalize()
    shutil.rmtree(parts)
    row_pieces, row_cut = row_pieces[taken], row_cut[taken]
    split, cut = row_pieces > 1, row_cut > 0
    lines = [
        f"{plan.name}: {num_rows} rows, {num_samples} samples, {int(row_tokens[taken].sum())} tokens"
        + (f" (max_tokens {plan.max_tokens})" if plan.max_tokens is not None else "")
        + (f" (max_samples {plan.max_samples})" if plan.max_samples is not None else ""),
        f"{plan.name}: long samples ({plan.long_samples}): {int(split.sum())} rows longer than the store's max_seq_len "
        f"split into {int(row_pieces[split].sum())} samples; {int(cut.sum())} rows cut, "
        f"{int(row_cut.sum())} tokens dropped",
    ]
    if plan.max_tokens is not None or plan.max_samples is not None:
        lines.append(f"{plan.name}: {budget.describe()} ({len(row_tokens)} rows read)")
    return lines + [f"{plan.name}: token store complete at {plan.store_dir}"]


def kept_stores(corpora: Mapping[str, Mapping[str, Any]]) -> str:
    """What a tokenize run stopped by Ctrl-C keeps and how to go on, for the one line the recipe
    prints (``entrodrop.config.cli.reported``): the finished stores of ``corpora`` (the config's),
    and the others, which the same command writes, going on from the blocks it had tokenized
    (``.parts-<key>``: the same config, the same key)."""
    stores = [(entry[key], f"corpora.{name}{', validation' if key == 'validation_store_dir' else ''}")
              for name, entry in corpora.items() for key in ("store_dir", "validation_store_dir") if entry.get(key)]
    done = {d: (shards_written(d) or (0, 0, False))[2] for d, _ in stores}  # complete, as its manifest says
    finished = [f"{d} ({what})" for d, what in stores if done[d]]
    to_write = [f"{d} ({what})" for d, what in stores if not done[d]]
    kept = (f"kept the finished token store{'s' * (len(finished) > 1)} {', '.join(finished)}" if finished
            else "no token store was finished yet")
    if not to_write:
        return f"{kept}; nothing is left to write"
    return f"{kept}; run the same command again to write {', '.join(to_write)} (it goes on from the blocks already tokenized)"
