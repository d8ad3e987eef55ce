"""The tiny corpora's token stores and tiny models' entropy caches of them, made once in a folder:
what the tests and the benchmarks' quick modes train on, made by the real recipes as a user makes
them (the commands in configs/tiny/qwen3_entrodrop_single_device.yaml's header).

    <root>/target, general, target_val    token stores (configs/tiny/qwen3_tokenize.yaml)
    <root>/entropy, entropy_val           the tiny Qwen3's entropies of target and target_val
    <root>/entropy_<name>                 another model's entropies of target (``entropy_cache``)

What is there complete is not made again, and a lock on ``<root>.lock`` lets several processes
(pytest-xdist's workers, a test and the benchmark it starts) ask for one folder: the first makes
it, the others wait for it and read it.
"""

import fcntl
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]  # the checkout: its recipes/, configs/ and assets/
TUNE = str(Path(sys.executable).parent / "tune")
TOKENIZE = "configs/tiny/qwen3_tokenize.yaml"
PRECOMPUTE = "configs/tiny/qwen3_precompute_entropy.yaml"  # the tiny Qwen3 (assets/tiny/qwen3)


def tune(*args: str, env: Mapping[str, str] = {}) -> None:
    """`tune run ...` from the checkout on one thread, with ``env`` added to this environment; a
    failure raises with the end of its stderr."""
    result = subprocess.run([TUNE, "run", *args], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                            capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"tune run {' '.join(args[:3])} failed:\n{result.stderr[-3000:]}")


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _complete(store_dir: Path) -> bool:
    from entrodrop.data.sample_store import shards_written

    written = shards_written(str(store_dir))
    return bool(written and written[2])


def _stores(root: Path, env: Mapping[str, str]) -> None:
    stores = ("target", "general", "target_val")
    if not all(_complete(root / store) for store in stores):
        tune("recipes/tokenize_corpus.py", "--config", TOKENIZE,
             *(f"corpora.{store}.store_dir={root}/{store}" for store in stores), env=env)


def _cache(cache: Path, tokens: Path, config: str, overrides: Sequence[str], env: Mapping[str, str]) -> None:
    if not _complete(cache):
        tune("recipes/precompute_entropy.py", "--config", config, *overrides, f"target_tokens={tokens}",
             f"cache_dir={cache}", env=env)


def tiny_data(root: Path, env: Mapping[str, str] = {}) -> List[str]:
    """The token stores and the tiny Qwen3's caches under ``root`` (made if missing, each `tune run`
    with ``env`` added to this environment): the overrides that point a training config at them,
    validation included."""
    root = Path(root)
    with _locked(root):
        _stores(root, env)
        for corpus, cache in (("target", "entropy"), ("target_val", "entropy_val")):
            _cache(root / cache, root / corpus, PRECOMPUTE, (), env)
    return [f"data.target_tokens={root}/target", f"data.target_entropy={root}/entropy",
            f"data.general_tokens={root}/general", f"evaluation.validation.target_tokens={root}/target_val",
            f"evaluation.validation.target_entropy={root}/entropy_val"]


def entropy_cache(root: Path, name: str, config: str, overrides: Sequence[str] = (),
                  env: Mapping[str, str] = {}) -> Path:
    """``root/entropy_<name>``: the target store's entropies by the model the precompute ``config``
    and its ``overrides`` name (a training run refuses a cache of another model), made if missing
    with the stores it reads."""
    root = Path(root)
    with _locked(root):
        _stores(root, env)
        _cache(root / f"entropy_{name}", root / "target", config, overrides, env)
    return root / f"entropy_{name}"
