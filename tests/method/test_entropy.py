"""Token entropy: equal to a full-softmax computation and to transformers' logits, and
independent of chunk size, batch size, padding and packing, in fp32 and in bf16; the
precompute recipe's packed layout and its pack_len check."""

import copy
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO
from omegaconf import DictConfig, OmegaConf
from torchtune.models.llama3_1 import llama3_1

from entrodrop.config import schemas
from entrodrop.config.check import check_config
from entrodrop.data.corpus import tokenize_corpus
from entrodrop.data.sample_store import SampleStore, SampleStoreWriter
from entrodrop.errors import ConfigError
from entrodrop.method import entropy
from entrodrop.method.entropy import (
    entropy_from_hidden,
    sample_entropies,
    shard_entropies,
)
from entrodrop.models.checkpointing import HFCheckpointer
from entrodrop.models.head import output_weight
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.models.tiny import TINY_LLAMA3_1, TINY_QWEN3

TINY_CONFIG = REPO / "configs/tiny/qwen3_precompute_entropy.yaml"


def full_softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.double(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def test_matches_full_softmax_on_peaked_and_flat_rows_whatever_the_chunks():
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(6, 16, generator=gen) * torch.tensor([0.001, 0.1, 1, 3, 10, 40]).unsqueeze(1)
    weight = torch.randn(1000, 16, generator=gen)
    expected = full_softmax_entropy(hidden @ weight.T)
    assert expected[0] == pytest.approx(math.log(1000), abs=1e-2) and expected[-1] < 0.5
    # Chunks that divide the sizes and chunks that leave a remainder; one vocab block or many,
    # the largest logit early or late in the vocabulary.
    for chunk, vocab_chunk in [(1, 1000), (4, 7), (6, 256), (64, 333), (5, 1)]:
        got = entropy_from_hidden(hidden, weight, chunk, vocab_chunk)
        torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=0)
    flipped = entropy_from_hidden(hidden, weight.flip(0), 4, 100)
    torch.testing.assert_close(flipped.double(), expected, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def tiny(tiny_assets, make_tiny_assets, tmp_path_factory):
    d = tiny_assets / "qwen3"
    tokenizer = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))
    samples = tokenize_corpus(tokenizer, str(tiny_assets / "target.jsonl"), "text", max_seq_len=96)[:12]
    models = {}
    for name, build, args, model_type in [
        ("qwen3", qwen3, TINY_QWEN3, "QWEN3"),
        ("llama3_1", llama3_1, TINY_LLAMA3_1, "LLAMA3"),
    ]:
        model = build(**args).eval()
        out = tmp_path_factory.mktemp(name)
        model.load_state_dict(HFCheckpointer(str(tiny_assets / name), model_type, str(out)).load_checkpoint()["model"])
        models[name] = model
    return [torch.tensor(s) for s in samples], models


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])  # tied and untied output projection
def test_sample_entropies_match_the_models_own_logits(tiny, name):
    samples, models = tiny
    model = models[name]
    got = sample_entropies(model, samples, chunk_size=7, vocab_chunk_size=500)
    assert len({len(s) for s in samples}) > 1, "samples of one length would not exercise padding"
    for ids, h in zip(samples, got):
        assert h.shape == ids.shape and torch.isnan(h[0]) and not torch.isnan(h[1:]).any()
        with torch.no_grad():
            expected = full_softmax_entropy(model(ids.unsqueeze(0))[0, :-1])
        torch.testing.assert_close(h[1:].double(), expected, atol=1e-4, rtol=0)


def test_sample_entropies_match_transformers(tiny, tiny_assets):
    transformers = pytest.importorskip("transformers")
    samples, models = tiny
    reference = transformers.Qwen3ForCausalLM.from_pretrained(tiny_assets / "qwen3").eval()
    got = sample_entropies(models["qwen3"], samples, chunk_size=64, vocab_chunk_size=2048)
    for ids, h in zip(samples, got):
        with torch.no_grad():
            expected = full_softmax_entropy(reference(ids.unsqueeze(0)).logits[0, :-1])
        torch.testing.assert_close(h[1:].double(), expected, atol=1e-4, rtol=0)


def test_batch_size_and_chunk_size_do_not_change_the_result(tiny):
    samples, models = tiny
    model = models["qwen3"]
    one_batch = sample_entropies(model, samples, chunk_size=1000, vocab_chunk_size=10_000)
    one_by_one = [sample_entropies(model, [s], chunk_size=7, vocab_chunk_size=700)[0] for s in samples]
    for a, b in zip(one_batch, one_by_one):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0, equal_nan=True)


def test_output_weight_is_the_embedding_when_tied(tiny):
    _, models = tiny
    assert output_weight(models["qwen3"]) is models["qwen3"].tok_embeddings.weight
    assert output_weight(models["llama3_1"]) is models["llama3_1"].output.weight


def test_a_sample_of_one_token_has_only_nan(tiny):
    _, models = tiny
    (h,) = sample_entropies(models["qwen3"], [torch.tensor([5])], chunk_size=4, vocab_chunk_size=64)
    assert h.shape == (1,) and torch.isnan(h).all()


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])
def test_packed_and_unpacked_entropies_agree(tiny, name):
    """fp32 on CPU: the packed layout (block-causal mask, per-document positions) gives each
    sample the entropies it has batched by length, within 1e-4 nats, and the same NaNs."""
    samples, models = tiny
    model = models[name]
    samples = [s.tolist() for s in samples] + [[], [7], samples[0][:2].tolist()]  # lists, as a shard gives
    pack_len = max(len(s) for s in samples)  # one sample exactly fills a row
    assert len({len(s) for s in samples}) > 3 and sum(map(len, samples)) > 3 * pack_len
    by_length = shard_entropies(model, samples, 4, 7, 500, pack_len=None)
    # 3 rows a batch: rows from several batches, the last one filled with empty rows.
    packed = shard_entropies(model, samples, 3, 7, 500, pack_len=pack_len)
    assert [len(h) for h in packed] == [len(h) for h in by_length] == [len(s) for s in samples]
    assert packed[-3].shape == (0,) and torch.isnan(packed[-2]).all()
    for a, b in zip(packed, by_length):
        if len(a):
            assert torch.isnan(a[0]) and not torch.isnan(a[1:]).any()
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0, equal_nan=True)


def test_packed_rows_may_be_longer_than_the_models_rotary_cache(tiny, make_tiny_assets):
    samples, models = tiny
    pack_len = TINY_QWEN3["max_seq_len"] + 100  # padding positions restart at 0
    samples = [s.tolist() for s in samples[:3]]
    by_length = shard_entropies(models["qwen3"], samples, 3, 64, 2048, pack_len=None)
    packed = shard_entropies(models["qwen3"], samples, 2, 64, 2048, pack_len=pack_len)
    for a, b in zip(packed, by_length):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0, equal_nan=True)


def test_packed_shard_refuses_a_sample_longer_than_the_rows(tiny):
    samples, models = tiny
    longest = max(len(s) for s in samples)
    with pytest.raises(ValueError, match=f"has {longest} tokens, more than the pack length {longest - 1}"):
        shard_entropies(models["qwen3"], [s.tolist() for s in samples], 2, 64, 2048, pack_len=longest - 1)


def bf16_model_and_its_fp32_reference(model):
    """The model with bf16 parameters (buffers such as the rotary cache keep their dtype, as
    when the recipe builds it under bf16), and in fp32 with the same bf16-rounded weights: a
    real checkpoint is stored in bf16, so the reference differs only in the compute's precision."""
    bf16, fp32 = copy.deepcopy(model), copy.deepcopy(model)
    for low, high in zip(bf16.parameters(), fp32.parameters()):
        low.data = low.data.to(torch.bfloat16)
        high.data = low.data.float()
    return bf16, fp32


@pytest.mark.parametrize("name", ["qwen3", "llama3_1"])
def test_bf16_packed_entropies_are_within_1e_2_nats_of_fp32(tiny, name):
    """The bar the cache's bf16 entropies are held to, on the tiny models as built. Their predictions are close to
    uniform (about log 2112 nats), where bf16 costs little."""
    samples, models = tiny
    bf16, fp32 = bf16_model_and_its_fp32_reference(models[name])
    samples = [s.tolist() for s in samples]
    reference = shard_entropies(fp32, samples, 4, 64, 2048, pack_len=None)
    packed = shard_entropies(bf16, samples, 3, 64, 2048, pack_len=max(map(len, samples)))
    for a, b in zip(packed, reference):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=1e-2, rtol=0, equal_nan=True)


def test_packing_adds_no_bf16_error_where_predictions_are_as_peaked_as_an_lms(tiny):
    """With the untied output projection scaled 30x, the tiny Llama's logits spread as an LM's
    do (std about 5) and its entropies span 0-4 nats. bf16 then costs 0.0085 nats a token on
    average against fp32, 0.056 at most (measured), batched by length or packed alike: the
    layout must add nothing to that. With the logits rounded to bf16 before the upcast (before
    ``entropy.fp32_logits``) it was 0.016 and 0.076; what is left is the layers' bf16."""
    samples, models = tiny
    model = copy.deepcopy(models["llama3_1"])
    with torch.no_grad():
        model.output.weight.mul_(30)
    bf16, fp32 = bf16_model_and_its_fp32_reference(model)
    samples = [s.tolist() for s in samples]
    reference = torch.cat([h[1:] for h in shard_entropies(fp32, samples, 4, 64, 2048, pack_len=None)])
    assert reference.min() < 0.5 and reference.max() > 3  # peaked and flat predictions both
    by_length = shard_entropies(bf16, samples, 4, 64, 2048, pack_len=None)
    packed = shard_entropies(bf16, samples, 3, 64, 2048, pack_len=max(map(len, samples)))
    for a, b in zip(packed, by_length):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0, equal_nan=True)
    assert (torch.cat([h[1:] for h in packed]) - reference).abs().mean() < 1e-2


@pytest.mark.gpu
def test_compiled_packed_entropies_on_a_gpu_equal_the_cpus_by_length(tiny, gpu):
    """What ``compile: True`` runs: the layers compiled as the recipe compiles them, rows of one
    shape, flex attention's block mask. fp32 on both devices."""
    from torchtune import training

    samples, models = tiny
    samples = [s.tolist() for s in samples]
    model = copy.deepcopy(models["qwen3"]).to(gpu)
    training.compile_model(model, verbose=False)
    by_length = shard_entropies(models["qwen3"], samples, 4, 64, 2048, pack_len=None)
    for _ in range(2):  # the second pass runs the compiled layers as compiled by the first
        packed = shard_entropies(model, samples, 3, 64, 2048, pack_len=128)
        for a, b in zip(packed, by_length):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=0, equal_nan=True)


def precompute_config(target_tokens: str, cache_dir: Path, **overrides) -> DictConfig:
    """The tiny precompute config on a token store, with absolute paths (tests run from anywhere)."""
    cfg = OmegaConf.load(TINY_CONFIG)
    cfg.merge_with({"target_tokens": target_tokens, "cache_dir": str(cache_dir),
                    "checkpointer": {"checkpoint_dir": str(REPO / "assets/tiny/qwen3")}, **overrides})
    return cfg


def target_store(data) -> str:
    """The tiny target token store of the ``data`` fixture."""
    [path] = [arg.split("=", 1)[1] for arg in data if arg.startswith("data.target_tokens=")]
    return path


def run_precompute(cfg: DictConfig) -> None:
    """recipes/precompute_entropy.py in this process, so a test can watch what it computes."""
    from recipes.precompute_entropy import PrecomputeEntropyRecipe

    recipe = PrecomputeEntropyRecipe(cfg)
    try:
        recipe.setup(cfg)
        recipe.run()
    finally:
        recipe.release()
    recipe.cleanup()


def test_the_recipe_packed_writes_the_cache_it_writes_by_length(data, tune_run, tmp_path, monkeypatch, caplog):
    """fp32: the recipe with pack_len computes, shard by shard, the entropies it computes by
    length, within 1e-4 nats before the fp16 cache rounds them; the cache has the same key
    and table, and verify_entropy_cache accepts it."""
    target = target_store(data)
    computed = {}  # (cache, shard) -> the fp32 entropies handed to the writer
    write_shard = SampleStoreWriter.write_shard

    def keep(writer, shard, values, table):
        computed[writer.dir.name, shard] = [v.copy() for v in values]
        write_shard(writer, shard, values, table)

    monkeypatch.setattr(SampleStoreWriter, "write_shard", keep)
    batches = []  # (rows, pack_len) of each packed batch the recipe runs
    packed_sample_entropies = entropy.packed_sample_entropies

    def count(model, rows, pack_len, *args):
        batches.append((len(rows), pack_len))
        return packed_sample_entropies(model, rows, pack_len, *args)

    monkeypatch.setattr(entropy, "packed_sample_entropies", count)
    pack_len = SampleStore(target, "tokens").key["max_seq_len"]
    # 3 rows a batch: shards of several batches, the last one filled with empty rows.
    run_precompute(precompute_config(target, tmp_path / "packed", pack_len=pack_len, batch_size=3))
    assert f"3 rows of {pack_len} tokens a batch, samples packed whole" in caplog.text
    assert len(batches) > 1 and set(batches) == {(3, pack_len)}
    packed_batches = len(batches)
    run_precompute(precompute_config(target, tmp_path / "by_length", pack_len=None))
    assert len(batches) == packed_batches
    shards = sorted(shard for cache, shard in computed if cache == "packed")
    assert len(shards) > 1 and sorted(shard for cache, shard in computed if cache == "by_length") == shards
    for shard in shards:
        for a, b in zip(computed["packed", shard], computed["by_length", shard]):
            assert a.dtype == np.float32 and a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)  # NaN where the other has NaN
    packed, by_length = (SampleStore(str(tmp_path / name), "entropy") for name in ("packed", "by_length"))
    assert packed.key == by_length.key and (packed.table == by_length.table).all()

    result = tune_run("recipes/verify_entropy_cache.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
                      f"target_tokens={target}", f"cache_dir={tmp_path / 'packed'}", f"pack_len={pack_len}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"entropy cache {tmp_path / 'packed'} matches" in result.stderr


@pytest.mark.parametrize("pack_len, message", [
    (0, "pack_len=0 must be a positive integer"),
    (255, "pack_len=255 is shorter than the samples of target_tokens={target}, cut to max_seq_len=256: packed "
          "rows hold whole samples, so set pack_len >= 256, or pack_len=null to batch samples by length"),
])
def test_a_pack_len_that_cannot_hold_every_sample_is_a_config_error_and_writes_nothing(data, tmp_path, pack_len,
                                                                                        message):
    target = target_store(data)
    assert SampleStore(target, "tokens").key["max_seq_len"] == 256
    cfg = precompute_config(target, tmp_path / "cache", pack_len=pack_len)
    with pytest.raises(ConfigError, match="invalid precompute config \\(1 problem\\)") as error:
        run_precompute(cfg)
    assert message.format(target=target) in str(error.value)
    assert not (tmp_path / "cache").exists()


PRECOMPUTE_CONFIGS = sorted((REPO / "configs").glob("*/*precompute_entropy.yaml"))


@pytest.mark.parametrize("path", PRECOMPUTE_CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_every_precompute_config_has_every_key_and_rows_that_hold_its_samples(path):
    """Every key the recipe reads; and pack_len, where set, at least the max_seq_len of the
    tokenize config its header runs first (the store is not there in a fresh checkout)."""
    cfg = OmegaConf.load(path)
    problems = check_config(cfg, schemas.PRECOMPUTE, renamed=schemas.RENAMED)
    problems += schemas.check_rules(cfg, schemas.PRECOMPUTE_RULES, problems)
    assert [p for p in problems if "holds no store" not in p and "holds no Hugging Face checkpoint" not in p] == []
    if cfg.pack_len is not None:
        header = [line for line in path.read_text().splitlines() if line.startswith("#   tune run recipes/tokenize")]
        tokenize = OmegaConf.load(REPO / header[0].split("--config ")[1].split()[0])
        assert cfg.pack_len >= tokenize.max_seq_len, path
    assert not cfg.compile or cfg.pack_len is not None, f"{path}: compile with pack_len null recompiles per length"


def test_a_second_precompute_into_a_cache_dir_another_live_one_writes_is_refused_before_it_reads(data, tmp_path):
    # Two precomputes into one cache_dir would write the same shards; the token stores were locked, the caches not.
    from entrodrop.errors import OutputDirError
    from entrodrop.storage.files import LOCK_NAME

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; from entrodrop.storage.files "
                               "import take_dir_lock; lock = take_dir_lock(Path(sys.argv[1]), 'cache_dir'); "
                               "print('held', flush=True); time.sleep(120)", str(tmp_path / "cache")],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(OutputDirError, match=rf"^cache_dir={tmp_path}/cache is in use by another run: PID "
                                                 rf"{holder.pid} on host "):
            run_precompute(precompute_config(target_store(data), tmp_path / "cache"))
        assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [LOCK_NAME]
    finally:
        holder.kill()
        holder.communicate()
    run_precompute(precompute_config(target_store(data), tmp_path / "cache"))  # it ended: the lock is taken over
    assert not (tmp_path / "cache" / LOCK_NAME).exists()  # and let go once the cache is whole
