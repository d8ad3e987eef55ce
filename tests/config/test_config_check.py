"""Config checks: every missing, unknown and invalid key in one error; resume differences."""


import pytest
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.config import schemas
from entrodrop.config.check import check_config
from entrodrop.errors import ConfigError
from entrodrop.train.run_dir import differences, plain

TINY_TRAINING = REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml"


def training_problems(cfg) -> list:
    problems = check_config(cfg, schemas.TRAINING)
    # The tiny config's stores are made by the tests that need them: not a problem here.
    return [p for p in problems + schemas.check_rules(cfg, schemas.TRAINING_RULES, problems) if "holds no store" not in p]


def test_the_tiny_training_config_has_no_problem():
    assert training_problems(OmegaConf.load(TINY_TRAINING)) == []


def test_every_missing_unknown_and_invalid_key_is_listed_together():
    cfg = OmegaConf.load(TINY_TRAINING)
    del cfg.token_dropout["sharpness"], cfg["seed"]
    cfg.token_dropout.gama_max = 0.5  # what a misspelt override `token_dropout.gama_max=0.5` adds
    cfg.optimizer.weight_decy = 0.1
    cfg.token_dropout.targeting = "middle"
    cfg.token_dropout.gate_percentile = 0.0
    cfg.token_dropout.schedule = "cosine"
    cfg.token_dropout.gamma_max = 1.5
    cfg.token_dropout.midpoint = -1
    cfg.token_dropout.midpoint_unit = "days"
    cfg.neftune_alpha = -1
    cfg.hidden_dropout = 1.0
    cfg.total_tokens = "lots"
    cfg.global_batch_size = 6
    cfg.gradient_accumulation_steps = 4
    problems = training_problems(cfg)
    expected = [
        "missing key: seed", "missing key: token_dropout.sharpness",
        "unknown key: token_dropout.gama_max (did you mean gamma_max?)",
        "unknown key: optimizer.weight_decy (did you mean weight_decay?)",
        "token_dropout.targeting=middle must be one of ('low', 'high', 'random')",
        "token_dropout.gate_percentile=0.0 must be in (0, 1]",
        "token_dropout.schedule=cosine must be one of ('sigmoid', 'static', 'none')",
        "token_dropout.gamma_max=1.5 must be in [0, 1]",
        "token_dropout.midpoint=-1 must be in [0, inf]",
        "token_dropout.midpoint_unit=days must be one of ('steps', 'epochs')",
        "neftune_alpha=-1 must be in [0, inf]", "hidden_dropout=1.0 must be in [0, 1)",
        "total_tokens=lots must be an integer",
        "global_batch_size=6 is not a multiple of gradient_accumulation_steps=4",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in problems), (line, problems)
    assert len(problems) == len(expected), problems


@pytest.mark.parametrize("overrides, expected", [
    (["optimizer.lr=-1e-3"], ["optimizer.lr=-0.001: must be a positive number"]),
    (["optimizer.lr=abc", "optimizer.weight_decay=-0.1"],
     ["optimizer.lr='abc': must be a positive number", "optimizer.weight_decay=-0.1: must be a number >= 0"]),
    (["optimizer.betas=[0.9,1.5]"], ["optimizer.betas=[0.9, 1.5]: must be two numbers in [0, 1)"]),
    (["optimizer.lr=2e-5", "optimizer.weight_decay=0.1"], []),
])
def test_optimizer_values_are_checked_by_key_before_the_model_loads(overrides, expected):
    """torch refuses these only once the model has loaded, and never names the key."""
    cfg = OmegaConf.merge(OmegaConf.load(TINY_TRAINING), OmegaConf.from_dotlist(overrides))
    assert training_problems(cfg) == expected


def test_a_rule_is_skipped_when_its_keys_are_already_wrong():
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.global_batch_size = 0
    cfg.gradient_accumulation_steps = 3
    problems = training_problems(cfg)
    assert problems == ["global_batch_size=0 must be a positive integer"]


def test_a_component_must_import_and_take_its_arguments():
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.loss._component_ = "torchtune.modules.loss.NoSuchLoss"
    del cfg.model["vocab_size"]
    problems = training_problems(cfg)
    assert any(p.startswith("loss._component_=torchtune.modules.loss.NoSuchLoss: cannot be imported") for p in problems)
    assert "missing key: model.vocab_size (an argument of entrodrop.models.qwen3.qwen3)" in problems
    assert len(problems) == 2, problems


def test_an_unresolvable_interpolation_is_a_problem_not_a_crash():
    cfg = OmegaConf.load(TINY_TRAINING)
    del cfg["output_dir"]  # checkpointer.output_dir and the logger's log_dir read ${output_dir}
    problems = training_problems(cfg)
    assert "missing key: output_dir" in problems
    assert any(p.startswith("checkpointer: cannot be resolved") for p in problems), problems


def test_the_error_lists_every_problem():
    cfg = OmegaConf.create({"seed": "x"})
    with pytest.raises(ConfigError, match=r"invalid tokenize config \(5 problems\)") as e:
        schemas.check(cfg, schemas.TOKENIZE, [], "tokenize")
    assert "unknown key: seed" in str(e.value) and "missing key: corpora" in str(e.value)


def test_differences_name_every_changed_key_except_those_that_may_change():
    saved = {"seed": 0, "token_dropout": {"gamma_max": 0.1, "midpoint": 2}, "evaluation": {"limit": 16}, "total_tokens": 10}
    now = {"seed": 1, "token_dropout": {"gamma_max": 0.2, "midpoint": 2}, "evaluation": {"limit": 4}, "new_key": 1,
           "total_tokens": 10}
    assert differences(saved, now, ["evaluation"]) == [
        "new_key: checkpoint has <absent>, now 1",
        "seed: checkpoint has 0, now 1",
        "token_dropout.gamma_max: checkpoint has 0.1, now 0.2",
    ]


def test_a_renamed_key_says_what_replaces_it():
    cfg = OmegaConf.load(TINY_TRAINING)
    del cfg.evaluation["every_n_epochs"]
    cfg.evaluation.at_epoch_end = True  # a config written before every_n_epochs
    problems = check_config(cfg, schemas.TRAINING, renamed=schemas.RENAMED)
    assert "missing key: evaluation.every_n_epochs" in problems
    assert ("unknown key: evaluation.at_epoch_end (renamed: use evaluation.every_n_epochs; at_epoch_end: True is "
            "every_n_epochs: 1, False is every_n_epochs: null)") in problems
    with pytest.raises(ConfigError, match=r"evaluation.at_epoch_end \(renamed: use evaluation.every_n_epochs"):
        schemas.check(cfg, schemas.TRAINING, [], "EntroDrop")



def test_the_sandbox_keys_are_checked_and_the_old_workers_key_says_where_it_went():
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.evaluation.lm_eval.sandbox.update({"layer": "docker", "workers": 0, "timeout_s": -1, "memory_mb": 8})
    cfg.evaluation.lm_eval.code_workers = 2
    problems = check_config(cfg, schemas.TRAINING, renamed=schemas.RENAMED)
    assert [p for p in problems if "sandbox" in p or "code_workers" in p] == [
        "evaluation.lm_eval.sandbox.layer=docker must be one of ('auto', 'bubblewrap', 'own')",
        "evaluation.lm_eval.sandbox.workers=0 must be a positive integer",
        "evaluation.lm_eval.sandbox.timeout_s=-1 must be a positive number",
        "evaluation.lm_eval.sandbox.memory_mb=8 must be >= 64",
        "unknown key: evaluation.lm_eval.code_workers (renamed: use evaluation.lm_eval.sandbox.workers, in the "
        "sandbox group beside the other limits (layer, timeout_s, memory_mb))"]

def test_a_checkpoint_saved_with_a_renamed_evaluation_key_resumes():
    now = OmegaConf.load(TINY_TRAINING)
    saved = plain(now)
    del saved["evaluation"]["every_n_epochs"]
    saved["evaluation"]["at_epoch_end"] = True
    assert differences(saved, plain(now), schemas.MAY_CHANGE_ON_RESUME) == []


def test_midpoint_is_a_number_or_auto_and_auto_needs_validation_evaluated_during_training():
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.token_dropout.midpoint = "auto"
    assert training_problems(cfg) == []
    for value, why in [("soon", "must be a number in [0, inf], or auto"), (-1, "must be in [0, inf], or auto")]:
        cfg.token_dropout.midpoint = value
        assert training_problems(cfg) == [f"token_dropout.midpoint={value} {why}"]
    cfg.token_dropout.midpoint = "auto"
    cfg.token_dropout.auto_patience = 0
    cfg.token_dropout.auto_min_improvement = 1.0
    assert training_problems(cfg) == ["token_dropout.auto_patience=0 must be a positive integer",
                                      "token_dropout.auto_min_improvement=1.0 must be in [0, 1)"]
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.token_dropout.midpoint = "auto"
    cfg.evaluation.validation.target_tokens = None
    cfg.evaluation.every_n_steps = cfg.evaluation.every_n_epochs = None
    cfg.token_dropout.schedule = "static"
    problems = training_problems(cfg)
    for line in ("token_dropout.midpoint=auto needs the validation loss, but evaluation.validation.target_tokens=null",
                 "evaluation.every_n_steps and evaluation.every_n_epochs are both null",
                 "token_dropout.midpoint=auto places the sigmoid curriculum, but schedule=static has none"):
        assert any(line in p for p in problems), (line, problems)
    assert len(problems) == 3, problems
    # a number needs none of it, and schedule none (a baseline) may keep midpoint: auto
    cfg.token_dropout.midpoint, cfg.token_dropout.schedule = 2, "static"
    assert training_problems(cfg) == []
    cfg.token_dropout.midpoint, cfg.token_dropout.schedule = "auto", "none"
    cfg.evaluation.every_n_steps = 5
    assert [p for p in training_problems(cfg) if "schedule" in p] == []


def test_with_midpoint_auto_a_resume_must_keep_the_evaluation_that_places_j0():
    numeric = OmegaConf.load(TINY_TRAINING)
    auto = OmegaConf.load(TINY_TRAINING)
    auto.token_dropout.midpoint = "auto"
    saved = plain(auto)
    now = plain(auto)
    now["evaluation"]["every_n_epochs"] = 2
    now["evaluation"]["lm_eval"]["limit"] = 4
    assert differences(saved, now, schemas.may_change_on_resume(auto)) == [
        "evaluation.every_n_epochs: checkpoint has 1, now 2"]
    # With a number the evaluation may change, and a checkpoint saved before the auto keys existed resumes.
    older = plain(numeric)
    del older["token_dropout"]["auto_patience"], older["token_dropout"]["auto_min_improvement"]
    now = plain(numeric)
    now["evaluation"]["every_n_epochs"] = 2
    assert differences(older, now, schemas.may_change_on_resume(numeric)) == []


def test_the_activation_checkpointing_boolean_says_what_replaces_it():
    cfg = OmegaConf.load(TINY_TRAINING)
    del cfg["activation_checkpointing_share"]
    cfg.enable_activation_checkpointing = True  # a config written before the share
    problems = check_config(cfg, schemas.TRAINING, renamed=schemas.RENAMED)
    assert "missing key: activation_checkpointing_share" in problems
    assert ("unknown key: enable_activation_checkpointing (renamed: use activation_checkpointing_share; True is 1.0, "
            "False is 0.0)") in problems
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.activation_checkpointing_share = 2
    assert "activation_checkpointing_share=2 must be in [0, 1]" in check_config(cfg, schemas.TRAINING)


def test_a_checkpoint_saved_with_the_boolean_and_torchtunes_loss_resumes_with_the_fused_loss():
    now = OmegaConf.load(TINY_TRAINING)
    saved = plain(now)
    del saved["activation_checkpointing_share"]
    saved["enable_activation_checkpointing"] = False
    saved["loss"] = {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss", "num_output_chunks": 1}
    assert differences(saved, plain(now), schemas.MAY_CHANGE_ON_RESUME) == []


TINY_EVALUATE = REPO / "configs/tiny/qwen3_evaluate.yaml"


@pytest.mark.parametrize("overrides, expected", [
    (["data.seq_len=4096"], ["data.seq_len=4096 is longer than the model's max_seq_len=2048 "
                             "(entrodrop.models.qwen3.qwen3): set data.seq_len <= 2048"]),
    (["model.max_seq_len=256", "evaluation.lm_eval.max_seq_len=512"],
     ["evaluation.lm_eval.max_seq_len=512 is longer than the model's max_seq_len=256 (entrodrop.models.qwen3.qwen3): "
      "set evaluation.lm_eval.max_seq_len <= 256"]),
    # without lm-eval tasks nothing reads lm_eval.max_seq_len
    (["model.max_seq_len=256", "evaluation.lm_eval.max_seq_len=512", "evaluation.lm_eval.tasks.code=[]"], []),
    (["data.seq_len=2048"], []),
])
def test_a_sequence_longer_than_the_model_takes_is_a_config_problem(overrides, expected):
    """It failed at the first forward pass, after the weights had loaded."""
    cfg = OmegaConf.merge(OmegaConf.load(TINY_TRAINING), OmegaConf.from_dotlist(overrides))
    assert training_problems(cfg) == expected


def test_the_model_length_is_read_from_builders_that_take_no_arguments():
    """qwen3_0_6b() and llama3_1_8b() set max_seq_len inside: read on the meta device, no weight allocated."""
    assert schemas.model_max_seq_len(OmegaConf.create({"_component_": "entrodrop.models.qwen3.qwen3_0_6b"})) == 40960
    assert schemas.model_max_seq_len(OmegaConf.create({"_component_": "torchtune.models.llama3_1.llama3_1_8b"})) == 131072


def test_the_evaluate_lengths_are_checked_too():
    cfg = OmegaConf.load(TINY_EVALUATE)
    cfg.evaluation.validation.target_tokens = "x"
    cfg.evaluation.validation.seq_len = 4096
    assert schemas._evaluate_lengths(cfg) == [
        "evaluation.validation.seq_len=4096 is longer than the model's max_seq_len=2048 (entrodrop.models.qwen3.qwen3): "
        "set evaluation.validation.seq_len <= 2048"]


def test_every_tokenizer_file_and_the_task_directory_are_checked_before_anything_loads(tmp_path):
    """A missing merges file was a raw FileNotFoundError after lm-eval's task index was built."""
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.tokenizer.merges_file = str(tmp_path / "merges.txt")
    cfg.tokenizer.special_tokens_path = str(tmp_path / "tokenizer.json")
    cfg.evaluation.lm_eval.include_path = str(tmp_path / "tasks")
    assert training_problems(cfg) == [
        f"tokenizer.merges_file={tmp_path}/merges.txt does not exist",
        f"tokenizer.special_tokens_path={tmp_path}/tokenizer.json does not exist",
        f"evaluation.lm_eval.include_path={tmp_path}/tasks is not a directory (of lm-eval task YAMLs)"]
    cfg.evaluation.lm_eval.tasks.code = []  # no task: training never builds the tokenizer
    assert training_problems(cfg) == []
    for what, rules in (("tokenize", schemas.TOKENIZE_RULES), ("smoke", schemas.SMOKE_RULES)):
        config = OmegaConf.load(REPO / f"configs/tiny/qwen3_{what}.yaml")
        config.tokenizer.path = str(tmp_path / "vocab.json")
        problems = schemas.check_rules(config, rules, [])
        assert f"tokenizer.path={tmp_path}/vocab.json does not exist" in problems, problems


def test_a_plus_before_a_key_says_it_is_not_needed():
    cfg = OmegaConf.merge(OmegaConf.load(TINY_TRAINING), OmegaConf.from_dotlist(["+seed=3"]))
    assert training_problems(cfg) == [
        "unknown key: +seed (drop the +: an override key=value sets a key whether or not the YAML has it)"]


@pytest.mark.parametrize("config, schema, rules, sections", [
    (TINY_TRAINING, schemas.TRAINING, schemas.TRAINING_RULES, ["token_dropout"]),
    (TINY_TRAINING, schemas.TRAINING, schemas.TRAINING_RULES, ["data"]),
    (TINY_TRAINING, schemas.TRAINING, schemas.TRAINING_RULES, ["token_dropout", "data", "evaluation"]),
    (TINY_EVALUATE, schemas.EVALUATE, schemas.EVALUATE_RULES, ["evaluation"]),
])
def test_a_missing_section_is_listed_once_and_no_rule_reads_it(config, schema, rules, sections):
    """A rule read cfg.token_dropout... of a config without it: omegaconf's ConfigAttributeError."""
    cfg = OmegaConf.load(config)
    for section in sections:
        del cfg[section]
    with pytest.raises(ConfigError) as e:
        schemas.check(cfg, schema, rules, "test")
    lines = str(e.value).splitlines()
    for section in sections:
        assert lines.count(f"  missing key: {section}") == 1, lines
        assert not any(line.startswith(f"  missing key: {section}.") for line in lines), lines


@pytest.mark.parametrize("cfg, says", [
    (OmegaConf.create({}), "the config is empty (it holds no key): give a recipe's config, e.g. one under configs/"),
    (OmegaConf.create(["seed", "output_dir"]), "the config is a list, not a mapping of keys to values (key: value "
                                                "lines, as in the files under configs/)"),
])
def test_a_config_that_is_empty_or_a_list_is_one_problem_not_every_key_missing(cfg, says):
    with pytest.raises(ConfigError) as e:
        schemas.check(cfg, schemas.TRAINING, schemas.TRAINING_RULES, "EntroDrop")
    assert str(e.value) == f"invalid EntroDrop config (1 problem):\n  {says}"


def test_evaluate_checks_the_eval_dir_it_writes_not_the_output_dir_it_reads(tmp_path):
    cfg = OmegaConf.load(TINY_EVALUATE)
    cfg.output_dir = "/proc/sys/entrodrop_run"  # read only: its checkpoints are read, nothing is written there
    cfg.eval_dir = str(tmp_path / "eval")
    assert schemas.check_rules(cfg, schemas.EVALUATE_RULES[:1], []) == []
    cfg.eval_dir = "/proc/sys/entrodrop_eval"
    (problem,) = schemas.check_rules(cfg, schemas.EVALUATE_RULES[:1], [])
    assert problem.startswith("eval_dir=/proc/sys/entrodrop_eval: /proc/sys cannot be written (")
    assert problem.endswith("): choose another eval_dir")


def test_relative_paths_not_found_say_once_that_they_are_read_from_the_working_directory(tmp_path, monkeypatch):
    cfg = OmegaConf.load(TINY_TRAINING)
    cfg.evaluation.lm_eval.tasks = {}
    cfg.output_dir = str(tmp_path / "run")
    monkeypatch.chdir(tmp_path)  # the shipped config's relative paths name nothing here
    with pytest.raises(ConfigError) as error:
        schemas.check(cfg, schemas.TRAINING, schemas.TRAINING_RULES, "EntroDrop")
    lines = str(error.value).splitlines()
    assert lines[1] == ("  data.target_tokens=outputs/tiny_qwen3_tokens/target holds no store (manifest.json missing): "
                        "run recipes/tokenize_corpus.py")
    assert lines[-1] == (f"Relative paths (such as outputs/tiny_qwen3_tokens/target) are read from the working "
                         f"directory, {tmp_path}: run from the folder they are relative to (the repository root for "
                         "the configs under configs/), or give absolute paths")
    assert sum("working directory" in line for line in lines) == 1
    assert lines[0] == f"invalid EntroDrop config ({len(lines) - 2} problems):"
