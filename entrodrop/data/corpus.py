"""How a corpus record becomes token ids, once, in recipes/tokenize_corpus.py: the entropy
precompute and the training loader both read the token store it writes, so the cached
entropies line up with the training tokens by construction; stores also keep each sample's
length and token hash so that a drift is caught rather than trusted.

A corpus is a JSON-lines file, one record per line with a text field. Sample ``i`` is
line ``i``; an empty or whitespace-only text, or a blank line, is an empty sample (no tokens),
kept so that ids stay line numbers. A UTF-8 byte-order mark at the start and blank lines at
the end (both common in exported corpora) are not samples. Bytes that are not UTF-8 become
U+FFFD; ``read_corpus`` counts the lines that had them.
"""

import hashlib
import json
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from entrodrop.errors import CorpusError

BOM = b"\xef\xbb\xbf"
JSON_WHITESPACE = " \t\r\n"


class CorpusRead(NamedTuple):
    """The samples of a corpus file and what reading it found."""

    texts: List[str]  # sample i is texts[i]
    nonblank: int  # samples whose text is not empty or whitespace
    blank_lines: int  # blank lines before the last record: empty samples at their line
    trailing_blank_lines: int  # blank lines after the last record: not samples
    bom: bool  # the file began with a UTF-8 byte-order mark (skipped)
    non_utf8_lines: int  # lines with bytes that are not UTF-8 (replaced by U+FFFD)
    first_non_utf8_line: Optional[int]  # 1-based


def read_corpus(path: str, text_field: str) -> CorpusRead:
    """The text of every record of a JSON-lines file, with counts of what was repaired.

    Raises:
        FileNotFoundError: no such file.
        CorpusError: a directory, or a line that is neither blank nor a JSON object with a string
            ``text_field``, named by file and line number.
    """
    file = Path(path)
    if file.is_dir():
        raise CorpusError(f"corpus file {path} is a directory, not a JSON-lines file: name the .jsonl file in it")
    if not file.is_file():
        raise FileNotFoundError(f"corpus file {path} does not exist")
    texts: List[str] = []
    last_record = 0  # number of lines up to and including the last record
    blank_lines = non_utf8 = 0
    first_non_utf8 = None
    bom = False
    with file.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1 and raw.startswith(BOM):
                raw, bom = raw[len(BOM):], True
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                non_utf8 += 1
                first_non_utf8 = first_non_utf8 or line_no
            if not line.strip(JSON_WHITESPACE):
                texts.append("")
                blank_lines += 1
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
                raise CorpusError(f"{path}:{line_no}: expected an object with a string field {text_field!r}")
            texts.append(record[text_field])
            last_record = line_no
    trailing = len(texts) - last_record
    texts = texts[:last_record]
    return CorpusRead(texts, sum(1 for t in texts if t.strip()), blank_lines - trailing, trailing, bom,
                      non_utf8, first_non_utf8)


def read_texts(path: str, text_field: str) -> List[str]:
    """The samples of a JSON-lines file (``read_corpus(...).texts``)."""
    return read_corpus(path, text_field).texts


LONG_SAMPLES = ("split", "truncate")


def sample_pieces(tokenizer, sample: Union[str, List[Tuple[str, str]]], max_seq_len: int,
                  long_samples: str) -> Tuple[List[List[int]], int]:
    """The stored samples of one record, and how many of its tokens were cut off.

    A text is encoded with BOS/EOS as the tokenizer defines them (an empty or whitespace-only
    text gives one empty sample, so ids stay record numbers); (role, text) turns go through
    the tokenizer's chat template (``tokenize_messages``). Ids longer than ``max_seq_len``
    become consecutive pieces of ``max_seq_len`` (``split``: nothing lost, each piece trained
    and given entropies in its own context) or keep their first ``max_seq_len`` (``truncate``).

    Example:
        >>> class Chars:  # a stand-in tokenizer: one id per character, no BOS or EOS
        ...     def encode(self, text, add_bos, add_eos): return [ord(c) for c in text]
        >>> [len(p) for p in sample_pieces(Chars(), "abcdefg", 3, "split")[0]]
        [3, 3, 1]
        >>> sample_pieces(Chars(), "abcdefg", 3, "truncate")
        ([[97, 98, 99]], 4)
    """
    if isinstance(sample, str):
        ids = tokenizer.encode(sample, add_bos=True, add_eos=True) if sample.strip() else []
    else:
        from torchtune.data import Message

        ids = tokenizer.tokenize_messages([Message(role=role, content=text) for role, text in sample])[0]
    if len(ids) <= max_seq_len:
        return [ids], 0
    if long_samples == "truncate":
        return [ids[:max_seq_len]], len(ids) - max_seq_len
    return [ids[start : start + max_seq_len] for start in range(0, len(ids), max_seq_len)], 0


def tokenize_sample(tokenizer, text: str, max_seq_len: int) -> List[int]:
    """Token ids of one record cut to ``max_seq_len`` (``sample_pieces`` with ``truncate``)."""
    return sample_pieces(tokenizer, text, max_seq_len, "truncate")[0][0]


def token_hash(ids: Sequence[int]) -> int:
    """A 64-bit hash of a sample's token ids, stored in the entropy cache to catch drift."""
    data = np.asarray(ids, dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def token_hashes(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``token_hash`` of each sample of ``flat``, the samples' token ids concatenated.

    The same bytes as ``token_hash`` (int64 ids, blake2b, 8 bytes little-endian), but the
    conversion is one numpy call for all samples and the digests are joined into one array, so
    only the hash itself runs per sample.

    Args:
        flat (np.ndarray): ``[sum(lengths)]`` integer token ids.
        lengths (np.ndarray): ``[num_samples]`` token count of each sample, in order.

    Returns:
        np.ndarray: ``[num_samples]`` uint64.

    Example:
        >>> int(token_hashes(np.array([1, 2, 3]), np.array([2, 1]))[1]) == token_hash([3])
        True
    """
    data = memoryview(np.ascontiguousarray(flat, dtype=np.int64)).cast("B")
    ends = np.cumsum(lengths, dtype=np.int64) * 8
    if len(ends) and ends[-1] != len(data):
        raise ValueError(f"the lengths add up to {ends[-1] // 8} tokens, the array has {len(data) // 8}")
    starts = ends - np.asarray(lengths, dtype=np.int64) * 8
    digests = b"".join(hashlib.blake2b(data[a:b], digest_size=8).digest() for a, b in zip(starts.tolist(), ends.tolist()))
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def tokenize_corpus(tokenizer, path: str, text_field: str, max_seq_len: int) -> List[List[int]]:
    """``tokenize_sample`` of every record of a JSON-lines corpus, in line order."""
    return [tokenize_sample(tokenizer, text, max_seq_len) for text in read_texts(path, text_field)]
