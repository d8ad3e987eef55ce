"""Bad checkpoints and configs fail with errors that name the problem; saves are atomic."""

import json
import os
import shutil

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torchtune.models.llama3_1 import llama3_1

from entrodrop.config import cli
from entrodrop.errors import CheckpointError, DiskFullError
from entrodrop.launch import tune_run
from entrodrop.models import checkpointing
from entrodrop.models.checkpointing import HFCheckpointer, safetensors_problem
from entrodrop.models.hf_config import differences
from entrodrop.models.qwen3._component_builders import qwen3


def test_unknown_model_type(tiny_assets, tmp_path):
    with pytest.raises(ValueError, match="model_type='QWEN2'.*LLAMA3.*QWEN3"):
        HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN2", str(tmp_path))


def test_missing_config_and_missing_weights(tiny_assets, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        HFCheckpointer(str(empty), "QWEN3", str(tmp_path / "out"))
    (empty / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="neither model.safetensors.index.json nor model.safetensors"):
        HFCheckpointer(str(empty), "QWEN3", str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="weight files missing.*gone.safetensors"):
        HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path / "out"), ["gone.safetensors"])


def test_output_dir_inside_checkpoint_dir_is_refused(tiny_assets):
    with pytest.raises(ValueError, match="inside checkpoint_dir"):
        HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tiny_assets / "qwen3" / "out"))


def test_model_that_does_not_describe_the_checkpoint(tiny_assets, tmp_path):
    config = json.loads((tiny_assets / "qwen3" / "config.json").read_text())
    wrong = qwen3(vocab_size=config["vocab_size"], num_layers=3, num_heads=4, num_kv_heads=4,
                  embed_dim=64, intermediate_dim=192, max_seq_len=64, head_dim=16,
                  tie_word_embeddings=True)
    found = differences(wrong, config)
    assert {field: ours for field, (ours, _) in found.items()} == {"num_hidden_layers": 3, "num_key_value_heads": 4,
                                                                    "head_dim": 16}
    llama = llama3_1(vocab_size=config["vocab_size"], num_layers=2, num_heads=4, num_kv_heads=2,
                     embed_dim=64, max_seq_len=64, intermediate_dim=192)
    assert differences(llama, config)["tie_word_embeddings"] == (False, True)


def test_failed_save_keeps_the_previous_checkpoint(tiny_assets, tmp_path):
    checkpointer = HFCheckpointer(str(tiny_assets / "llama3_1"), "LLAMA3", str(tmp_path / "out"))
    state = checkpointer.load_checkpoint()
    first = checkpointer.save_checkpoint(state, "latest")
    before = load_file(first / "model.safetensors")

    # New weights, and a recipe state that cannot be pickled: the save fails after the new
    # weights are written, so an in-place save would have overwritten the old ones.
    changed = {k: v + 1 for k, v in state["model"].items()}
    with pytest.raises(Exception, match="pickle|lambda"):
        checkpointer.save_checkpoint({"model": changed}, "latest", recipe_state={"unpicklable": lambda: 0})

    after = load_file(first / "model.safetensors")
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["latest"]


def test_save_replaces_an_existing_checkpoint(tiny_assets, tmp_path):
    checkpointer = HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path))
    state = checkpointer.load_checkpoint()
    checkpointer.save_checkpoint(state, "latest")
    state["model"]["norm.scale"] = state["model"]["norm.scale"] * 2
    saved = checkpointer.save_checkpoint(state, "latest")
    assert torch.equal(load_file(saved / "model.safetensors")["model.norm.weight"], state["model"]["norm.scale"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]


def cut_in_half(path) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def test_the_header_check_tells_whole_safetensors_files_from_damaged_ones(tiny_assets, tmp_path):
    whole = tiny_assets / "qwen3" / "model.safetensors"
    size, header_length = whole.stat().st_size, int.from_bytes(whole.read_bytes()[:8], "little")
    assert safetensors_problem(whole) is None
    cases = {"half": whole.read_bytes()[:size // 2], "header_cut": whole.read_bytes()[:20], "empty": b"",
             "longer": whole.read_bytes() + b"\0", "garbage": b"not weights at all, just some text\n" * 4,
             "short": b"abc", "json_list": (2).to_bytes(8, "little") + b"[]"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    found = {name: safetensors_problem(tmp_path / name) for name in cases}
    assert found == {
        "half": f"truncated ({size // 2:,} bytes; its header describes {size:,})",
        "header_cut": f"truncated (20 bytes, shorter than its {8 + header_length:,}-byte header)",
        "empty": "empty (0 bytes)",
        "longer": f"not a whole safetensors file ({size + 1:,} bytes; its header describes {size:,})",
        "garbage": "not a safetensors file (its first 8 bytes are no header length)",
        "short": "too short to be a safetensors file (3 bytes)",
        "json_list": "not a safetensors file (its header is not a JSON table of tensors)",
    }


def test_a_damaged_weight_file_is_named_with_its_fix(tiny_assets, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_assets / "qwen3", base)
    cut_in_half(base / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        HFCheckpointer(str(base), "QWEN3", str(tmp_path / "out"))
    assert f"{base}/model.safetensors is truncated" in str(err.value)
    assert f"delete it and download it again with `tune download <hub model id> --output-dir {base}`" in str(err.value)

    # a run's checkpoint (it has progress.json) was saved whole: another fix
    checkpointer = HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path / "run"))
    saved = checkpointer.save_checkpoint(checkpointer.load_checkpoint(), "step_3", progress={"step": 3})
    cut_in_half(saved / "model.safetensors")
    with pytest.raises(CheckpointError, match=f"{saved}/model.safetensors is truncated.*\n{saved} is a training "
                                              "checkpoint cut short.*delete it and use another step_<N>"):
        HFCheckpointer(str(saved), "QWEN3", str(tmp_path / "x"))

    # damage the header check cannot see (sizes agree, a dtype that is none) is named too
    header = b'{"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}'
    (base / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(CheckpointError, match=f"{base}/model.safetensors: .*\n{base} is a downloaded model"):
        HFCheckpointer(str(base), "QWEN3", str(tmp_path / "out"))


@pytest.fixture
def umask_022():
    """The umask most machines run with; restored after the test."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_saved_checkpoint_is_readable_by_others_as_the_umask_allows(tiny_assets, tmp_path, umask_022):
    checkpointer = HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path / "run"))
    saved = checkpointer.save_checkpoint(checkpointer.load_checkpoint(), "step_3", recipe_state={"step": 3},
                                         progress={"step": 3})
    assert oct(saved.stat().st_mode & 0o777) == oct(0o755)  # tempfile.mkdtemp made it 0700
    # safetensors' save_file writes 0600 (a private temporary file, renamed)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in saved.iterdir()} == {
        p.name: oct(0o644) for p in saved.iterdir()}


@pytest.mark.parametrize("full", ["torch.save", "safetensors"])
def test_a_save_that_finds_the_disk_full_says_so_and_keeps_the_last_checkpoint(tiny_assets, tmp_path, monkeypatch,
                                                                              capsys, full):
    checkpointer = HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3", str(tmp_path / "checkpoints"))
    state = checkpointer.load_checkpoint()
    last = checkpointer.save_checkpoint(state, "step_1", recipe_state={"step": 1})
    # What each raises when the disk fills, as on a full tmpfs: neither is an OSError or names a path.
    if full == "torch.save":
        def torch_save(obj, path):
            open(path, "wb").write(b"PK\x03\x04")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1340544 vs 1340432")
        monkeypatch.setattr(torch, "save", torch_save)
    else:
        def save_file(tensors, path, metadata=None):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        monkeypatch.setattr(checkpointing, "save_file", save_file)
    with pytest.raises(DiskFullError) as error:
        checkpointer.save_checkpoint(state, "step_2", recipe_state={"step": 2})
    what = "no space left on device" + (", or the disk quota exceeded" if full == "torch.save" else "")  # no errno
    assert str(error.value).startswith(f"{what} writing {tmp_path / 'checkpoints' / 'step_2'} (")
    assert str(error.value).endswith(" free there now)")
    # The partial checkpoint is gone, the last whole one untouched: what resume=True goes on from.
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_1"]
    assert load_file(last / "model.safetensors").keys() == load_file(tiny_assets / "qwen3" / "model.safetensors").keys()

    # The recipe's line: the path, the room, and how to go on, as kept_checkpoint says for Ctrl-C.
    monkeypatch.delenv(tune_run.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit, cli.reported(lambda: f"the last checkpoint written is {last}; run the "
                                                          "same command with resume=True to continue from it"):
        raise error.value
    err = capsys.readouterr().err
    assert exit.value.code == 1 and len(err.splitlines()) == 2 and "Traceback" not in err
    assert err.splitlines()[0] == (f"{error.value}: free some space; the last checkpoint written is {last}; run the "
                                   "same command with resume=True to continue from it")
