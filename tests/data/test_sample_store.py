"""The entropy cache: precompute through the real CLI, resume after SIGKILL, identical with two
processes, and every kind of mismatch caught with the first differing sample named."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, TUNE
from safetensors.torch import load_file, save_file

from entrodrop.data.corpus import read_corpus, read_texts, token_hash, tokenize_corpus
from entrodrop.data.fingerprints import fingerprint_checkpoint, store_key
from entrodrop.data.sample_store import SampleStore, SampleStoreWriter, sample_table, shards_written, write_store
from entrodrop.data.store_plans import jsonl_description
from entrodrop.errors import CacheMismatchError, CorpusError, DiskFullError, MissingFileError
from entrodrop.method.entropy import sample_entropies
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.models.tiny import TINY_QWEN3

CONFIG = "configs/tiny/qwen3_precompute_entropy.yaml"


def cache_files(cache_dir: Path) -> dict:
    return {p.relative_to(cache_dir).as_posix(): p.read_bytes() for p in sorted(cache_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def target_tokens(data, tune_run, tmp_path_factory) -> dict:
    """Token stores of the tiny target corpus cut to 256 tokens (the configs': the shared ``data``'s) and to 128."""
    root = tmp_path_factory.mktemp("tokens")
    result = tune_run("recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml", "max_seq_len=128",
                      *(f"corpora.{corpus}.store_dir={root}/{corpus}" for corpus in ("target", "general", "target_val")))
    assert result.returncode == 0, result.stderr[-3000:]
    return {256: f"target_tokens={overrides(data)['data.target_tokens']}", 128: f"target_tokens={root}/target"}


def overrides(data: list) -> dict:
    return dict(override.split("=", 1) for override in data)


def precompute(tune_run, cache_dir: Path, *overrides: str, nproc: int = 1):
    result = tune_run("recipes/precompute_entropy.py", "--config", CONFIG, f"cache_dir={cache_dir}", *overrides, nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def reference_cache(data) -> Path:
    """The precompute config's cache of the 256-token store, as the shared ``data`` holds it (tests only read it)."""
    return Path(overrides(data)["data.target_entropy"])


def tiny_tokenizer(tiny_assets):
    d = tiny_assets / "qwen3"
    return qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))


def test_cache_holds_the_entropies_of_the_training_tokens(reference_cache, tiny_assets, make_tiny_assets, tmp_path):
    from entrodrop.models.checkpointing import HFCheckpointer
    from entrodrop.models.qwen3._component_builders import qwen3

    cache = SampleStore(str(reference_cache), "entropy")
    samples = tokenize_corpus(tiny_tokenizer(tiny_assets), str(tiny_assets / "target.jsonl"), "text", 256)
    assert len(cache) == len(samples) == 64
    assert cache.manifest["num_tokens"] == sum(map(len, samples))
    assert max(map(len, samples)) == 256, "no sample reaches max_seq_len: truncation is untested"
    model = qwen3(**TINY_QWEN3).eval()
    model.load_state_dict(HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path)).load_checkpoint()["model"])
    for i in (0, 17, 63):
        cache.check_sample(i, samples[i])
        stored = cache[i]
        assert stored.dtype == np.float16 and np.isnan(stored[0]) and not np.isnan(stored[1:]).any()
        (direct,) = sample_entropies(model, [torch.tensor(samples[i])], chunk_size=32, vocab_chunk_size=4096)
        np.testing.assert_allclose(stored[1:].astype(np.float32), direct[1:].numpy(), rtol=1e-3, atol=1e-3)
    assert len(cache[5]) == cache.table[5]["length"] == len(samples[5])


def test_two_processes_write_the_same_cache_bitwise(reference_cache, target_tokens, tune_run, tmp_path):
    precompute(tune_run, tmp_path / "two", target_tokens[256], nproc=2)
    assert cache_files(tmp_path / "two") == cache_files(reference_cache)


def test_killed_precompute_resumes_to_the_same_cache(reference_cache, target_tokens, tmp_path):
    # Many one-sample shards so that the run is still going when its first shard lands.
    cache_dir = tmp_path / "killed"
    args = [TUNE, "run", "recipes/precompute_entropy.py", "--config", CONFIG, f"cache_dir={cache_dir}",
            target_tokens[256], "samples_per_shard=1", "batch_size=1"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (cache_dir / "shard-00000").exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    done = sorted(p.name for p in cache_dir.glob("shard-*"))
    assert not manifest["complete"] and 1 <= len(done) < 64, done
    with pytest.raises(CacheMismatchError, match="incomplete"):
        SampleStore(str(cache_dir), "entropy")
    # A shard half-written when the kill came: never read, removed on resume.
    (cache_dir / ".shard-00063.tmp-dead").mkdir()
    (cache_dir / ".shard-00063.tmp-dead" / "entropy.npy").write_bytes(b"partial")

    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{len(done)} of 64 shards already cached" in proc.stderr
    resumed = SampleStore(str(cache_dir), "entropy")
    reference = SampleStore(str(reference_cache), "entropy")
    assert not list(cache_dir.glob(".shard-*"))
    for i in range(len(reference)):
        assert np.array_equal(resumed[i], reference[i], equal_nan=True)


@pytest.fixture(scope="module")
def key_parts(tiny_assets):
    from entrodrop.models.checkpointing import find_weight_files

    tokenizer_cfg = {
        "_component_": "entrodrop.models.qwen3.qwen3_tokenizer",
        "path": str(tiny_assets / "qwen3" / "vocab.json"),
        "merges_file": str(tiny_assets / "qwen3" / "merges.txt"),
        "special_tokens_path": str(tiny_assets / "qwen3" / "tokenizer.json"),
        "max_seq_len": None,
    }
    return dict(checkpoint_dir=str(tiny_assets / "qwen3"), weight_files=find_weight_files(tiny_assets / "qwen3"),
                tokenizer_cfg=tokenizer_cfg, corpus_path=str(tiny_assets / "target.jsonl"), text_field="text",
                max_seq_len=256)


def key_and_table(key_parts, tokenizer, **changes):
    parts = {**key_parts, **changes}
    samples = tokenize_corpus(tokenizer, parts["corpus_path"], parts["text_field"], parts["max_seq_len"])
    # The key the recipes give the entropy cache of this corpus's token store (truncate: the tiny configs').
    key = store_key(parts["tokenizer_cfg"], jsonl_description(parts["corpus_path"], parts["text_field"], "truncate"),
                    parts["max_seq_len"])
    return {**key, "model": fingerprint_checkpoint(parts["checkpoint_dir"], parts["weight_files"])}, sample_table(samples)


def test_the_unchanged_setting_verifies(reference_cache, key_parts, tiny_assets):
    SampleStore(str(reference_cache), "entropy").verify(*key_and_table(key_parts, tiny_tokenizer(tiny_assets)))


def test_edited_corpus_names_the_first_differing_sample(reference_cache, key_parts, tiny_assets, tmp_path):
    lines = (tiny_assets / "target.jsonl").read_text().splitlines()
    record = json.loads(lines[9])
    record["text"] = record["text"].replace("def ", "def  ", 1) if "def " in record["text"] else record["text"] + "!"
    lines[9] = json.dumps(record)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    with pytest.raises(CacheMismatchError) as err:
        SampleStore(str(reference_cache), "entropy").verify(
            *key_and_table(key_parts, tiny_tokenizer(tiny_assets), corpus_path=str(edited)))
    assert "corpus: cache has" in str(err.value) and "first sample that differs: sample 9" in str(err.value)


def test_other_max_seq_len_names_the_first_truncated_sample(reference_cache, key_parts, tiny_assets):
    tokenizer = tiny_tokenizer(tiny_assets)
    samples = tokenize_corpus(tokenizer, key_parts["corpus_path"], "text", 256)
    first_long = next(i for i, s in enumerate(samples) if len(s) > 200)
    with pytest.raises(CacheMismatchError) as err:
        SampleStore(str(reference_cache), "entropy").verify(*key_and_table(key_parts, tokenizer, max_seq_len=200))
    assert "max_seq_len: cache has 256, now 200" in str(err.value)
    assert f"first sample that differs: sample {first_long}: 256 tokens in the cache, 200 now" in str(err.value)


def test_other_tokenizer_is_caught(reference_cache, key_parts, tiny_assets, tmp_path):
    # The same files with another end-of-document token: the last id of every sample that
    # max_seq_len did not cut changes.
    tokenizer = qwen3_tokenizer(key_parts["tokenizer_cfg"]["path"], key_parts["tokenizer_cfg"]["merges_file"],
                                key_parts["tokenizer_cfg"]["special_tokens_path"], eos_token="<|im_end|>")
    cfg = {**key_parts["tokenizer_cfg"], "eos_token": "<|im_end|>"}
    with pytest.raises(CacheMismatchError) as err:
        SampleStore(str(reference_cache), "entropy").verify(*key_and_table(key_parts, tokenizer, tokenizer_cfg=cfg))
    first_uncut = next(i for i, s in enumerate(SampleStore(str(reference_cache), "entropy").table) if s["length"] < 256)
    assert "tokenizer: cache has" in str(err.value)
    assert f"first sample that differs: sample {first_uncut}: same length" in str(err.value)


def test_other_model_is_caught(reference_cache, key_parts, tiny_assets, tmp_path):
    other = tmp_path / "other_model"
    shutil.copytree(tiny_assets / "qwen3", other)
    weights = load_file(other / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"] * 1.01
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CacheMismatchError) as err:
        SampleStore(str(reference_cache), "entropy").verify(
            *key_and_table(key_parts, tiny_tokenizer(tiny_assets), checkpoint_dir=str(other)))
    assert "model: cache has" in str(err.value) and "from sample 0" in str(err.value)


def test_verify_command_reports_a_mismatch_and_writes_nothing(reference_cache, target_tokens, tune_run):
    before = cache_files(reference_cache)
    ok = tune_run("recipes/verify_entropy_cache.py", "--config", CONFIG, f"cache_dir={reference_cache}", target_tokens[256])
    assert ok.returncode == 0 and "matches: 64 samples" in ok.stderr, ok.stderr[-2000:]
    bad = tune_run("recipes/verify_entropy_cache.py", "--config", CONFIG, f"cache_dir={reference_cache}", target_tokens[128])
    assert bad.returncode != 0 and "max_seq_len: cache has 256, now 128" in bad.stderr
    # The 128-token store is whole: only the table the cache was computed on differs from its ids.
    assert "differ from the table the entropy cache was computed on" in bad.stderr
    assert "differ from its own table" not in bad.stderr and "re-run recipes/precompute_entropy.py" in bad.stderr
    assert cache_files(reference_cache) == before


def test_verify_command_hashes_the_token_ids_and_names_a_corrupted_sample(reference_cache, target_tokens, tune_run,
                                                                           tmp_path):
    store_dir = tmp_path / "target"
    shutil.copytree(target_tokens[256].split("=", 1)[1], store_dir)
    lengths = SampleStore(str(store_dir), "tokens").table["length"]
    shard = store_dir / "shard-00000" / "tokens.npy"
    tokens = np.load(shard)
    tokens[int(lengths[:17].sum()) + 2] += 1  # one id of sample 17; manifest and tables untouched
    np.save(shard, tokens)
    result = tune_run("recipes/verify_entropy_cache.py", "--config", CONFIG, f"cache_dir={reference_cache}",
                      f"target_tokens={store_dir}")
    assert result.returncode != 0 and f"{reference_cache} matches" not in result.stderr, result.stderr[-3000:]
    for line in (f"the token ids in {store_dir} differ from its own table ({store_dir}/samples.npy)",
                 f"the token ids in {store_dir} differ from the table the entropy cache was computed on",
                 f"{shard}: 1 of 64 samples differ, the first is sample 17 (same length, {lengths[17]}, other token ids)",
                 f"delete {store_dir} and re-run recipes/tokenize_corpus.py"):
        assert line in result.stderr, (line, result.stderr[-3000:])
    assert "manifests:" not in result.stderr  # the manifests agree: only the ids tell


def test_precompute_refuses_a_directory_holding_another_cache(reference_cache, target_tokens, tune_run):
    before = cache_files(reference_cache)
    result = tune_run("recipes/precompute_entropy.py", "--config", CONFIG, f"cache_dir={reference_cache}", target_tokens[128])
    assert result.returncode != 0 and "already holds another entropy cache" in result.stderr
    assert cache_files(reference_cache) == before


def test_bad_settings_are_reported_together(tune_run, tmp_path):
    result = tune_run("recipes/precompute_entropy.py", "--config", CONFIG, f"cache_dir={tmp_path}",
                      "batch_size=0", "chunk_size=-1")
    assert result.returncode != 0
    assert "batch_size=0 must be a positive integer" in result.stderr and "chunk_size=-1" in result.stderr


def test_check_sample_catches_a_silent_misalignment(reference_cache, tiny_assets):
    cache = SampleStore(str(reference_cache), "entropy")
    samples = tokenize_corpus(tiny_tokenizer(tiny_assets), str(tiny_assets / "target.jsonl"), "text", 256)
    with pytest.raises(CacheMismatchError, match="sample 3: computed for"):
        cache.check_sample(3, samples[4])


def test_writer_and_reader_handle_empty_samples(tmp_path):
    samples = [[1, 2, 3], [], [4]]
    key = {"model": "m", "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
    writer = SampleStoreWriter(str(tmp_path), "entropy", key, len(samples), samples_per_shard=2, create=True)
    assert writer.pending_shards() == [0, 1]
    writer.write_shard(0, [np.array([np.nan, 1.0, 2.0]), np.zeros(0)], sample_table(samples[:2]))
    with pytest.raises(RuntimeError, match="shards \\[1\\] are missing"):
        writer.finalize()
    with pytest.raises(ValueError, match="do not match"):
        writer.write_shard(1, [np.array([1.0, 2.0])], sample_table(samples[2:]))
    writer.write_shard(1, [np.array([np.nan])], sample_table(samples[2:]))
    writer.finalize()
    cache = SampleStore(str(tmp_path), "entropy")
    assert len(cache[1]) == 0 and cache[0][2] == 2.0 and np.isnan(cache[2][0])
    assert np.array_equal(cache.table, sample_table(samples))
    with pytest.raises(CacheMismatchError, match="holds the entropy cache that recipes/precompute_entropy.py writes; "
                                                "give the token store that recipes/tokenize_corpus.py wrote"):
        SampleStore(str(tmp_path), "tokens")


def test_missing_cache_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no entropy cache at .*run recipes/precompute_entropy.py"):
        SampleStore(str(tmp_path), "entropy")


TINY_SAMPLES = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
DAMAGED = {
    "entropy": ("the entropy cache at {} is missing files its manifest names, or has them at another size than "
                "written:", "Fix: re-run recipes/precompute_entropy.py with the same config (the same cache_dir): it "
                "writes these files again, computing only their shards, and keeps the others"),
    "tokens": ("the token store at {} is missing files its manifest names, or has them at another size than written:",
               "Fix: re-run recipes/tokenize_corpus.py with the same config: it tokenizes the corpus again and writes "
               "these files again, keeping the others (tokenizing is deterministic: an entropy cache of this store "
               "still fits; recipes/verify_entropy_cache.py checks)"),
}


def tiny_values(kind: str) -> list:
    if kind == "tokens":
        return [np.asarray(s, np.int32) for s in TINY_SAMPLES]
    return [np.r_[np.nan, np.arange(1, len(s))] for s in TINY_SAMPLES]


def tiny_store(store_dir: Path, kind: str) -> SampleStore:
    """``TINY_SAMPLES`` (or entropies of their lengths), one sample a shard."""
    key = {"model": "m" if kind == "entropy" else None, "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
    return write_store(str(store_dir), kind, key, tiny_values(kind), sample_table(TINY_SAMPLES), samples_per_shard=1)


def cut(path: Path, num_bytes: int = 1) -> int:
    """Cut ``num_bytes`` off the end of a file, as a copy that stopped early would; its size before."""
    size = path.stat().st_size
    os.truncate(path, size - num_bytes)
    return size


@pytest.mark.parametrize("kind", ["entropy", "tokens"])
def test_a_missing_or_cut_store_file_is_named_with_its_size_and_the_fix(tmp_path, kind):
    """Before, a deleted shard file opened fine and training died at the first batch that read
    it; a cut one read short. Now the store does not open, and every such file is named."""
    store = tiny_store(tmp_path, kind)
    missing, shortened = store.shard_file(2), tmp_path / "shard-00001" / "samples.npy"
    size = missing.stat().st_size
    missing.unlink()
    was = cut(shortened)
    with pytest.raises(MissingFileError) as err:
        SampleStore(str(tmp_path), kind)
    header, fix = DAMAGED[kind]
    assert str(err.value) == "\n".join([header.format(tmp_path), f"  {shortened}: {was - 1} bytes, written with {was}",
                                        f"  {missing}: missing (written with {size} bytes)", fix])
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, CacheMismatchError)


def test_a_store_written_before_sizes_were_recorded_opens_and_names_a_missing_file(tmp_path):
    """A manifest without ``file_sizes`` (written before they were recorded) is checked for the
    files it names only: such a store still opens, and a missing file is named."""
    store = tiny_store(tmp_path, "entropy")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["file_sizes"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cut(store.shard_file(0), 2)  # one fp16 value: its size was not recorded, so it is not checked
    assert len(SampleStore(str(tmp_path), "entropy")) == 4
    (tmp_path / "samples.npy").unlink()
    with pytest.raises(MissingFileError) as err:
        SampleStore(str(tmp_path), "entropy")
    header, fix = DAMAGED["entropy"]
    assert str(err.value) == "\n".join([header.format(tmp_path), f"  {tmp_path / 'samples.npy'}: missing", fix])


@pytest.mark.parametrize("kind", ["entropy", "tokens"])
def test_a_resumed_writer_rewrites_the_missing_and_cut_shards_and_keeps_the_others(tmp_path, kind):
    """What the precompute (and the tokenizer's assembly) does when run again on a damaged store:
    the shards with a missing or cut file are pending, on every process, and written again whole;
    the store comes out as it was."""
    store = tiny_store(tmp_path, kind)
    before = cache_files(tmp_path)
    kept = store.shard_file(3).stat().st_mtime_ns
    store.shard_file(1).unlink()
    cut(tmp_path / "shard-00002" / "samples.npy")
    (tmp_path / "samples.npy").unlink()
    assert shards_written(str(tmp_path)) == (2, 4, True)  # what Ctrl-C's line counts as kept (it said 4)
    writer = SampleStoreWriter(str(tmp_path), kind, store.key, 4, samples_per_shard=1, create=True)
    other_process = SampleStoreWriter(str(tmp_path), kind, store.key, 4, samples_per_shard=1, create=False)
    assert writer.pending_shards() == other_process.pending_shards() == [1, 2]
    for shard in writer.pending_shards():
        writer.write_shard(shard, [tiny_values(kind)[shard]], sample_table([TINY_SAMPLES[shard]]))
    writer.finalize()
    assert cache_files(tmp_path) == before
    assert store.shard_file(3).stat().st_mtime_ns == kept
    assert len(SampleStore(str(tmp_path), kind)) == 4


def test_verify_command_names_a_deleted_shard_file_and_exits_1(reference_cache, target_tokens, tune_run, tmp_path):
    """Before, verify said "matches" of a cache with a deleted shard file, and training then died
    at the first batch that read it."""
    cache = tmp_path / "cache"
    shutil.copytree(reference_cache, cache)
    shard = cache / "shard-00002" / "entropy.npy"
    size = shard.stat().st_size
    shard.unlink()
    result = tune_run("recipes/verify_entropy_cache.py", "--config", CONFIG, f"cache_dir={cache}", target_tokens[256])
    assert result.returncode == 1, result.stderr[-3000:]
    header, fix = DAMAGED["entropy"]
    assert "\n".join([header.format(cache), f"  {shard}: missing (written with {size} bytes)", fix]) in result.stderr
    assert "Traceback" not in result.stderr and "matches" not in result.stderr


def test_corpus_errors_name_file_and_line(tmp_path):
    good, bad_json, no_field = '{"text": "a"}', '{"text": "a"', '{"body": "a"}'
    for lines, message in [([good, bad_json], ":2: not valid JSON"),
                           ([no_field], ":1: expected an object with a string field 'text'")]:
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(CorpusError, match=message):
            read_texts(str(path), "text")
    with pytest.raises(FileNotFoundError, match="corpus file .*missing.jsonl does not exist"):
        read_texts(str(tmp_path / "missing.jsonl"), "text")
    with pytest.raises(CorpusError, match=f"^corpus file {tmp_path} is a directory, not a JSON-lines file: name the "
                                          r"\.jsonl file in it$"):
        read_texts(str(tmp_path), "text")


def test_corpus_with_invalid_utf8_and_empty_records(tmp_path, tiny_assets):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "caf\xe9 ok"}\n{"text": "   "}\n{"text": "x = 1"}\n')
    assert read_texts(str(path), "text")[0] == "caf\ufffd ok"
    samples = tokenize_corpus(tiny_tokenizer(tiny_assets), str(path), "text", 16)
    assert [len(s) > 0 for s in samples] == [True, False, True]
    assert token_hash(samples[0]) != token_hash(samples[2])


def test_non_utf8_lines_are_counted_with_the_first_one(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n{"text": "fine"}\n{"text": "na\xefve \xff"}\n')
    read = read_corpus(str(path), "text")
    assert (read.non_utf8_lines, read.first_non_utf8_line) == (2, 2)
    assert read.texts == ["ok", "caf\ufffd", "fine", "na\ufffdve \ufffd"]
    clean = tmp_path / "clean.jsonl"
    clean.write_text('{"text": "ok"}\n')
    assert read_corpus(str(clean), "text")[-2:] == (0, None)


def test_a_bom_and_trailing_blank_lines_are_accepted(tmp_path):
    records = b'{"text": "a"}\n{"text": "b"}\n{"text": ""}\n'
    clean, messy, crlf = tmp_path / "clean.jsonl", tmp_path / "messy.jsonl", tmp_path / "crlf.jsonl"
    clean.write_bytes(records)
    messy.write_bytes(b"\xef\xbb\xbf" + records + b"\n  \n\t\n")
    crlf.write_bytes(b"\xef\xbb\xbf" + records.replace(b"\n", b"\r\n") + b"\r\n\r\n")
    expected = read_corpus(str(clean), "text")
    assert expected.texts == ["a", "b", ""] and not expected.bom and expected.trailing_blank_lines == 0
    for path, trailing in ((messy, 3), (crlf, 2)):
        read = read_corpus(str(path), "text")
        assert read.texts == expected.texts  # the record {"text": ""} at the end stays a sample
        assert (read.bom, read.trailing_blank_lines, read.blank_lines, read.nonblank) == (True, trailing, 0, 2)


def test_a_blank_line_inside_the_file_is_an_empty_sample_at_its_index(tmp_path, tiny_assets):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "x = 1"}\n\n   \n{"text": "y = 2"}\n\n')
    read = read_corpus(str(path), "text")
    assert read.texts == ["x = 1", "", "", "y = 2"]
    assert (read.blank_lines, read.trailing_blank_lines, read.nonblank) == (2, 1, 2)
    samples = tokenize_corpus(tiny_tokenizer(tiny_assets), str(path), "text", 16)
    assert [len(s) > 0 for s in samples] == [True, False, False, True]
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert read_corpus(str(tmp_path / "empty.jsonl"), "text")[:2] == ([], 0)


def test_tokenize_refuses_an_empty_corpus_before_writing_any_store(tiny_assets, tune_run, tmp_path):
    empty, blank, latin = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl", tmp_path / "latin.jsonl"
    empty.write_bytes(b"")
    blank.write_bytes(b'\xef\xbb\xbf{"text": "  "}\n\n')
    latin.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n{"text": "na\xefve"}\n')
    stores = tmp_path / "tokens"
    result = tune_run("recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml",
                      f"corpora.target.path={empty}", f"corpora.target_val.path={blank}", f"corpora.general.path={latin}",
                      *(f"corpora.{c}.store_dir={stores}/{c}" for c in ("target", "target_val", "general")))
    assert result.returncode != 0
    for message in (f"corpora.target.path={empty} has no non-blank sample (0 samples",
                    f"corpora.target_val.path={blank} has no non-blank sample (1 samples",
                    f"general: {latin}: 2 lines had bytes that are not UTF-8, replaced by U+FFFD; the first is line 2"):
        assert message in result.stderr, message
    assert not stores.exists()


def test_store_shards_and_parts_are_readable_by_others_as_the_umask_allows(tmp_path):
    from entrodrop.data.token_stores import _write_part

    old = os.umask(0o022)
    try:
        key = {"model": "m", "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
        writer = SampleStoreWriter(str(tmp_path / "store"), "tokens", key, 1, samples_per_shard=1, create=True)
        writer.write_shard(0, [np.array([1, 2])], sample_table([[1, 2]]))
        _write_part(tmp_path / "block-000000.npz", {"tokens": np.zeros(2, np.int32)})
    finally:
        os.umask(old)
    shard = tmp_path / "store" / "shard-00000"
    assert oct(shard.stat().st_mode & 0o777) == oct(0o755)  # tempfile.mkdtemp made it 0700
    assert oct((tmp_path / "block-000000.npz").stat().st_mode & 0o777) == oct(0o644)  # mkstemp: 0600


def test_a_shard_that_finds_the_disk_full_names_the_shard_and_the_same_writer_goes_on(tmp_path, monkeypatch):
    key = {"model": "m", "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
    values = [np.full(3, i, np.float16) for i in range(4)]
    table = sample_table([[i] * 3 for i in range(4)])
    writer = SampleStoreWriter(str(tmp_path / "cache"), "entropy", key, 4, samples_per_shard=2, create=True)
    writer.write_shard(0, values[:2], table[:2])
    real_save = np.save

    def save_until_full(path, array):  # the shard's values fit, its table does not
        if Path(path).name == "samples.npy":
            Path(path).write_bytes(b"\x93NUMPY")
            raise OSError("5985 requested and 4064 written")  # what np.save says of a short write
        real_save(path, array)

    monkeypatch.setattr(np, "save", save_until_full)
    with pytest.raises(DiskFullError) as error:
        writer.write_shard(1, values[2:], table[2:])
    assert str(error.value).startswith(f"no space left on device, or the disk quota exceeded writing "
                                       f"{tmp_path / 'cache' / 'shard-00001'} (")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["manifest.json", "shard-00000"]  # no scratch
    monkeypatch.setattr(np, "save", real_save)  # space freed: the same command computes the shard left
    writer = SampleStoreWriter(str(tmp_path / "cache"), "entropy", key, 4, samples_per_shard=2, create=True)
    assert writer.pending_shards() == [1]
    writer.write_shard(1, values[2:], table[2:])
    writer.finalize()
    assert np.array_equal(SampleStore(str(tmp_path / "cache"), "entropy")[3], values[3])
