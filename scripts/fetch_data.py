"""Put what configs read from the Hugging Face Hub into the local cache, on a machine with internet.

    python scripts/fetch_data.py configs/qwen3/0.6B_tokenize.yaml configs/qwen3/0.6B_evaluate.yaml

- a tokenize config: each hub source of its ``corpora`` (``datasets.load_dataset``, prepared as
  Arrow in the cache; local files and JSON-lines corpora need nothing);
- a training or evaluation config: the data of each lm-eval task it names
  (``evaluation.lm_eval.tasks``), which lm-eval would otherwise download at first use.

Then copy the cache (``HF_HOME``, by default ``~/.cache/huggingface``) to the offline machine and
run there with ``HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1``. A streamed source reads the Hub as it
goes: offline, read the cached copy with ``streaming: False`` (memory-mapped, not held in memory).
"""

import argparse
from pathlib import Path

from omegaconf import OmegaConf

from entrodrop.data.sources import LOCAL_BUILDERS, describe_source

REPO = Path(__file__).resolve().parent.parent


def fetch(config: Path) -> None:
    cfg = OmegaConf.to_container(OmegaConf.load(config), resolve=True)
    sources = [e for e in cfg.get("corpora", {}).values() if "source" in e and e["source"] not in LOCAL_BUILDERS]
    lm_eval = cfg.get("evaluation", {}).get("lm_eval", {})
    tasks = sorted({t for group in lm_eval.get("tasks", {}).values() for t in group})
    if not sources and not tasks:
        print(f"{config}: reads nothing from the Hub")
    for entry in sources:
        import datasets

        print(f"{config}: {describe_source(entry)} ...", flush=True)
        rows = datasets.load_dataset(entry["source"], name=entry["name"], split=entry["split"], revision=entry["revision"])
        print(f"  cached: {len(rows):,} rows")
    if tasks:
        from lm_eval.tasks import TaskManager, get_task_dict

        print(f"{config}: lm-eval tasks {', '.join(tasks)} ...", flush=True)
        include = lm_eval.get("include_path")
        get_task_dict(tasks, TaskManager(include_path=str(REPO / include) if include else None))
        print(f"  cached: {len(tasks)} tasks")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="+", type=Path)
    for path in parser.parse_args().configs:
        fetch(path)
