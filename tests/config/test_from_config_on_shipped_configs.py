"""The ``from_config`` constructors the recipes call build, from every shipped config, what the
recipes built before argument by argument, and refuse nothing they did not refuse."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.method.dropout import AUTO, TokenDropoutPlan

CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))
TRAINING_CONFIGS = [p for p in CONFIGS if "token_dropout" in OmegaConf.load(p)]
LM_EVAL_CONFIGS = [p for p in CONFIGS if "lm_eval" in OmegaConf.load(p).get("evaluation", {})]


def name(path: Path) -> str:
    return path.relative_to(REPO / "configs").as_posix()


@pytest.mark.parametrize("path", TRAINING_CONFIGS, ids=name)
@pytest.mark.parametrize("midpoint", ["as shipped", AUTO])
def test_token_dropout_from_config_is_the_recipes_eight_arguments(path, midpoint):
    td = OmegaConf.load(path).token_dropout
    if midpoint == AUTO:
        td.midpoint = AUTO
    built = TokenDropoutPlan.from_config(td, seed=7)
    # What both training recipes wrote before from_config, with midpoint: auto not fixed yet (None).
    before = TokenDropoutPlan(td.targeting, td.gate_percentile, td.schedule, td.gamma_max, td.sharpness,
                          None if td.midpoint == AUTO else td.midpoint, td.midpoint_unit, 7)
    assert built == before
    assert (built.midpoint is None) == (midpoint == AUTO)


def settings(lm) -> dict:
    """The adapter's attributes but lm-eval's own (its cache hook); a function (the decode step,
    compiled or not) by its name."""
    return {k: (v if not callable(v) else getattr(v, "__qualname__", type(v).__name__))
            for k, v in vars(lm).items() if k not in ("_model", "cache_hook")}


@pytest.mark.parametrize("path", LM_EVAL_CONFIGS, ids=name)
def test_the_adapter_from_config_is_the_recipes_nine_arguments(path):
    from entrodrop.eval.adapter import TorchtuneLM

    ev = OmegaConf.load(path).evaluation.lm_eval
    model, tokenizer, device = torch.nn.Linear(2, 2), SimpleNamespace(eos_id=2, pad_id=0), torch.device("cpu")
    built = TorchtuneLM.from_config(model, tokenizer, device, ev)
    # What the training recipes and recipes/evaluate.py wrote before from_config.
    before = TorchtuneLM(model, tokenizer, device, ev.max_seq_len, ev.batch_size, ev.max_gen_toks, distributed=False,
                         generation_batch_size=ev.generation_batch_size, compile_decode=ev.compile_decode,
                         enable_thinking=ev.enable_thinking)
    assert settings(built) == settings(before)
    assert built._max_seq_len == ev.max_seq_len and built._max_gen_toks == ev.max_gen_toks
    assert built._generation_batch_size == (ev.generation_batch_size or ev.batch_size)
