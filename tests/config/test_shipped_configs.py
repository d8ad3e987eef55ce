"""Every YAML under configs/ is valid for torchtune and names a recipe that exists."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, TUNE
from omegaconf import OmegaConf
from torchtune import config

CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))
LAUNCH = re.compile(r"tune run (?:--nproc_per_node \d+ )?(recipes/\w+\.py) --config (\S+)")


def test_there_are_configs_for_the_papers_models():
    names = {p.relative_to(REPO / "configs").as_posix() for p in CONFIGS}
    assert {"qwen3/0.6B_smoke.yaml", "qwen3/1.7B_smoke.yaml", "llama3_1/8B_instruct_smoke.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_config_validates_and_names_its_recipe(path):
    cfg = OmegaConf.load(path)
    config.validate(cfg)  # what `tune validate` runs: every _component_ resolves and binds
    OmegaConf.to_container(cfg, resolve=True)  # every ${...} interpolation resolves
    launches = LAUNCH.findall(path.read_text())
    assert path.relative_to(REPO).as_posix() in [c for _, c in launches], (
        f"{path} does not open with the `tune run` command that launches it")
    for recipe, config_path in launches:
        assert (REPO / recipe).is_file(), recipe
        assert (REPO / config_path).is_file(), config_path


def test_paper_settings_are_the_defaults():
    paths = paper_configs()
    assert len(paths) == 6 + 7
    for path in paths:
        cfg = OmegaConf.load(path)
        assert (cfg.data.seq_len, cfg.data.target_ratio, cfg.global_batch_size) == (4096, 0.6, 512), path
        assert (cfg.optimizer.lr, cfg.token_dropout.gamma_max, cfg.token_dropout.gate_percentile) == (1e-5, 0.1, 0.5)
        assert cfg.lr_scheduler._component_.endswith("get_cosine_schedule_with_warmup")


def paper_configs() -> list:
    paths = [*(REPO / "configs").glob("*/*_entrodrop_*.yaml"), *(REPO / "configs/ablations").glob("*.yaml")]
    return [p for p in paths if p.parent.name != "tiny"]


def test_paper_configs_evaluate_cheap_signals_in_training_and_the_full_suite_offline(shipped_tasks):
    task_manager = shipped_tasks
    for path in paper_configs():
        cfg = OmegaConf.load(path)
        lm = cfg.evaluation.lm_eval
        for name in (t for tasks in lm.tasks.values() for t in tasks):
            output_type = task_manager.task_index[name].cfg.get("output_type")
            assert output_type in ("loglikelihood", "multiple_choice"), (path, name, output_type)
        assert lm.limit is not None and not lm.allow_code_execution, path
        last = header_commands(path)[-1]  # the header's last step, and in the comment above evaluation:
        assert re.fullmatch(rf"tune run recipes/evaluate\.py --config configs/\S+_evaluate\.yaml "
                            rf"output_dir={re.escape(cfg.output_dir)}", last), (path, last)
        assert path.read_text().count(last) == 2, f"{path}: the comment above evaluation: does not name {last!r}"


def header_commands(path: Path) -> list:
    """The `tune run` commands of a config's opening comment, in order."""
    commands = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("#   tune run "):
            commands.append(line[len("#   "):].strip())
    return commands


def made_by(commands: list) -> set:
    """The stores the tokenize and precompute commands of a header write."""
    stores = set()
    for command in commands:
        args = command.split()
        config_path = args[args.index("--config") + 1]
        cfg = OmegaConf.load(REPO / config_path)
        overrides = dict(a.split("=", 1) for a in args if "=" in a)
        if "tokenize_corpus.py" in command:
            stores |= {c.store_dir for c in cfg.corpora.values()}
            stores |= {c.validation_store_dir for c in cfg.corpora.values() if c.get("validation_store_dir")}
        elif "precompute_entropy.py" in command:
            stores.add(overrides.get("cache_dir", cfg.cache_dir))
    return stores


# Training and offline evaluation configs: what they read comes from the commands in their header.
READERS = [p for p in CONFIGS if "evaluation" in OmegaConf.load(p)]


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_the_header_makes_every_store_the_config_reads(path):
    cfg = OmegaConf.load(path)
    data = cfg.get("data", {})
    reads = {data.get("target_tokens"), data.get("target_entropy"), data.get("general_tokens"),
             cfg.evaluation.validation.target_tokens, cfg.evaluation.validation.target_entropy} - {None}
    commands = header_commands(path)
    launch = [i for i, c in enumerate(commands) if path.relative_to(REPO).as_posix() in c]
    assert launch, f"{path} does not open with its own launch command"
    missing = reads - made_by(commands[: launch[0]])
    assert not missing, f"{path}: no command before the launch line makes {sorted(missing)}"


@pytest.mark.recipe
def test_the_tiny_configs_run_from_their_headers_as_written(tiny_assets, tmp_path):
    """A new user's path: the header commands, in order, exactly as written, in a fresh directory
    that holds the repository's files (so outputs/ starts empty)."""
    for name in ("recipes", "configs", "entrodrop", "assets"):
        (tmp_path / name).symlink_to(REPO / name)
    done = []
    for path in ("configs/tiny/qwen3_entrodrop_single_device.yaml", "configs/tiny/qwen3_entrodrop_distributed.yaml",
                 "configs/tiny/qwen3_evaluate.yaml"):
        for command in header_commands(REPO / path):
            if command in done:
                continue
            args = shlex.split(command)
            result = subprocess.run([TUNE, *args[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
            assert result.returncode == 0, (command, result.stderr[-3000:])
            done.append(command)
    assert len(done) == 6
    for run in ("tiny_qwen3_entrodrop", "tiny_qwen3_entrodrop_distributed"):
        summary = json.loads((tmp_path / "outputs" / run / "eval" / "summary.json").read_text())
        assert summary["best_checkpoint"]["by"] == "code average"
    # The offline evaluation scored every checkpoint of the single-device run on every document.
    evals = [json.loads(line) for line in (tmp_path / "outputs/tiny_qwen3_entrodrop/eval/evals.jsonl").open()]
    offline = [e for e in evals if e["limit"] is None]
    steps = sorted(int(p.name[5:]) for p in (tmp_path / "outputs/tiny_qwen3_entrodrop/checkpoints").glob("step_*"))
    assert [e["step"] for e in offline] == steps


TRAINING_CONFIGS = [p for p in CONFIGS if "token_dropout" in OmegaConf.load(p)]


@pytest.mark.parametrize("path", TRAINING_CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_every_training_config_has_every_key_the_recipes_read(path):
    from entrodrop.config import schemas
    from entrodrop.config.check import check_config

    cfg = OmegaConf.load(path)
    problems = check_config(cfg, schemas.TRAINING, renamed=schemas.RENAMED)
    problems += schemas.check_rules(cfg, schemas.TRAINING_RULES, problems)
    assert not_yet_made(problems) == []


def not_yet_made(problems: list) -> list:
    """``problems`` but for what the header's commands (or a download) make, not there yet in a
    fresh checkout: stores, the model directory and its tokenizer files."""
    return [p for p in problems if "holds no store" not in p and "holds no Hugging Face checkpoint" not in p
            and not (p.startswith("tokenizer.") and p.endswith("does not exist"))]


TOKENIZE_CONFIGS = sorted((REPO / "configs").glob("*/*tokenize.yaml"))


@pytest.mark.parametrize("path", TOKENIZE_CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_every_tokenize_config_has_every_key_the_recipe_reads(path):
    from entrodrop.config import schemas
    from entrodrop.config.check import check_config

    cfg = OmegaConf.load(path)
    problems = check_config(cfg, schemas.TOKENIZE, renamed=schemas.RENAMED)
    assert not_yet_made(problems + schemas.check_rules(cfg, schemas.TOKENIZE_RULES, problems)) == []


def hub_copies(root: Path) -> dict:
    """Small local parquet copies of the paper's three datasets, with their real columns and nesting."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [line for line in (REPO / "entrodrop" / "data" / "store_plans.py").read_text().splitlines() if line.strip()]
    numina = [{"source": "synthetic", "problem": f"Problem {i}: {lines[i]}", "solution": " ".join(lines[i : i + 9]),
               "messages": [{"role": "user", "content": lines[i]}, {"role": "assistant", "content": lines[i + 1]}]}
              for i in range(120)]
    coder = [{"question": lines[i], "seed_question": lines[i + 1], "seed_source": "codeforces",
              "response": " ".join(lines[i : i + 30]), "code": lines[i + 2]} for i in range(120)]
    infinity = [{"id": str(i), "conversations": [{"from": "human", "value": lines[i]}, {"from": "gpt", "value": lines[i + 3]}],
                 "label": {"cate_ability_en": ["x"]}, "langdetect": "en", "source": "s"} for i in range(200)]
    files = {}
    for name, rows in (("AI-MO/NuminaMath-CoT", numina), ("microsoft/rStar-Coder", coder), ("BAAI/Infinity-Instruct", infinity)):
        files[name] = root / f"{name.split('/')[1]}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), files[name])
    return files


def test_the_paper_tokenize_configs_run_from_their_headers_on_local_copies(tiny_assets, tune_run, tmp_path):
    """Each model's math tokenize config and Qwen3-0.6B's code one, as their headers run them,
    with the hub sources replaced by local copies of the same columns (and the tiny tokenizer,
    small budgets): the stores are written, and the general store the math setting wrote is kept
    by the code one. The other models' code configs read what Qwen3-0.6B's does."""
    from entrodrop.data.sample_store import SampleStore

    def sources(path: Path) -> dict:
        corpora = OmegaConf.to_container(OmegaConf.load(path).corpora)
        return {name: {k: v for k, v in entry.items() if not k.endswith("store_dir") and k != "max_tokens"}
                for name, entry in corpora.items()}

    for model in ("qwen3/1.7B", "llama3_1/8B_instruct"):
        for setting in ("", "_code"):
            assert sources(REPO / f"configs/{model}{setting}_tokenize.yaml") == sources(
                REPO / f"configs/qwen3/0.6B{setting}_tokenize.yaml")
    files = hub_copies(tmp_path)
    tiny = tiny_assets / "qwen3"
    for model, settings in (("qwen3/0.6B", ("", "_code")), ("qwen3/1.7B", ("",)), ("llama3_1/8B_instruct", ("",))):
        out = tmp_path / model.replace("/", "_")
        for setting in settings:
            path = REPO / "configs" / f"{model}{setting}_tokenize.yaml"
            cfg = OmegaConf.load(path)
            [command] = [c for c in header_commands(path) if "tokenize_corpus.py" in c and "nproc" not in c]
            overrides = ["tokenizer._component_=entrodrop.models.qwen3.qwen3_tokenizer", f"tokenizer.path={tiny}/vocab.json",
                         f"tokenizer.merges_file={tiny}/merges.txt", f"tokenizer.special_tokens_path={tiny}/tokenizer.json",
                         "max_seq_len=64", "samples_per_shard=32"]
            for name, entry in cfg.corpora.items():
                overrides += [f"corpora.{name}.source=parquet", f"corpora.{name}.name=null",
                              f"corpora.{name}.data_files={files[entry.source]}",
                              f"corpora.{name}.store_dir={out}/{Path(entry.store_dir).name}",
                              f"corpora.{name}.max_tokens={2000 if name == 'target' else 5000}"]
                if entry.validation_size is not None:
                    overrides += [f"corpora.{name}.validation_size=10",
                                  f"corpora.{name}.validation_store_dir={out}/{Path(entry.validation_store_dir).name}"]
            result = tune_run(*shlex.split(command)[2:], *overrides)
            assert result.returncode == 0, (path, result.stderr[-3000:])
            for name, entry in cfg.corpora.items():
                manifest = json.loads((out / Path(entry.store_dir).name / "manifest.json").read_text())
                assert manifest["complete"] and manifest["source"]["source"] == "parquet"
                assert manifest["num_tokens"] <= (2000 if name == "target" else 5000)
                if entry.validation_store_dir is not None:
                    held_out = SampleStore(str(out / Path(entry.validation_store_dir).name), "tokens")
                    assert held_out.manifest["source"]["role"] == "validation" and len(held_out) >= 10
            if setting == "_code":
                assert "general is complete already" in result.stderr
