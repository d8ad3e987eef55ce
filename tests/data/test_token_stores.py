"""What a tokenize run stopped by Ctrl-C or a full disk keeps (entrodrop.data.token_stores.kept_stores):
the line entrodrop.config.cli prints names the finished stores and those the same command goes on to write."""

import errno
from pathlib import Path

import numpy as np

from entrodrop.data import token_stores
from entrodrop.data.sample_store import SampleStore, SampleStoreWriter, sample_table
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


def tokenize(tmp_path, monkeypatch, capsys):
    """recipes/tokenize_corpus.py on the tiny target corpus into ``tmp_path/target``, in this process:
    (exit status, stderr)."""
    from recipes import tokenize_corpus

    assets = Path(__file__).parents[2] / "assets" / "tiny"
    config = tmp_path / "tokenize.yaml"
    config.write_text(f"""
tokenizer:
  _component_: entrodrop.models.qwen3.qwen3_tokenizer
  path: {assets}/qwen3/vocab.json
  merges_file: {assets}/qwen3/merges.txt
  special_tokens_path: {assets}/qwen3/tokenizer.json
  max_seq_len: null
corpora:
  target: {{path: {assets}/target.jsonl, text_field: text, store_dir: {tmp_path}/target, long_samples: truncate}}
max_seq_len: 256
samples_per_shard: 16
""")
    monkeypatch.setattr("sys.argv", ["tokenize_corpus.py", "--config", str(config)])
    monkeypatch.delenv("ENTRODROP_DEBUG", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    capsys.readouterr()
    try:
        tokenize_corpus.recipe_main()
        status = 0
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err


def test_a_full_disk_while_tokenizing_is_one_line_and_the_same_command_goes_on(tiny_assets, tmp_path, monkeypatch,
                                                                              capsys):
    real_savez, parts = np.savez, []

    def savez_until_full(f, **arrays):  # the third part finds the disk full, part way through
        if len(parts) == 2:
            f.write(b"PK\x03\x04 a part cut short")
            raise OSError(errno.ENOSPC, "No space left on device")
        parts.append(f.name)
        real_savez(f, **arrays)

    monkeypatch.setattr(token_stores.np, "savez", savez_until_full)
    status, err = tokenize(tmp_path, monkeypatch, capsys)
    scratch = next((tmp_path / "target").glob(".parts-*"))
    line = err.splitlines()[0]
    assert status == 1 and "Traceback" not in err and len(err.splitlines()) == 2, err
    assert line.startswith(f"no space left on device writing {scratch / 'block-000002.npz'} (")
    assert " free there now): free some space; no token store was finished yet; run the same command again to " \
           f"write {tmp_path / 'target'} (corpora.target) (it goes on from the blocks already tokenized)" in line
    # the two finished parts stay for the rerun; the one cut short is gone
    assert sorted(p.name for p in scratch.iterdir()) == ["block-000000.npz", "block-000001.npz"]

    monkeypatch.setattr(token_stores.np, "savez", real_savez)  # space freed
    status, err = tokenize(tmp_path, monkeypatch, capsys)
    assert status == 0, err
    assert len(SampleStore(str(tmp_path / "target"), "tokens")) == 64
    assert not list((tmp_path / "target").glob(".*"))
