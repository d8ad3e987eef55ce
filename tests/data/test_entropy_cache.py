"""The entropy cache's checks (entrodrop.data.entropy_cache): what a stopped precompute kept, and a
token store refused as an entropy cache, named as what it is."""

import numpy as np
import pytest
from conftest import REPO

from entrodrop.data.entropy_cache import check_cache_model, kept_shards
from entrodrop.data.sample_store import SampleStore, SampleStoreWriter, sample_table, write_store
from entrodrop.errors import CacheMismatchError


def test_ctrl_c_says_how_many_shards_of_the_cache_are_kept(tmp_path):
    """What the one line printed on Ctrl-C says a precompute kept (entrodrop.config.cli.reported)."""
    cache = tmp_path / "entropy"
    nothing = f"no shard of the entropy cache {cache} was written yet; run the same command again to compute it"
    assert kept_shards(str(cache)) == nothing
    key = {"model": "m", "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
    writer = SampleStoreWriter(str(cache), "entropy", key, 3, samples_per_shard=1, create=True)
    assert kept_shards(str(cache)) == nothing  # the manifest alone: Ctrl-C as the model loaded
    writer.write_shard(0, [np.zeros(2, np.float16)], sample_table([[1, 2]]))
    (cache / ".shard-00001.tmp-x").mkdir()  # the shard Ctrl-C stopped: not written
    assert kept_shards(str(cache)) == (f"1 of 3 shards of the entropy cache {cache} are written and kept; run "
                                       "the same command again (the same cache_dir) to compute the other 2")


def test_a_token_store_given_as_an_entropy_cache_is_named_a_token_store(tmp_path):
    """A token store's key names no model: the error says what was given, not "another model (fingerprint None)".
    Training opens each cache as an entropy cache before it compares models (``open_training_stores``)."""
    tokens = [np.arange(5, dtype=np.int32), np.arange(3, dtype=np.int32)]
    key = {"model": None, "tokenizer": "t", "corpus": "c", "max_seq_len": 8}
    write_store(str(tmp_path / "target"), "tokens", key, tokens, sample_table(tokens), 4)
    with pytest.raises(CacheMismatchError) as error:
        check_cache_model(str(REPO / "assets/tiny/qwen3"), SampleStore(str(tmp_path / "target"), "entropy"))
    assert str(error.value) == (f"{tmp_path / 'target'} holds the token store that recipes/tokenize_corpus.py writes; "
                                "give the entropy cache that recipes/precompute_entropy.py wrote")
