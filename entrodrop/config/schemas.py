"""The keys each recipe reads, for ``entrodrop.config.check.check_config``.

A recipe checks its whole config against its schema first, so every mistake is reported in
one error in about the time it takes to import the recipe. A copied recipe that reads a new
key adds it to a copy of the schema (``{**TRAINING, "my_key": integer()}``); a key in the YAML
that no schema names is reported as unknown, with the closest known key, or with what replaced
it when it is in ``RENAMED``.

``*_RULES`` are checks across keys; each runs only when the keys it reads are present and
valid on their own, so one mistake is not reported twice.
"""

import json
import os
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from entrodrop.config.check import (
    Component,
    boolean,
    check_config,
    existing_dir,
    integer,
    list_of_strings,
    mapping,
    number_in,
    one_of,
    optional,
    positive_number,
    relative_paths_note,
    string,
    whole_config_problem,
)
from entrodrop.data.corpus import LONG_SAMPLES
from entrodrop.data.rendering import FIRST_USER_TURN, STYLES, UNKNOWN_ROLES, template_fields
from entrodrop.data.sources import LOCAL_BUILDERS
from entrodrop.errors import raise_problems
from entrodrop.method.dropout import AUTO, SCHEDULES, SIGNALS, TARGETING
from entrodrop.models.families import FAMILIES
from entrodrop.sandbox.code_runner import SANDBOXES

Rule = Tuple[Sequence[str], Callable[[DictConfig], List[str]]]  # (keys it reads, cfg -> problems)

TOKEN_STORE = existing_dir("store", "manifest.json", "run recipes/tokenize_corpus.py")
ENTROPY_CACHE = existing_dir("store", "manifest.json", "run recipes/precompute_entropy.py")
DTYPES = ("fp32", "bf16", "fp16")
MIDPOINT_UNITS = ("steps", "epochs")

def midpoint_or_auto(value) -> Optional[str]:
    """A number >= 0, or ``auto`` (j0 found in training: ``entrodrop.method.dropout.auto_midpoint``)."""
    why = None if value == AUTO else number_in(0, float("inf"))(value)
    return why and f"{why}, or {AUTO}"


MODEL = {
    "device": string(),
    "dtype": one_of(*DTYPES),
    "model": Component(),
    "checkpointer": Component(),
}

# lm-eval task groups, in training and offline (recipes/evaluate.py).
LM_EVAL = {
    "tasks": mapping(list_of_strings()),
    "target_group": string(),
    # task -> the lm-eval result key its score is read from ("exact_match,flexible-extract").
    "metrics": mapping(string()),
    # True: prompts in the tokenizer's chat format, with system_instruction (null: none) first;
    # enable_thinking False opens each answer with Qwen3's empty thought (null: as the template).
    "apply_chat_template": boolean(),
    "system_instruction": optional(string()),
    "enable_thinking": optional(boolean()),
    "include_path": optional(string()),
    "limit": optional(integer(minimum=1)),
    "batch_size": integer(minimum=1),
    "generation_batch_size": optional(integer(minimum=1)),
    "compile_decode": boolean(),
    "max_seq_len": integer(minimum=1),
    "max_gen_toks": integer(minimum=1),
    "allow_code_execution": boolean(),
    # where generated programs run, each in its own process (entrodrop.sandbox; docs/evaluation.md)
    "sandbox": {
        "layer": one_of(*SANDBOXES),
        "workers": integer(minimum=1),
        "timeout_s": optional(positive_number()),
        "memory_mb": integer(minimum=64),
    },
}

TRAINING = {
    "output_dir": string(),
    # True: an earlier run in output_dir is moved aside (output_dir.replaced-<time>) first.
    "overwrite": boolean(),
    "seed": integer(minimum=0),
    **MODEL,
    "resume": boolean(),
    "data": {
        "target_tokens": TOKEN_STORE,
        "target_entropy": optional(ENTROPY_CACHE),
        "general_tokens": TOKEN_STORE,
        "seq_len": integer(minimum=1),
        "target_ratio": number_in(0, 1, low_open=True, high_open=True),
    },
    "total_tokens": integer(minimum=1),
    "global_batch_size": integer(minimum=1),
    "gradient_accumulation_steps": integer(minimum=1),
    "token_dropout": {
        "targeting": one_of(*TARGETING),
        # entropy: rank by the cached base-model entropy (the paper); loss: by each token's own
        # training loss at its last visit (entrodrop.method.loss_signal), its entropy before the first.
        "signal": one_of(*SIGNALS),
        "gate_percentile": number_in(0, 1, low_open=True),
        "schedule": one_of(*SCHEDULES),
        "gamma_max": number_in(0, 1),
        "sharpness": positive_number(),
        "midpoint": midpoint_or_auto,
        "midpoint_unit": one_of(*MIDPOINT_UNITS),
        # midpoint: auto only: evaluations without improvement, and the relative drop that counts.
        "auto_patience": integer(minimum=1),
        "auto_min_improvement": number_in(0, 1, high_open=True),
    },
    "neftune_alpha": number_in(0, float("inf")),
    "hidden_dropout": number_in(0, 1, high_open=True),
    "optimizer": Component(bound=("params",)),
    "lr_scheduler": Component(bound=("optimizer", "num_training_steps")),
    "clip_grad_norm": positive_number(),
    "loss": Component(),
    # The share of the decoder's layers, from the bottom, whose activations are recomputed in
    # backward (entrodrop.train.activations): 0 none, 1 all.
    "activation_checkpointing_share": number_in(0, 1),
    "compile": boolean(),
    "tokenizer": Component(),
    "evaluation": {
        "every_n_steps": optional(integer(minimum=1)),
        "every_n_epochs": optional(integer(minimum=1)),
        "validation": {
            "target_tokens": optional(TOKEN_STORE),
            "target_entropy": optional(ENTROPY_CACHE),
            "batch_size": integer(minimum=1),
        },
        "lm_eval": LM_EVAL,
    },
    "save_every_n_steps": integer(minimum=1),
    # null keeps every checkpoint; N keeps the newest N and the best one.
    "keep_last_n_checkpoints": optional(integer(minimum=1)),
    # True: a pruned checkpoint loses only its training state and keeps its weights.
    "keep_pruned_weights": boolean(),
    "log_every_n_steps": integer(minimum=1),
    "metric_logger": Component(),
    # torch.profiler over a few steps (torchtune.training.setup_torch_profiler; enabled: False, none).
    "profiler": Component(),
}

# Keys a config may still carry from an earlier version -> what to write instead.
RENAMED = {
    "enable_activation_checkpointing": "use activation_checkpointing_share; True is 1.0, False is 0.0",
    "evaluation.at_epoch_end": "use evaluation.every_n_epochs; at_epoch_end: True is every_n_epochs: 1, "
                               "False is every_n_epochs: null",
    "evaluation.lm_eval.code_workers": "use evaluation.lm_eval.sandbox.workers, in the sandbox group beside the "
                                       "other limits (layer, timeout_s, memory_mb)",
}

# What a resumed run may change: where and how it is watched and stored, and how (not what) it
# computes - the loss's implementation, activation checkpointing. Everything else (model, data
# stores, budget, method, optimizer, seed...) must match the checkpoint's saved config.
# enable_activation_checkpointing is the older name, still in the configs that checkpoints saved.
# ``may_change_on_resume`` adjusts it for ``midpoint: auto``.
MAY_CHANGE_ON_RESUME = (
    "output_dir", "checkpointer.output_dir", "resume", "overwrite", "device", "compile", "loss",
    "activation_checkpointing_share", "enable_activation_checkpointing", "tokenizer", "evaluation",
    "save_every_n_steps", "keep_last_n_checkpoints", "keep_pruned_weights", "log_every_n_steps", "metric_logger",
    # How a process's rows are split into micro-batches: a run resumed on fewer GPUs may need more.
    # The loss is a mean over the global batch's tokens either way (the same update, to rounding).
    "gradient_accumulation_steps",
    "profiler",
)
AUTO_KEYS = ("token_dropout.auto_patience", "token_dropout.auto_min_improvement")
# Keys configs gained later -> what a checkpoint saved without them trained with (resume compares).
ADDED_KEYS = {"token_dropout.signal": "entropy"}


def may_change_on_resume(cfg: DictConfig) -> Tuple[str, ...]:
    """``MAY_CHANGE_ON_RESUME`` for this config. With ``token_dropout.midpoint: auto`` the
    evaluation cadence and the validation data decide where the curriculum starts, so they
    must match the checkpoint's (the lm-eval tasks may still change); with a number the auto
    keys are not read, and a checkpoint saved before they existed resumes."""
    if cfg.token_dropout.midpoint == AUTO:
        return tuple(k for k in MAY_CHANGE_ON_RESUME if k != "evaluation") + ("evaluation.lm_eval",)
    return MAY_CHANGE_ON_RESUME + AUTO_KEYS


def _checkpoint_dir(cfg: DictConfig) -> List[str]:
    path = cfg.checkpointer.checkpoint_dir
    if (Path(path) / "config.json").is_file():
        return []
    return [f"checkpointer.checkpoint_dir={path} holds no Hugging Face checkpoint (config.json missing)"]


def _model_matches_checkpoint(cfg: DictConfig) -> List[str]:
    """Each field where the model of ``model:`` differs from the checkpoint's config.json: read on
    the meta device, so another size is named here, not as a shape error once the weights load."""
    from entrodrop.models.hf_config import model_config_problems

    path = Path(cfg.checkpointer.checkpoint_dir) / "config.json"
    return model_config_problems(cfg.model, [str(path)]) if path.is_file() else []  # else _checkpoint_dir says


def _batch_split(cfg: DictConfig) -> List[str]:
    if cfg.global_batch_size % cfg.gradient_accumulation_steps:
        return [f"global_batch_size={cfg.global_batch_size} is not a multiple of "
                f"gradient_accumulation_steps={cfg.gradient_accumulation_steps}"]
    return []


# The optimizer's values torch checks only once the model has loaded, by its keyword name.
OPTIMIZER_VALUES = {"lr": positive_number(),
                    "weight_decay": lambda v: None if positive_number()(v) is None or v == 0 else "must be a number >= 0",
                    "eps": positive_number(), "momentum": number_in(0, 1)}


def _optimizer_values(cfg: DictConfig) -> List[str]:
    """The optimizer's learning rate, weight decay, eps, momentum and betas, named by their key:
    torch would refuse them after the model has loaded (an 8B model's weights), without the key."""
    opt = cfg.optimizer
    problems = [f"optimizer.{key}={opt[key]!r}: {why}" for key, check in OPTIMIZER_VALUES.items()
                if key in opt for why in [check(opt[key])] if why]
    betas = opt.get("betas")
    if betas is not None and (len(betas) != 2 or any(number_in(0, 1, high_open=True)(b) for b in betas)):
        problems.append(f"optimizer.betas={list(betas)!r}: must be two numbers in [0, 1)")
    return problems


def model_max_seq_len(model_cfg: DictConfig) -> Optional[int]:
    """The longest sequence the model of ``model_cfg`` takes (its RoPE table's length), read from
    the model built on the meta device: no weight is allocated, and a builder without a
    ``max_seq_len`` argument (``qwen3_0_6b``, ``llama3_1_8b``) is read too. None if it has none."""
    from entrodrop.models.hf_config import built_on_meta

    return getattr(built_on_meta(model_cfg), "max_seq_len", None)


def _lengths_fit(lengths: Mapping[str, Optional[int]], model_cfg: DictConfig) -> List[str]:
    """Each of ``lengths`` (config key -> tokens; None: not read) within the model's max_seq_len:
    a longer row fails only at its first forward pass, after the weights have loaded."""
    read = {key: n for key, n in lengths.items() if n is not None}
    limit = model_max_seq_len(model_cfg) if read else None
    return [f"{key}={n} is longer than the model's max_seq_len={limit} ({model_cfg._component_}): set {key} <= {limit}"
            for key, n in read.items() if limit is not None and n > limit]


def _training_lengths(cfg: DictConfig) -> List[str]:
    ev = cfg.evaluation.lm_eval
    return _lengths_fit({"data.seq_len": cfg.data.seq_len,
                         "evaluation.lm_eval.max_seq_len": ev.max_seq_len if any(ev.tasks.values()) else None},
                        cfg.model)


def _evaluate_lengths(cfg: DictConfig) -> List[str]:
    ev = cfg.evaluation
    return _lengths_fit({"evaluation.validation.seq_len": ev.validation.seq_len if ev.validation.target_tokens else None,
                         "evaluation.lm_eval.max_seq_len": ev.lm_eval.max_seq_len
                         if cfg.backend == "torchtune" and any(ev.lm_eval.tasks.values()) else None}, cfg.model)


# The tokenizer arguments that name a file (Qwen3's vocab, merges and special tokens; Llama 3's
# tiktoken model): checked at start-up, as a missing one fails only when the tokenizer is built.
TOKENIZER_FILES = ("path", "merges_file", "special_tokens_path")


def _missing_files(cfg: DictConfig, tokenizer_read: bool, include_path: Optional[str] = None) -> List[str]:
    """The tokenizer's files (when the recipe builds it) and lm-eval's ``include_path`` that do not exist."""
    problems = [f"tokenizer.{key}={cfg.tokenizer[key]} does not exist" for key in TOKENIZER_FILES
                if tokenizer_read and isinstance(cfg.tokenizer.get(key), str) and not Path(cfg.tokenizer[key]).is_file()]
    if include_path is not None and not Path(include_path).is_dir():
        problems.append(f"evaluation.lm_eval.include_path={include_path} is not a directory (of lm-eval task YAMLs)")
    return problems


def _training_files(cfg: DictConfig) -> List[str]:
    ev = cfg.evaluation.lm_eval  # the tokenizer is built for the lm-eval tasks only
    tasks = any(ev.tasks.values())
    return _missing_files(cfg, tasks, ev.include_path if tasks else None)


def _evaluate_files(cfg: DictConfig) -> List[str]:
    ev = cfg.evaluation.lm_eval
    tasks = any(ev.tasks.values())
    return _missing_files(cfg, tasks and cfg.backend == "torchtune", ev.include_path if tasks else None)


def _entropy_needed(cfg: DictConfig) -> List[str]:
    td = cfg.token_dropout
    if cfg.data.target_entropy is None and td.schedule != "none" and td.targeting != "random":
        return ["data.target_entropy=null: entropy-guided dropout needs the entropy cache"]
    return []


def _validation_pair(cfg: DictConfig) -> List[str]:
    v = cfg.evaluation.validation  # target_tokens: null turns validation off
    if v.target_tokens is not None and v.target_entropy is None:
        return [f"evaluation.validation.target_entropy=null: the validation store {v.target_tokens} needs its "
                "entropy cache (recipes/precompute_entropy.py), or set target_tokens=null"]
    return []


def _loss_signal(cfg: DictConfig) -> List[str]:
    """``signal: loss`` ranks tokens for the gate: it needs a gate that ranks (and, below, the
    entropy cache: the signal before a token's first visit, and the store's layout)."""
    td = cfg.token_dropout
    if td.signal != "loss":
        return []
    if td.targeting == "random" or td.schedule == "none":
        why = "targeting=random gates every token" if td.targeting == "random" else "schedule=none drops nothing"
        return [f"token_dropout.signal=loss ranks the tokens the gate takes, but {why}: use signal=entropy"]
    return []


def _loss_signal_start(cfg: DictConfig) -> List[str]:
    if cfg.token_dropout.signal == "loss" and cfg.data.target_entropy is None:
        return ["token_dropout.signal=loss starts from the entropy cache (each token's signal before its first "
                "visit): set data.target_entropy"]
    return []


def _auto_midpoint(cfg: DictConfig) -> List[str]:
    """``midpoint: auto`` watches the all-token validation loss at the evaluation cadence."""
    td, ev = cfg.token_dropout, cfg.evaluation
    if td.midpoint != AUTO:
        return []
    problems = []
    if td.schedule == "static":
        problems.append("token_dropout.midpoint=auto places the sigmoid curriculum, but schedule=static has none "
                        "(it drops at gamma_max from step 0): use schedule=sigmoid, or a number for midpoint")
    if ev.validation.target_tokens is None:
        problems.append("token_dropout.midpoint=auto needs the validation loss, but evaluation.validation.target_tokens"
                        "=null: set the held-out token store and its entropy cache, or a number for midpoint")
    if ev.every_n_steps is None and ev.every_n_epochs is None:
        problems.append("token_dropout.midpoint=auto needs evaluations during training, but evaluation.every_n_steps"
                        " and evaluation.every_n_epochs are both null (only the last step is evaluated): set one")
    return problems


def _loss_package(cfg: DictConfig) -> List[str]:
    """``loss.impl: liger`` imports liger-kernel, an optional package (the ``gpu`` extra): a missing
    one is a config problem, listed with the others before anything loads."""
    from importlib.util import find_spec

    if cfg.loss.get("impl") == "liger" and find_spec("liger_kernel") is None:
        return ["loss.impl=liger needs liger-kernel (with triton and a CUDA GPU), which is not installed: "
                "pip install -e '.[gpu]', or use impl: torch"]
    return []


def _writable_dir(key: str, path: str) -> List[str]:
    """``path`` is a directory this process can write into, or can be made as one: no part of it
    is a file, and its nearest existing folder takes a new file. Checked with a nameless
    temporary file (``O_TMPFILE``: nothing appears in the folder), so a refused run writes nothing."""
    import tempfile

    existing = Path(path).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return [f"{key}={path}: {existing} is a file, not a directory: choose another {key}"]
    why = None if os.access(existing, os.W_OK | os.X_OK) else "not writable by this user, or a read-only file system"
    if why is None:
        try:  # root passes os.access everywhere, but not a read-only file system
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as e:
            why = e.strerror
    return [f"{key}={path}: {existing} cannot be written ({why}): choose another {key}"] if why else []


def _output_dirs(cfg: DictConfig) -> List[str]:
    """``output_dir`` (and the checkpoint and log directories under it) can be written: found
    before the model loads, not at the first log line or checkpoint."""
    problems = _writable_dir("output_dir", cfg.output_dir)
    if problems:  # the others are under it, as the configs have them: one problem, not three
        return problems
    # loggers without a local directory have none
    others = {"checkpointer.output_dir": cfg.checkpointer.get("output_dir"), "metric_logger.log_dir":
              cfg.metric_logger.get("log_dir")}
    return [p for key, path in others.items() if isinstance(path, str) for p in _writable_dir(key, path)]


TRAINING_RULES: List[Rule] = [
    (["output_dir", "checkpointer", "metric_logger"], _output_dirs),
    (["loss"], _loss_package),
    (["checkpointer"], _checkpoint_dir),
    (["model", "checkpointer"], _model_matches_checkpoint),
    (["global_batch_size", "gradient_accumulation_steps"], _batch_split),
    (["optimizer"], _optimizer_values),
    (["model", "data.seq_len", "evaluation.lm_eval"], _training_lengths),
    (["tokenizer", "evaluation.lm_eval"], _training_files),
    (["data.target_entropy", "token_dropout.schedule", "token_dropout.targeting"], _entropy_needed),
    (["token_dropout.signal", "token_dropout.schedule", "token_dropout.targeting"], _loss_signal),
    (["token_dropout.signal", "data.target_entropy"], _loss_signal_start),
    (["evaluation.validation.target_tokens", "evaluation.validation.target_entropy"], _validation_pair),
    (["token_dropout.midpoint", "token_dropout.schedule", "evaluation.validation.target_tokens",
      "evaluation.every_n_steps", "evaluation.every_n_epochs"], _auto_midpoint),
]

# Who runs the lm-eval tasks offline: the project's adapter, or lm-eval's own model classes on
# the saved Hugging Face directory.
BACKENDS = ("torchtune", "hf", "vllm")

EVALUATE = {
    "output_dir": string(),
    "checkpoints": string(),
    "eval_dir": string(),
    "seed": integer(minimum=0),
    "device": string(),
    "dtype": one_of(*DTYPES),
    "backend": one_of(*BACKENDS),
    "model": Component(),
    "model_type": one_of(*FAMILIES),
    "tokenizer": Component(),
    "evaluation": {
        "validation": {
            "target_tokens": optional(TOKEN_STORE),
            "target_entropy": optional(ENTROPY_CACHE),
            "seq_len": integer(minimum=1),
            "batch_size": integer(minimum=1),
        },
        "lm_eval": LM_EVAL,
    },
}


def _something_to_score(cfg: DictConfig) -> List[str]:
    ev = cfg.evaluation
    if ev.validation.target_tokens is None and not any(ev.lm_eval.tasks.values()):
        return ["evaluation.validation.target_tokens=null and evaluation.lm_eval.tasks are empty: nothing to evaluate"]
    return []


def _one_process_backend(cfg: DictConfig) -> List[str]:
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    if cfg.backend != "torchtune" and processes > 1:
        return [f"backend={cfg.backend} runs in one process, not {processes}: lm-eval's {cfg.backend} model spreads "
                "over GPUs itself; run tune run without --nproc_per_node, or use backend=torchtune"]
    return []


EVALUATE_RULES: List[Rule] = [
    # eval_dir is all it writes: output_dir only names the run whose checkpoints it reads.
    (["eval_dir"], lambda cfg: _writable_dir("eval_dir", cfg.eval_dir)),
    (["evaluation.validation.target_tokens", "evaluation.validation.target_entropy"], _validation_pair),
    (["evaluation.validation.target_tokens", "evaluation.lm_eval.tasks"], _something_to_score),
    (["backend"], _one_process_backend),
    (["model", "backend", "evaluation.validation", "evaluation.lm_eval"], _evaluate_lengths),
    (["tokenizer", "backend", "evaluation.lm_eval"], _evaluate_files),
]

# A corpus entry of recipes/tokenize_corpus.py (entrodrop.data.store_plans): a JSON-lines file ...
JSONL_CORPUS = {"path": string(), "text_field": string(), "store_dir": string()}
# ... or a datasets.load_dataset source, with torchtune's key names where it has them.
SOURCE_CORPUS = {
    "source": string(),
    "name": optional(string()),
    "split": string(),
    "data_files": optional(lambda v: None if isinstance(v, (str, list, dict)) and v else "must be a path, a list of "
                           "paths, or a split -> paths mapping"),
    "revision": optional(string()),
    "streaming": boolean(),
    # how a row becomes a sample: exactly one of these three
    "column": optional(string()),
    "template": optional(string()),
    "conversation_column": optional(string()),
    "conversation_style": one_of(*STYLES),
    "chat_template": boolean(),
    # a turn whose role the style does not know (function_call): drop (left out), keep (as it is),
    # or error; the log counts them
    "unknown_roles": one_of(*UNKNOWN_ROLES),
    # the selection
    "seed": integer(minimum=0),
    "max_tokens": optional(integer(minimum=1)),
    "max_samples": optional(integer(minimum=1)),
    "validation_size": optional(lambda v: None if (isinstance(v, float) and 0 < v < 1) or not integer(minimum=1)(v)
                                else "must be a fraction in (0, 1) or a count of rows >= 1"),
    "validation_store_dir": optional(string()),
    # what a row's problem is: a column (the prompt), first_user_turn, or null (each distinct row);
    # every row of a held-out problem is held out, whitespace and case ignored (docs/data.md)
    "problem_key": optional(string()),
    "long_samples": one_of(*LONG_SAMPLES),
    "store_dir": string(),
}


def _source_rules(entry, prefix: str) -> List[str]:
    """What a source entry's keys must agree on."""
    problems = []
    renderings = [k for k in ("column", "template", "conversation_column") if entry[k] is not None]
    if len(renderings) != 1:
        problems.append(f"{prefix[:-1]}: set exactly one of column, template, conversation_column (how a row becomes a "
                        f"sample), not {renderings or 'none'}")
    if entry["template"] is not None:
        try:
            if not template_fields(entry["template"]):
                problems.append(f"{prefix}template={entry['template']!r} names no column ({{column}})")
        except ValueError as e:
            problems.append(f"{prefix}template={entry['template']!r} is not a format string ({e})")
    if entry["chat_template"] and entry["conversation_column"] is None:
        problems.append(f"{prefix}chat_template=True renders turns: it needs conversation_column")
    if entry["problem_key"] == FIRST_USER_TURN and entry["conversation_column"] is None:
        problems.append(f"{prefix}problem_key={FIRST_USER_TURN} reads the turns: it needs conversation_column, or name "
                        "the prompt's column")
    if entry["max_tokens"] is not None and entry["max_samples"] is not None:
        problems.append(f"{prefix[:-1]}: max_tokens and max_samples are both set: choose one budget")
    if (entry["validation_size"] is None) != (entry["validation_store_dir"] is None):
        problems.append(f"{prefix[:-1]}: validation_size and validation_store_dir go together (both set, or both null)")
    if entry["streaming"] and isinstance(entry["validation_size"], float):
        problems.append(f"{prefix}validation_size={entry['validation_size']}: a streamed source has no known size; "
                        "hold out a count of rows")
    if entry["source"] in LOCAL_BUILDERS and entry["data_files"] is None:
        problems.append(f"{prefix}data_files=None: the local builder {entry['source']} reads data_files")
    return problems


def _corpus_entries(cfg: DictConfig) -> List[str]:
    problems = []
    for name, node in cfg.corpora.items():
        prefix = f"corpora.{name}."
        if "path" in node:
            long_samples = {"long_samples": one_of(*LONG_SAMPLES)} if "long_samples" in node else {}
            problems += check_config(node, {**JSONL_CORPUS, **long_samples}, prefix)  # split when not set
        elif "source" in node:
            found = check_config(node, SOURCE_CORPUS, prefix)
            problems += found or _source_rules(OmegaConf.to_container(node, resolve=True), prefix)
        else:
            problems.append(f"corpora.{name}: names neither a JSON-lines file (path, text_field, store_dir) nor a "
                            f"datasets source (source, split, ...: see configs/qwen3/0.6B_tokenize.yaml)")
    return problems


TOKENIZE = {
    "tokenizer": Component(),
    "corpora": mapping(lambda c: None if isinstance(c, Mapping) else "must be a node of corpus keys"),
    "max_seq_len": integer(minimum=1),
    "samples_per_shard": integer(minimum=1),
}
TOKENIZE_RULES: List[Rule] = [(["corpora"], _corpus_entries), (["tokenizer"], lambda cfg: _missing_files(cfg, True))]

PRECOMPUTE = {
    "cache_dir": string(),
    **MODEL,
    "target_tokens": TOKEN_STORE,
    # Samples (pack_len null) or rows of pack_len tokens (entrodrop.method.entropy.shard_entropies) a batch.
    "batch_size": integer(minimum=1),
    "pack_len": optional(integer(minimum=1)),
    "compile": boolean(),
    "chunk_size": integer(minimum=1),
    "vocab_chunk_size": integer(minimum=1),
    "samples_per_shard": integer(minimum=1),
}


def _pack_len_holds_a_sample(cfg: DictConfig) -> List[str]:
    """Packed rows hold whole samples: a sample's entropies need its whole context, so a sample
    is never split across rows. The token store's ``max_seq_len`` bounds its samples; a
    shorter ``pack_len`` is refused here, before the model loads, rather than at the first
    shard that holds a longer sample."""
    if cfg.pack_len is None:
        return []
    max_seq_len = json.loads((Path(cfg.target_tokens) / "manifest.json").read_text())["key"]["max_seq_len"]
    if cfg.pack_len >= max_seq_len:
        return []
    return [f"pack_len={cfg.pack_len} is shorter than the samples of target_tokens={cfg.target_tokens}, cut to "
            f"max_seq_len={max_seq_len}: packed rows hold whole samples, so set pack_len >= {max_seq_len}, "
            "or pack_len=null to batch samples by length"]


def _precompute_lengths(cfg: DictConfig) -> List[str]:
    """A packed row, or else the store's longest sample, within the model's max_seq_len."""
    if cfg.pack_len is not None:
        return _lengths_fit({"pack_len": cfg.pack_len}, cfg.model)
    longest = json.loads((Path(cfg.target_tokens) / "manifest.json").read_text())["key"]["max_seq_len"]
    limit = model_max_seq_len(cfg.model)
    if limit is None or longest <= limit:
        return []
    return [f"target_tokens={cfg.target_tokens} holds samples of up to {longest} tokens (the max_seq_len it was "
            f"tokenized with), more than the model's max_seq_len={limit} ({cfg.model._component_}): tokenize with "
            f"max_seq_len <= {limit}"]


PRECOMPUTE_RULES: List[Rule] = [
    (["checkpointer"], _checkpoint_dir),
    (["model", "checkpointer"], _model_matches_checkpoint),
    (["pack_len", "target_tokens"], _pack_len_holds_a_sample),
    (["model", "pack_len", "target_tokens"], _precompute_lengths),
]

SMOKE = {
    "output_dir": string(),
    **MODEL,
    "tokenizer": Component(),
    "text_file": string(),
    "seq_len": integer(minimum=1),
    "batch_size": integer(minimum=1),
    "max_windows": integer(minimum=1),
}
SMOKE_RULES: List[Rule] = [
    (["output_dir"], lambda cfg: _writable_dir("output_dir", cfg.output_dir)),
    (["checkpointer"], _checkpoint_dir),
    (["model", "checkpointer"], _model_matches_checkpoint),
    (["tokenizer"], lambda cfg: _missing_files(cfg, True)),
    (["model", "seq_len"], lambda cfg: _lengths_fit({"seq_len": cfg.seq_len}, cfg.model)),
]


_ABSENT = object()


def _present(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted ``key`` is in ``cfg``: a section that is missing (or is not a mapping)
    holds none of its keys, and its problem names the section, not ``key``."""
    return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False,
                            throw_on_resolution_failure=False) is not _ABSENT


def check_rules(cfg: DictConfig, rules: List[Rule], problems: List[str]) -> List[str]:
    """The problems of each rule whose keys are all there and have none yet (see the module docs)."""
    found = []
    for keys, rule in rules:
        if all(_present(cfg, key) for key in keys) and not any(key in line for key in keys for line in problems):
            found += rule(cfg)
    return found


def check(cfg: DictConfig, schema: dict, rules: List[Rule], what: str) -> None:
    """``check_config`` then the rules; raise one ``ConfigError`` listing everything. A config that
    is empty or a list is one problem (``whole_config_problem``), not every key missing."""
    whole = whole_config_problem(cfg)
    if whole:
        raise_problems([whole], what)
    problems = check_config(cfg, schema, renamed=RENAMED)
    problems += check_rules(cfg, rules, problems)
    raise_problems(problems, what, relative_paths_note(problems))

