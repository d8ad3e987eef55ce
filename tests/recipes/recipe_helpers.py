"""What the training recipes' tests share (``test_training_recipes.py``, ``test_gpu_recipes.py``):
the tiny configs, the overrides most runs take, a run's ``tune run`` arguments and its logged
metrics. Imported by name (``from recipe_helpers import ...``): pytest puts each test file's
folder on ``sys.path``."""

import re
from pathlib import Path

SINGLE = "configs/tiny/qwen3_entrodrop_single_device.yaml"
DISTRIBUTED = "configs/tiny/qwen3_entrodrop_distributed.yaml"
# Most tests train without evaluating; evaluation has tests of its own.
NO_EVAL = ["evaluation.validation.target_tokens=null", "evaluation.lm_eval.tasks.code=[]"]
CHUNKED_CE = ["loss._component_=torchtune.modules.loss.CEWithChunkedOutputLoss", "loss.num_output_chunks=2",
              "~loss.chunk_size", "~loss.impl"]


def train_args(config: str, data: list, out: Path, *overrides: str) -> list:
    """The ``tune run`` arguments that train ``config`` (SINGLE or DISTRIBUTED) on ``data`` into ``out``."""
    return ["recipes/" + Path(config).stem.split("qwen3_")[1] + ".py", "--config", config,
            f"output_dir={out}", *data, *overrides]


def run_ok(tune_run, *args, nproc=1):
    """``tune_run(*args)``, which must exit 0 (else its stderr's end is the failure)."""
    result = tune_run(*args, nproc=nproc)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def logged(out: Path) -> dict:
    """step -> the metrics it logged (training and evaluation lines merged; a later line wins)."""
    steps = {}
    for log in sorted((out / "logs").glob("log_*.txt")):
        for line in log.read_text().splitlines():
            step, rest = re.match(r"Step (\d+) \| (.*)", line).groups()
            steps.setdefault(int(step), {}).update(item.split(":", 1) for item in rest.split())
    return steps
