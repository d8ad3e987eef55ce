"""What a tokenize run stopped by Ctrl-C keeps (entrodrop.data.token_stores.kept_stores): the line
entrodrop.config.cli prints names the finished stores and those the same command goes on to write."""

import numpy as np

from entrodrop.data.sample_store import SampleStoreWriter, sample_table
from entrodrop.data.token_stores import kept_stores

KEY = {"model": None, "tokenizer": "t", "corpus": "c", "max_seq_len": 8}


def finished(store_dir) -> None:
    writer = SampleStoreWriter(str(store_dir), "tokens", KEY, 1, samples_per_shard=1, create=True)
    writer.write_shard(0, [np.array([1, 2], np.int32)], sample_table([[1, 2]]))
    writer.finalize()


def test_ctrl_c_names_the_finished_token_stores_and_those_to_write(tmp_path):
    target, hub, hub_val, general = (tmp_path / name for name in ("target", "hub", "hub_val", "general"))
    corpora = {
        "target": {"path": "target.jsonl", "text_field": "text", "store_dir": str(target)},
        "hub": {"source": "org/data", "store_dir": str(hub), "validation_store_dir": str(hub_val)},
        "general": {"source": "org/general", "store_dir": str(general), "validation_store_dir": None},
    }
    rest = "(it goes on from the blocks already tokenized)"
    assert kept_stores(corpora) == (f"no token store was finished yet; run the same command again to write {target} "
                                    f"(corpora.target), {hub} (corpora.hub), {hub_val} (corpora.hub, validation), "
                                    f"{general} (corpora.general) {rest}")
    finished(target)
    finished(hub_val)
    SampleStoreWriter(str(hub), "tokens", KEY, 1, samples_per_shard=1, create=True)  # the store Ctrl-C stopped
    assert kept_stores(corpora) == (f"kept the finished token stores {target} (corpora.target), {hub_val} "
                                    f"(corpora.hub, validation); run the same command again to write {hub} "
                                    f"(corpora.hub), {general} (corpora.general) {rest}")
    finished(hub)
    finished(general)
    assert kept_stores({"target": corpora["target"]}) == (f"kept the finished token store {target} (corpora.target); "
                                                          "nothing is left to write")
