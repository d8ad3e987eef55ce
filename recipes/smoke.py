"""Smoke run: load a model through its checkpointer and score real text with it.

    tune run recipes/smoke.py --config configs/tiny/qwen3_smoke.yaml
    tune run --nproc_per_node 2 recipes/smoke.py --config configs/tiny/qwen3_smoke.yaml

It checks the whole loading path a training run uses (YAML -> builder -> tokenizer ->
Hugging Face checkpoint -> model, FSDP2-sharded when launched on several processes) and
prints the mean next-token loss over the first ``max_windows`` windows of ``text_file``.
Several processes split the windows and sum their losses, so the printed loss matches the
single-process one up to float rounding.
"""

import json
import math
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig
from torchtune import config, training, utils
from torchtune.modules import TransformerSelfAttentionLayer

from entrodrop import devices
from entrodrop.config import cli, schemas

log = utils.get_logger("INFO")


class SmokeRecipe:
    """Builds the model, tokenizer and checkpointer from ``cfg`` and scores ``cfg.text_file``."""

    def __init__(self, cfg: DictConfig) -> None:
        schemas.check(cfg, schemas.SMOKE, schemas.SMOKE_RULES, "smoke")
        self._distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        self._device = devices.get_device(cfg.device)  # refuses a device torch cannot use
        self._dtype = training.get_dtype(cfg.dtype, device=self._device)
        if self._distributed:
            dist.init_process_group(devices.process_group_backend(self._device))
        self._world_size, self._rank = utils.get_world_size_and_rank()
        self._seq_len = cfg.seq_len
        self._max_windows = cfg.max_windows
        self._batch_size = cfg.batch_size
        self._text_file = Path(cfg.text_file)
        self._output_dir = Path(cfg.output_dir)

    def setup(self, cfg: DictConfig) -> None:
        if not self._text_file.is_file():
            raise FileNotFoundError(f"text_file={self._text_file} does not exist")
        self._tokenizer = config.instantiate(cfg.tokenizer)
        checkpointer = config.instantiate(cfg.checkpointer)
        with training.set_default_dtype(self._dtype), self._device:
            model = config.instantiate(cfg.model)
        model.load_state_dict(checkpointer.load_checkpoint()["model"], strict=True)
        if self._distributed:
            training.shard_model(
                model,
                [lambda name, module: isinstance(module, TransformerSelfAttentionLayer)],
                cpu_offload=False,
            )
        self._model = model.eval()

    @torch.no_grad()
    def run(self) -> dict:
        text = self._text_file.read_text(encoding="utf-8", errors="replace")
        ids = torch.tensor(self._tokenizer.encode(text, add_bos=False, add_eos=False))
        windows = ids[: len(ids) // self._seq_len * self._seq_len].view(-1, self._seq_len)
        windows = windows[: self._max_windows]
        if len(windows) % self._world_size:
            raise ValueError(
                f"{len(windows)} windows of {self._seq_len} tokens do not split evenly over "
                f"{self._world_size} processes; change max_windows or seq_len"
            )
        # Every rank runs the same number of forwards: FSDP2 all-gathers inside each one.
        mine = windows[self._rank :: self._world_size]
        totals = torch.zeros(2, dtype=torch.float64, device=self._device)
        for batch in mine.split(self._batch_size):
            batch = batch.to(self._device)
            logits = self._model(batch[:, :-1]).float()
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum")
            totals += torch.stack([loss.double(), torch.tensor(batch[:, 1:].numel(), device=self._device)])
        if self._distributed:
            dist.all_reduce(totals)
        loss = (totals[0] / totals[1]).item()
        return {"loss": loss, "perplexity": math.exp(loss), "tokens": int(totals[1].item()),
                "windows": len(windows), "processes": self._world_size}

    def cleanup(self, result: dict) -> None:
        if self._rank == 0:
            self._output_dir.mkdir(parents=True, exist_ok=True)
            (self._output_dir / "smoke.json").write_text(json.dumps(result, indent=2))
            log.info(f"smoke: {json.dumps(result)} -> {self._output_dir / 'smoke.json'}")
        if self._distributed:
            dist.barrier()  # no rank tears gloo down while another still writes or logs
            dist.destroy_process_group()


@cli.parse
def recipe_main(cfg: DictConfig) -> None:
    recipe = SmokeRecipe(cfg)
    recipe.setup(cfg)
    recipe.cleanup(recipe.run())


if __name__ == "__main__":
    sys.exit(recipe_main())
