"""Read and write Hugging Face checkpoint directories for the models the recipes train.

:class:`HFCheckpointer` follows torchtune's checkpointer protocol (``load_checkpoint()``
returns ``{"model": state_dict}`` in torchtune keys), so a recipe instantiates it from YAML
like any torchtune checkpointer. It exists because torchtune 0.6.1's
``FullModelHFCheckpointer`` hard-codes its model families (no Qwen3) and writes checkpoints
in place, where a run killed mid-save leaves a directory that looks whole but is not.
Here a save goes to a temporary directory that is renamed into place once complete.
"""

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from entrodrop.errors import FULL_DISK_ERRNOS, CheckpointError, disk_full, naming_full_disk
from entrodrop.models.families import FAMILIES
from entrodrop.storage.files import as_umask_allows, temp_dir

StateDict = Dict[str, torch.Tensor]

INDEX_FNAME = "model.safetensors.index.json"
SINGLE_FNAME = "model.safetensors"
RECIPE_STATE_FNAME = "recipe_state.pt"
# The recipe state a checkpoint holds beside the weights (``RECIPE_STATE_FNAME``), by key:
# torchtune.training's SEED_KEY ("seed") and OPT_KEY ("optimizer"), and these, which its recipes
# name otherwise or not at all. EntroDrop's own state is added by ``TokenDropoutState.state_dict``.
STEP_KEY = "step"
LR_SCHEDULER_KEY = "lr_scheduler"
LOADER_KEY = "loader"
RNG_KEY = "rng"
CONFIG_KEY = "config"
STORES_KEY = "stores"

# Where in training a checkpoint was saved ({"step": N, "target_epoch": x}): small, and kept when
# pruning deletes the training state, so an offline evaluation can place every checkpoint.
PROGRESS_FNAME = "progress.json"
# Weight files are rewritten on save; every other file of the source directory
# (config.json, tokenizer files, generation_config.json...) is copied along.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# safetensors refuses a longer header; a larger "length" is not one (the file is not safetensors).
_MAX_HEADER_BYTES = 100_000_000


def find_weight_files(checkpoint_dir: Path) -> List[str]:
    """The safetensors files of a Hugging Face directory: from its index, else ``model.safetensors``."""
    index = checkpoint_dir / INDEX_FNAME
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return sorted(set(weight_map.values()))
    if (checkpoint_dir / SINGLE_FNAME).exists():
        return [SINGLE_FNAME]
    raise FileNotFoundError(
        f"{checkpoint_dir} has neither {INDEX_FNAME} nor {SINGLE_FNAME}: "
        "is it a Hugging Face checkpoint directory?"
    )



def safetensors_problem(path: Path) -> Optional[str]:
    """Why ``path`` is not a whole safetensors file (``"truncated (...)"``, ``"empty"``...), or None.

    safetensors' own error for a file cut short ("incomplete metadata, file not fully covered")
    names no file. A safetensors file is an 8-byte little-endian header length, a JSON header,
    and tensor data that its ``data_offsets`` cover exactly, so the file size and the header
    alone tell a whole file from a cut one, before any tensor is read.
    """
    size = Path(path).stat().st_size
    if size == 0:
        return "empty (0 bytes)"
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little")
        if len(head) < 8:
            return f"too short to be a safetensors file ({size} bytes)"
        if length > _MAX_HEADER_BYTES:
            return "not a safetensors file (its first 8 bytes are no header length)"
        raw = f.read(length)  # kilobytes in a real checkpoint
    if len(raw) < length:
        if raw[:1] in (b"{", b""):
            return f"truncated ({size:,} bytes, shorter than its {8 + length:,}-byte header)"
        return "not a safetensors file (its first 8 bytes are no header length)"
    try:
        header = json.loads(raw)
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return "not a safetensors file (its header is not a JSON table of tensors)"
    if size != 8 + length + end:
        return f"{'truncated' if size < 8 + length + end else 'not a whole safetensors file'} " \
               f"({size:,} bytes; its header describes {8 + length + end:,})"
    return None


def _is_run_checkpoint(checkpoint_dir: Path) -> bool:
    """Whether a training run saved ``checkpoint_dir`` (it holds progress or training state)."""
    return (checkpoint_dir / PROGRESS_FNAME).exists() or (checkpoint_dir / RECIPE_STATE_FNAME).exists()


def _fix(checkpoint_dir: Path) -> str:
    """What to do about a damaged weight file in ``checkpoint_dir``: a run's checkpoint was saved
    whole (saves are atomic) and cut short since; a base model was cut short by its download."""
    if _is_run_checkpoint(checkpoint_dir):
        return (f"{checkpoint_dir} is a training checkpoint cut short after it was saved (a partial copy, a full "
                f"disk): copy it again from where it was trained, or delete it and use another step_<N>")
    return (f"{checkpoint_dir} is a downloaded model cut short (an interrupted download): delete it and download it "
            f"again with `tune download <hub model id> --output-dir {checkpoint_dir}`")


def damaged_weights(checkpoint_dir: Path, files: Optional[List[str]] = None) -> Optional[str]:
    """The error for ``checkpoint_dir``'s damaged weight files (``files``, else ``find_weight_files``):
    each named with what is wrong (``safetensors_problem``), then the fix; None when all are whole."""
    checkpoint_dir = Path(checkpoint_dir)
    damaged = [f"{checkpoint_dir / f} is {why}" for f in files or find_weight_files(checkpoint_dir)
               for why in [safetensors_problem(checkpoint_dir / f)] if why]
    if not damaged:
        return None
    return f"damaged weight file{'s' * (len(damaged) > 1)}:\n  " + "\n  ".join(damaged) + f"\n{_fix(checkpoint_dir)}"


@contextmanager
def _named(path: Path) -> Iterator[None]:
    """Re-raise safetensors' errors (which name no file) as a ``CheckpointError`` naming ``path``: for
    damage that ``safetensors_problem``'s header check does not see."""
    try:
        yield
    except SafetensorError as error:
        raise CheckpointError(f"damaged weight file:\n  {path}: {error}\n{_fix(path.parent)}") from error


class HFCheckpointer:
    """Loads a Hugging Face checkpoint directory into torchtune keys and saves it back.

    Args:
        checkpoint_dir (str): directory with ``config.json`` and safetensors weights, one file
            or several with ``model.safetensors.index.json`` (what ``tune download`` creates).
        model_type (str): the model family, a key of ``entrodrop.models.families.FAMILIES``.
        output_dir (str): where :meth:`save_checkpoint` writes.
        checkpoint_files (Optional[List[str]]): weight files to read; found from the index
            (or ``model.safetensors``) if None.

    Raises:
        ValueError: unknown ``model_type``, or ``output_dir`` inside ``checkpoint_dir``.
        FileNotFoundError: a missing ``config.json`` or weight file.
        CheckpointError: a weight file that is damaged (truncated, or not safetensors).
    """

    def __init__(
        self,
        checkpoint_dir: str,
        model_type: str,
        output_dir: str,
        checkpoint_files: Optional[List[str]] = None,
    ) -> None:
        if model_type not in FAMILIES:
            raise ValueError(
                f"checkpointer.model_type={model_type!r} is not one of {sorted(FAMILIES)}"
            )
        self._checkpoint_dir = Path(checkpoint_dir)
        self.output_dir = Path(output_dir)
        if self._checkpoint_dir.resolve() in [self.output_dir.resolve(), *self.output_dir.resolve().parents]:
            raise ValueError(
                f"checkpointer.output_dir={output_dir} is inside checkpoint_dir={checkpoint_dir}; "
                "saving there would mix trained weights with the base model's"
            )
        config_path = self._checkpoint_dir / "config.json"
        if not config_path.exists():
            raise FileNotFoundError(
                f"{config_path} is missing: checkpointer.checkpoint_dir must be a Hugging Face "
                "model directory (e.g. one created by `tune download`)"
            )
        self.config = json.loads(config_path.read_text())
        self._family = FAMILIES[model_type]
        self.weight_files = checkpoint_files or find_weight_files(self._checkpoint_dir)
        missing = [f for f in self.weight_files if not (self._checkpoint_dir / f).exists()]
        if missing:
            raise FileNotFoundError(f"weight files missing from {checkpoint_dir}: {missing}")
        damaged = damaged_weights(self._checkpoint_dir, self.weight_files)
        if damaged:
            raise CheckpointError(damaged)
        # Which file each Hugging Face key is in, so a save keeps the same split; read from
        # the files' headers here, as a resumed run saves through a checkpointer that never loaded.
        self._weight_map: Dict[str, str] = {}
        for fname in self.weight_files:
            with _named(self._checkpoint_dir / fname), safe_open(self._checkpoint_dir / fname, "pt") as f:
                self._weight_map.update({key: fname for key in f.keys()})

    def load_checkpoint(self) -> Dict[str, StateDict]:
        """Read every weight file and return ``{"model": state_dict}`` in torchtune keys."""
        merged: StateDict = {}
        for fname in self.weight_files:
            with _named(self._checkpoint_dir / fname):
                merged.update(load_file(self._checkpoint_dir / fname))
        return {"model": self._family.hf_to_tune(merged, self.config)}

    def save_checkpoint(self, state_dict: Dict[str, StateDict], name: str,
                        recipe_state: Optional[Dict[str, object]] = None,
                        progress: Optional[Dict[str, float]] = None) -> Path:
        """Write ``state_dict["model"]`` as a Hugging Face directory ``output_dir/name``.

        The directory is built under a temporary name and renamed into place, so a reader
        never sees a partial checkpoint; an existing ``name`` is replaced only once the new
        one is complete. Non-weight files of the source directory (``config.json``,
        tokenizer files) are copied along, so the result loads in transformers as is.
        ``recipe_state`` (optimizer, loader, step...) goes into the same directory as
        ``recipe_state.pt``, so weights and training state are saved together or not at all;
        ``progress`` (step, target epoch) goes into ``progress.json``.

        Returns:
            Path: the written directory.
        """
        hf_state = {k: v.contiguous() for k, v in self._family.tune_to_hf(state_dict["model"], self.config).items()}
        shards: Dict[str, StateDict] = {}
        for key, value in hf_state.items():
            shards.setdefault(self._weight_map.get(key, SINGLE_FNAME), {})[key] = value

        final = self.output_dir / name
        with naming_full_disk(final, _refused_for_room):
            self.output_dir.mkdir(parents=True, exist_ok=True)
            tmp = temp_dir(self.output_dir, f".{name}.tmp-")  # the user's umask, not mkdtemp's 0700
            self._save_into(tmp, final, shards, hf_state, recipe_state, progress)
        return final

    def _save_into(self, tmp: Path, final: Path, shards: Dict[str, StateDict], hf_state: StateDict,
                   recipe_state: Optional[Dict[str, object]], progress: Optional[Dict[str, float]]) -> None:
        """Write the checkpoint into ``tmp`` and rename it to ``final``; ``tmp`` is removed if that fails."""
        try:
            for src in self._checkpoint_dir.iterdir():
                if (src.is_file() and src.suffix not in _WEIGHT_SUFFIXES
                        and src.name not in (INDEX_FNAME, RECIPE_STATE_FNAME, PROGRESS_FNAME)):
                    shutil.copy2(src, tmp / src.name)
            if len(shards) == 1:
                save_file(next(iter(shards.values())), tmp / SINGLE_FNAME, metadata={"format": "pt"})
            else:
                names = {
                    old: f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                    for i, old in enumerate(sorted(shards))
                }
                for old, tensors in shards.items():
                    save_file(tensors, tmp / names[old], metadata={"format": "pt"})
                index = {
                    "metadata": {"total_size": sum(v.numel() * v.element_size() for v in hf_state.values())},
                    "weight_map": {k: names[old] for old, sd in shards.items() for k in sd},
                }
                (tmp / INDEX_FNAME).write_text(json.dumps(index, indent=2))
            if recipe_state is not None:
                torch.save(recipe_state, tmp / RECIPE_STATE_FNAME)
            if progress is not None:
                (tmp / PROGRESS_FNAME).write_text(json.dumps(progress))
            for written in tmp.iterdir():  # save_file's are 0600, copy2's keep the base model's modes
                as_umask_allows(written)
            _replace_dir(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _refused_for_room(error: BaseException) -> bool:
    """Whether a save failed for want of room on the device: an ``OSError`` that says so
    (``disk_full``: the copies, the index), or the errors of safetensors and torch.save, which do
    not. safetensors' names the OS error in its text ("os error 28"); torch.save's zip writer
    raises "unexpected pos N vs M" or "file write failed" when a write of its comes up short,
    which on a local disk is a full one (or a spent quota)."""
    if isinstance(error, SafetensorError):
        return any(f"os error {code})" in str(error) for code in FULL_DISK_ERRNOS)
    if isinstance(error, RuntimeError):
        return "unexpected pos" in str(error) or "file write failed" in str(error)
    return disk_full(error)


def _replace_dir(src: Path, dst: Path) -> None:
    """Move the finished directory ``src`` to ``dst``; an old ``dst`` goes only after."""
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old)
    else:
        os.replace(src, dst)


def latest_checkpoint(output_dir: str) -> Optional[Path]:
    """The ``step_<N>`` directory under ``output_dir`` with the largest N that holds a recipe
    state, or None. Only complete checkpoints exist under that name (saves are atomic)."""
    steps = [
        (int(p.name.split("_", 1)[1]), p)
        for p in Path(output_dir).glob("step_*")
        if p.name.split("_", 1)[1].isdigit() and (p / RECIPE_STATE_FNAME).exists()
    ]
    return max(steps)[1] if steps else None


def write_random_checkpoint(out: Path, model_type: str, builder_args: Dict, tokenizer_dir: Path,
                            device: str = "cpu", dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> None:
    """A Hugging Face checkpoint of a model of the family ``model_type`` built from ``builder_args``
    with random weights: Normal(0, 0.02) matrices, unit norm scales (as Hugging Face initialises),
    drawn from ``seed`` on ``device``. ``tokenizer_dir``'s files go alongside; its ``<|endoftext|>``
    is the BOS and EOS id. For the tiny test models, and benchmarks and demos at real shapes, without
    the hub."""
    from torchtune.modules.transforms.tokenizers import parse_hf_tokenizer_json

    from entrodrop.models.hf_config import hf_config

    family = FAMILIES[model_type]
    with torch.device(device):
        model = family.build(**builder_args).to(dtype)
    generator = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("scale") else param.normal_(0.0, 0.02, generator=generator)
    eos = parse_hf_tokenizer_json(str(Path(tokenizer_dir) / "tokenizer.json"))["<|endoftext|>"]
    config = hf_config(model_type, builder_args, torch_dtype=str(dtype).split(".")[-1], bos_token_id=eos,
                       eos_token_id=eos)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    state = {k: v.contiguous().cpu() for k, v in family.tune_to_hf(model.state_dict(), config).items()}
    save_file(state, out / SINGLE_FNAME, metadata={"format": "pt"})
    as_umask_allows(out / SINGLE_FNAME)  # save_file's are 0600
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)


def checkpoint_problem(checkpoint: Path) -> Optional[str]:
    """Why ``checkpoint`` cannot be loaded (no config.json, a weight file missing), or None."""
    if not (checkpoint / "config.json").is_file():
        return "no config.json"
    try:
        missing = [f for f in find_weight_files(checkpoint) if not (checkpoint / f).is_file()]
    except FileNotFoundError:
        return "no weight file (model.safetensors or an index)"
    return f"weight files missing: {missing}" if missing else None
