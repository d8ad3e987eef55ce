"""What a training run's stores are (entrodrop.data.store_identity): made with the run's
tokenizer, three distinct stores, and an entropy cache whose values are entropies."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.data.fingerprints import fingerprint_tokenizer, fingerprint_vocabulary, store_key
from entrodrop.data.sample_store import SampleStore, sample_table, write_store
from entrodrop.data.store_identity import check_training_stores, store_identities
from entrodrop.errors import CacheMismatchError, ConfigError


def checked(stores: dict, tokenizer: dict) -> dict:
    """``check_training_stores`` of the stores at these paths."""
    return check_training_stores(store_identities(stores), stores, tokenizer)


def tokenizer_cfg(d: Path, **changes) -> dict:
    return {"_component_": "entrodrop.models.qwen3.qwen3_tokenizer", "path": str(d / "vocab.json"),
            "merges_file": str(d / "merges.txt"), "special_tokens_path": str(d / "tokenizer.json"),
            "max_seq_len": None, **changes}


def another_tokenizer(tiny_assets, folder: Path) -> dict:
    """The tiny tokenizer with its last merge left out: other token ids for some texts. (The tiny
    assets' tokenizers are one tokenizer, copied: moved files are the same vocabulary.)"""
    shutil.copytree(tiny_assets / "qwen3", folder, ignore=shutil.ignore_patterns("*.safetensors"))
    merges = (folder / "merges.txt").read_text().splitlines()
    (folder / "merges.txt").write_text("\n".join(merges[:-1]) + "\n")
    return tokenizer_cfg(folder)


def token_store(store_dir: Path, tokenizer: dict, first: int = 1, corpus: str = "") -> Path:
    """A small token store, as tokenize writes it with ``tokenizer`` (``first``: its first token id;
    ``corpus``: what its key says it was written from, by default that id)."""
    samples = [np.arange(first, first + n, dtype=np.int32) for n in (5, 3, 7)]
    write_store(str(store_dir), "tokens", store_key(tokenizer, {"data": corpus or str(first)}, 256), samples,
                sample_table(samples), samples_per_shard=2)
    return store_dir


def stores(target, general, validation=None) -> dict:
    return {"data.target_tokens": str(target), "data.general_tokens": str(general),
            "evaluation.validation.target_tokens": str(validation) if validation else None,
            "data.target_entropy": None, "evaluation.validation.target_entropy": None}


def test_a_token_store_of_another_tokenizer_is_refused_naming_both_fingerprints(tiny_assets, tmp_path):
    qwen, other = tokenizer_cfg(tiny_assets / "qwen3"), another_tokenizer(tiny_assets, tmp_path / "other")
    target, general = token_store(tmp_path / "target", qwen), token_store(tmp_path / "general", other, first=50)
    # The training config names the same tokenizer with another max_seq_len (lm-eval's): the same vocabulary.
    run_tokenizer = {**qwen, "max_seq_len": 4096}
    with pytest.raises(CacheMismatchError) as error:
        checked(stores(target, general), run_tokenizer)
    assert str(error.value) == (
        f"data.general_tokens={general} was tokenized with another tokenizer (vocabulary fingerprint "
        f"{fingerprint_vocabulary(other)}) than this run's tokenizer ({fingerprint_vocabulary(qwen)}): tokenize it again "
        "with this tokenizer (recipes/tokenize_corpus.py into a new store_dir), or set tokenizer to the one the store "
        "was made with")
    # A run of the other tokenizer over two stores of the first: both named.
    general = token_store(tmp_path / "general_qwen", qwen, first=50)
    identities = checked(stores(target, general), run_tokenizer)
    assert identities["data.general_tokens"]["identity"]["key"]["vocabulary"] == fingerprint_vocabulary(qwen)
    with pytest.raises(CacheMismatchError) as error:
        checked(stores(target, general), other)
    assert [line.split("=")[0] for line in str(error.value).splitlines()] == ["data.target_tokens",
                                                                            "data.general_tokens"]


def test_a_store_whose_key_has_no_vocabulary_compares_the_whole_tokenizer_config(tiny_assets, tmp_path):
    qwen = tokenizer_cfg(tiny_assets / "qwen3")
    target, general = token_store(tmp_path / "target", qwen), token_store(tmp_path / "general", qwen, first=50)
    manifest = json.loads((general / "manifest.json").read_text())
    del manifest["key"]["vocabulary"]  # as tokenize wrote every key before it recorded one
    (general / "manifest.json").write_text(json.dumps(manifest))
    checked(stores(target, general), qwen)
    with pytest.raises(CacheMismatchError) as error:
        checked(stores(target, general), {**qwen, "max_seq_len": 4096})
    assert str(error.value).startswith(
        f"data.general_tokens={general} was tokenized with another tokenizer (tokenizer fingerprint "
        f"{fingerprint_tokenizer(qwen)}) than this run's tokenizer ({fingerprint_tokenizer({**qwen, 'max_seq_len': 4096})})")
    assert str(error.value).endswith("or set tokenizer to the tokenize config's, every key as it was (this store's "
                                     "manifest records the fingerprint of the whole tokenizer config)")


def test_one_store_given_for_two_of_target_general_and_validation_is_refused(tiny_assets, tmp_path):
    qwen = tokenizer_cfg(tiny_assets / "qwen3")
    target, general = token_store(tmp_path / "target", qwen), token_store(tmp_path / "general", qwen, first=50)
    validation = token_store(tmp_path / "validation", qwen, first=90)
    checked(stores(target, general, validation), qwen)
    with pytest.raises(ConfigError) as error:
        checked(stores(target, tmp_path / "." / "target"), qwen)  # the same path, written otherwise
    assert str(error.value) == (
        f"data.general_tokens and data.target_tokens are the same token store ({target}): the general replay, which "
        "token dropout never perturbs, would be the target data itself; set data.general_tokens to the general "
        "corpus's token store")
    copy = tmp_path / "copy_of_target"
    shutil.copytree(target, copy)
    with pytest.raises(ConfigError) as error:
        checked(stores(target, general, copy), qwen)
    assert str(error.value) == (
        f"evaluation.validation.target_tokens and data.target_tokens are the same token store ({target} and {copy} "
        "hold the same samples): validation would score the data the run trains on; set "
        "evaluation.validation.target_tokens to the held-out store (a corpus's validation_store_dir in the tokenize "
        "config)")
    with pytest.raises(ConfigError, match="^evaluation.validation.target_tokens and data.general_tokens are the same"):
        checked(stores(target, general, general), qwen)


def test_the_shipped_training_configs_name_the_vocabulary_of_their_tokenize_configs():
    """`make demo`'s, the tiny tests', and each model's: a training config and the tokenize configs
    beside it (of its model, where the folder holds several) name one vocabulary."""
    pairs = 0
    for folder in sorted(p for p in (REPO / "configs").iterdir() if p.is_dir()):
        tokenize = [p for p in folder.glob("*tokenize*.yaml")]
        for path in folder.glob("*.yaml"):
            cfg = OmegaConf.load(path)
            if "token_dropout" not in cfg:
                continue
            model = path.stem.split("_")[0]
            mine = [p for p in tokenize if p.stem.split("_")[0] == model] or tokenize
            for other in mine:
                made_with = OmegaConf.to_container(OmegaConf.load(other).tokenizer, resolve=True)
                assert fingerprint_vocabulary(made_with) == fingerprint_vocabulary(
                    OmegaConf.to_container(cfg.tokenizer, resolve=True)), (path, other)
                pairs += 1
    assert pairs >= 10


def entropy_cache(cache_dir: Path, values) -> SampleStore:
    values = [np.asarray(v, np.float16) for v in values]
    key = {"model": "m", "tokenizer": "t", "corpus": "c", "max_seq_len": 256}
    table = sample_table([np.arange(len(v)) for v in values])
    return write_store(str(cache_dir), "entropy", key, values, table, samples_per_shard=2)


def test_an_entropy_shard_overwritten_at_its_size_is_named_with_its_count_and_first_value(tmp_path):
    nan, top = float("nan"), float(np.log(64))
    cache = entropy_cache(tmp_path / "cache", [[nan, 0.0, top], [nan, 1.0], [], [nan, 2.0, 3.0, 0.5]])
    cache.check_entropies(64)  # 0 and ln V are entropies; NaN at each sample's first token
    shard = cache.shard_file(1)
    data = np.load(shard)
    data[1:] = np.inf  # the second shard's samples but their first token: same size, no longer entropies
    header = shard.read_bytes()[: shard.stat().st_size - data.nbytes]
    shard.write_bytes(header + data.tobytes())
    cache = SampleStore(str(tmp_path / "cache"), "entropy")  # its files are all at their recorded sizes
    with pytest.raises(CacheMismatchError) as error:
        cache.check_entropies(64)
    assert str(error.value) == (
        f"the entropy cache {cache.dir} holds values that are not entropies:\n"
        f"  {shard}: 3 of 4 values are not entropies over 64 tokens (finite, 0 to ln 64 = 4.159); the first is inf at "
        "sample 3, token 1\n"
        f"Fix: delete {shard.parent} and re-run recipes/precompute_entropy.py with the same config (the same "
        "cache_dir): it computes those shards again and keeps the others")
    # Larger than ln V, below 0, or NaN past a sample's first token: each is no entropy.
    for bad in (top + 0.1, -0.1, nan):
        cache = entropy_cache(tmp_path / str(bad), [[nan, 1.0, bad]])
        assert list(cache.entropy_problems(64).values()) == [
            f"{cache.shard_file(0)}: 1 of 3 values are not entropies over 64 tokens (finite, 0 to ln 64 = 4.159); "
            f"the first is {np.float32(np.float16(bad))} at sample 0, token 2"]


def test_store_identities_tell_a_moved_store_from_another_under_the_same_path(tiny_assets, tmp_path):
    qwen = tokenizer_cfg(tiny_assets / "qwen3")
    target = token_store(tmp_path / "target", qwen)
    moved = tmp_path / "elsewhere"
    shutil.copytree(target, moved)
    other = token_store(tmp_path / "other", qwen, first=2, corpus="1")  # the same key, other ids
    [here], [there], [another] = (store_identities({"k": str(p)}).values() for p in (target, moved, other))
    assert here["identity"] == there["identity"] and here["path"] != there["path"]
    assert here["identity"]["key"] == another["identity"]["key"]  # one tokenizer, corpus key as given
    assert here["identity"]["table"] != another["identity"]["table"]  # other token ids
    assert store_identities({"k": None, "m": str(tmp_path / "none")}) == {
        "k": {"path": None, "identity": None}, "m": {"path": str(tmp_path / "none"), "identity": None}}
