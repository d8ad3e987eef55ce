"""The CUDA paths of the library, each against a reference (``make test-gpu``; skipped without a
GPU): the fused losses in bf16 against the unfused fp32 loss, the EntroDrop mask planned on the
device, flex attention against the dense block-causal mask, compiled decode against eager
decode and transformers' ``generate``, and the packed, compiled bf16 entropy precompute against
fp32."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import cuda_only
from lm_eval.api.instance import Instance
from torch import nn
from torchtune import training

from entrodrop.data.packing import GENERAL, TARGET, block_causal_mask, pack_rows
from entrodrop.eval.adapter import TorchtuneLM
from entrodrop.method.dropout import TokenDropoutPlan, entropy_gate, plan_perturbation
from entrodrop.method.entropy import shard_entropies
from entrodrop.models.checkpointing import HFCheckpointer
from entrodrop.models.head import fp32_logits
from entrodrop.models.loss import LinearCrossEntropy
from entrodrop.models.qwen3._component_builders import qwen3
from entrodrop.models.qwen3._model_builders import qwen3_tokenizer
from entrodrop.models.tiny import TINY_QWEN3

pytestmark = pytest.mark.gpu

VOCAB = 151_936  # Qwen3's: the output projection's cost and rounding are the real ones


@pytest.fixture(autouse=True)
def true_fp32():
    """fp32 references are fp32: no TF32 matmuls, whatever another test or library set."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def peak_bytes(fn):
    """(fn(), the most CUDA memory it held above what was allocated before it)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - base


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.float() - expected.float()).norm() / expected.float().norm())


# ------------------------------------------------------------------------------ the loss

@pytest.mark.parametrize("impl", ["torch", "liger"])
def test_fused_losses_in_bf16_match_the_unfused_fp32_loss_in_less_memory(gpu, impl):
    """4,096 tokens of width 1,024 against Qwen3's vocabulary, logits of std 3 (an LM's spread),
    every 7th label ignored. Reference: the unfused loss in fp32 on the same bf16-rounded
    inputs. The fused losses hold neither the [tokens, vocab] logits nor their gradient, so
    they must also peak below the unfused bf16 loss (logits, their fp32 upcast and gradient)."""
    if impl == "liger":
        cuda_only(gpu, "liger-kernel's triton kernel")
    n, d = (4096, 1024) if gpu.type == "cuda" else (256, 256)
    gen = torch.Generator(device=gpu).manual_seed(0)
    hidden = torch.randn(n, d, generator=gen, device=gpu).bfloat16()
    weight = (torch.randn(VOCAB, d, generator=gen, device=gpu) * 3 / math.sqrt(d)).bfloat16()
    labels = torch.randint(0, VOCAB, (n,), generator=gen, device=gpu)
    labels[::7] = -100

    h32, w32 = hidden.float().requires_grad_(), weight.float().requires_grad_()
    reference = F.cross_entropy(F.linear(h32, w32), labels, ignore_index=-100)
    reference.backward()

    head = nn.Module()  # what LinearCrossEntropy reads of a model: its output projection
    head.output = nn.Linear(d, VOCAB, bias=False, device=gpu, dtype=torch.bfloat16)
    head.output.weight.data.copy_(weight)
    loss_fn = LinearCrossEntropy(chunk_size=1024, impl=impl)
    loss_fn.set_model_output(head)
    h = hidden.clone().requires_grad_()

    def fused():
        loss = loss_fn(h, labels)
        loss.backward()
        return loss

    if gpu.type == "cuda":
        loss, fused_peak = peak_bytes(fused)
    else:
        loss = fused()
    assert loss.dtype == torch.float32
    assert float(loss.detach()) == pytest.approx(float(reference.detach()), rel=1e-3)
    # bf16 gradients: each element carries bf16's 2^-9 relative rounding, and the sums behind
    # it add some; 2e-2 of the reference's norm leaves room for that and none for a wrong term.
    assert relative_error(h.grad, h32.grad) < 2e-2
    assert relative_error(head.output.weight.grad, w32.grad) < 2e-2

    cuda_only(gpu, "peak memory")

    def unfused():
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        loss = F.cross_entropy(F.linear(h, w).float(), labels, ignore_index=-100)
        loss.backward()
        return loss

    _, unfused_peak = peak_bytes(unfused)
    assert fused_peak < unfused_peak, (fused_peak, unfused_peak)


# ------------------------------------------------------------------------------ the mask

def packed_batch(rows: int, seq_len: int, seed: int) -> dict:
    """Loader-like rows: target documents (fp16 entropies in 0-8 nats, so ties, NaN first
    tokens), general documents (no entropy) and padding."""
    rng = np.random.default_rng(seed)
    layout, samples = [], {}
    for _ in range(rows):
        row, free = [], seq_len - int(rng.integers(0, 40))
        while free > 8:
            n = int(min(rng.integers(8, 300), free))
            domain = TARGET if rng.random() < 0.6 else GENERAL
            entropy = rng.uniform(0, 8, n).astype(np.float16).astype(np.float32)
            entropy[0] = np.nan
            samples[len(samples)] = (rng.integers(0, 1000, n), entropy if domain == TARGET else None)
            row.append((domain, len(samples) - 1))
            free -= n
        layout.append(row)
    return {**pack_rows(layout, seq_len, lambda _, i: samples[i]), "target_epoch": 1.0}


def test_the_entrodrop_mask_on_the_device_gates_exactly_and_drops_gamma_of_the_gated(gpu):
    """Planned on the device, as the recipes plan it: the gate equals the CPU's and takes exactly
    floor(k n) tokens of each target document; over many steps the dropped share of the gated
    tokens is E[gamma_j] = gamma_max / 2, and each step's is its own gamma_j, within sampling
    error; general tokens and padding are never dropped; one seed gives the same masks twice."""
    batch = packed_batch(rows=8, seq_len=1024, seed=0)
    target = batch["domain"] == TARGET
    for k, targeting in [(0.5, "low"), (0.29, "low"), (0.5, "high")]:
        gate = entropy_gate(batch["entropy"].to(gpu), batch["document_ids"].to(gpu), k, targeting)
        assert torch.equal(gate.cpu(), entropy_gate(batch["entropy"], batch["document_ids"], k, targeting))
        for r in range(8):
            for doc in batch["document_ids"][r][target[r]].unique().tolist():
                tokens = (batch["document_ids"][r] == doc) & target[r]
                n = int((tokens & ~batch["entropy"][r].isnan()).sum())
                assert int(gate[r][tokens.to(gpu)].sum()) == math.floor(k * n + 1e-6), (k, r, doc)

    method = TokenDropoutPlan("low", 0.5, "static", gamma_max=0.2, sharpness=1.0, midpoint=0.0, midpoint_unit="steps",
                          seed=3)
    gate = entropy_gate(batch["entropy"], batch["document_ids"], 0.5, "low").to(gpu)
    gated, steps, dropped = int(gate.sum()), 400, 0
    for step in range(steps):
        drop, _, stats, counts = plan_perturbation(method, 0.0, batch, step, range(8), 64, gpu)
        assert drop.device.type == gpu.type and counts.device.type == gpu.type
        assert not (drop & ~gate).any() and not drop[~target.to(gpu)].any()
        assert counts.tolist() == [int(drop.sum()), int(target.sum())]
        g, n = stats["gamma"], int(drop.sum())
        assert abs(n - g * gated) < 5 * math.sqrt(gated * g * (1 - g)) + 1, (step, n, g)
        dropped += n
    # E[gamma_j] = 0.1; the spread of the total is mostly gamma_j's: Var U(0, 0.2) = 0.2^2 / 12 a step.
    expected, variance = 0.1 * gated * steps, steps * (gated * 0.2) ** 2 / 12 + 0.1 * gated * steps
    assert abs(dropped - expected) < 4 * math.sqrt(variance), (dropped, expected)
    again = [plan_perturbation(method, 0.0, batch, step, range(8), 64, gpu)[0] for step in (5, 5, 6)]
    assert torch.equal(again[0], again[1]) and not torch.equal(again[0], again[2])


# ------------------------------------------------------------------------------ models

@pytest.fixture(scope="module")
def tiny(tiny_assets, make_tiny_assets, tmp_path_factory):
    """The tiny Qwen3 (fp32, CPU) with its embedding sharpened as the CPU adapter tests do, so
    greedy choices are not near ties, and its tokenizer."""
    model = qwen3(**TINY_QWEN3).eval()
    model.load_state_dict(HFCheckpointer(str(tiny_assets / "qwen3"), "QWEN3",
                                         str(tmp_path_factory.mktemp("x"))).load_checkpoint()["model"])
    with torch.no_grad():
        model.tok_embeddings.weight.mul_(20)
    d = tiny_assets / "qwen3"
    return model, qwen3_tokenizer(str(d / "vocab.json"), str(d / "merges.txt"), str(d / "tokenizer.json"))


def copy_to(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` on ``device`` with ``dtype`` parameters (buffers keep theirs)."""
    model = copy.deepcopy(model).to(device)
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def assert_same_logits(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """fp32: element by element to 1e-4. bf16: the whole tensor's relative error (its norm) below
    5e-3. A bf16 activation that rounds the other way in one kernel moves logits of any size by
    up to ~0.06 (measured on the CPU: 0.0625 between a document packed and alone), so a bound
    per element fails or passes with the kernels a run happens to get (the earlier atol = rtol =
    3e-2 failed once beside the recipe tests, on an H100). Norm-wise, bf16 rounding gives at
    most 5e-4 (CPU), while a wrong mask (a document that sees the one before it) gives 2.3e-2
    or more, so 5e-3 passes the first with room and catches the second."""
    if dtype == torch.float32:
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    else:
        assert relative_error(got, expected) < 5e-3, relative_error(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_flex_attention_and_the_dense_mask_give_the_same_logits_on_packed_rows(gpu, tiny, dtype):
    """Four packed rows of 512 tokens (documents of 20-300 tokens, then padding): each document's
    logits under the dense bool mask (ids on the CPU) are those it has alone, and under
    torchtune's flex-attention ``BlockMask`` (what ``block_causal_mask`` gives for ids on a GPU)
    they are the dense mask's (``assert_same_logits``: bf16 compares norms); and a mask that lets
    each document see the one before it fails that comparison."""
    model = copy_to(tiny[0], gpu, dtype)
    rng = np.random.default_rng(1)
    layout, samples = [], []
    for _ in range(4):
        row, free = [], 512 - int(rng.integers(1, 60))
        while free > 20:
            samples.append(rng.integers(0, 2000, int(min(rng.integers(20, 300), free))))
            row.append((TARGET, len(samples) - 1))
            free -= len(samples[-1])
        layout.append(row)
    batch = pack_rows(layout, 512, lambda _, i: (samples[i], None))
    ids, tokens, pos = (batch[k].to(gpu) for k in ("document_ids", "tokens", "input_pos"))
    real = batch["document_ids"] >= 0
    dense_mask = block_causal_mask(batch["document_ids"]).to(gpu)
    assert dense_mask.dtype == torch.bool
    with torch.no_grad():
        dense = model(tokens, mask=dense_mask, input_pos=pos).float()
        for r in range(4):
            start = 0
            for _, i in layout[r]:
                alone = model(torch.as_tensor(samples[i], device=gpu).unsqueeze(0)).float()[0]
                assert_same_logits(dense[r, start : start + len(samples[i])], alone, dtype)
                start += len(samples[i])
        causal = model(tokens, input_pos=pos).float()  # one causal mask over the row: the wrong mask
        first, second = (len(samples[i]) for _, i in layout[0][:2])
        with pytest.raises(AssertionError):  # row 0's second document
            assert_same_logits(causal[0, first : first + second], dense[0, first : first + second], dtype)
        cuda_only(gpu, "flex attention")
        from torch.nn.attention.flex_attention import BlockMask

        flex_mask = block_causal_mask(ids)
        assert isinstance(flex_mask, BlockMask)
        flex = model(tokens, mask=flex_mask, input_pos=pos).float()
    assert_same_logits(flex[real.to(gpu)], dense[real.to(gpu)], dtype)


@pytest.mark.parametrize("stop_check_every", [1, 8])
def test_compiled_decode_gives_eager_decodes_and_transformers_greedy_tokens(gpu, tiny, tiny_assets, stop_check_every,
                                                                              caplog):
    """Six prompts of different lengths in batches of four (left padding, a filler row), 24 new
    tokens, one with a stop string: the adapter's compiled decode (CUDA graphs over the kept KV
    caches) gives the eager decode's texts, and both give what transformers' greedy
    ``generate`` gives each prompt alone (fp32: no near-tie can flip a token). The compiled
    adapter also gives them in a second call (KV caches set up again: new buffers under the
    recorded graphs) and at another batch size (3 rows: a new shape, recompiled and recorded
    again), and never falls back to eager (no warning), so the tokens are the compiled step's.

    Only CUDA can fail this way: on an H100 the compiled step once raised "accessing tensor
    output of CUDAGraphs that has been overwritten by a subsequent run" (its output, fed back
    as the next input, was overwritten by the next replay). The CPU compiles without CUDA
    graphs, so GPU_TESTS_ON_CPU=1 and tests/eval/test_adapter.py cannot see that failure."""
    transformers = pytest.importorskip("transformers")
    model, tokenizer = tiny
    reference = transformers.AutoModelForCausalLM.from_pretrained(tiny_assets / "qwen3", torch_dtype=torch.float32)
    with torch.no_grad():
        reference.get_input_embeddings().weight.mul_(20)  # tied: the output projection too, as in ``tiny``
    reference = reference.to(gpu).eval()
    prompts = ["def main():", "import", "x = [1, 2", "class Parser:\n    def __init__(self", "#", "for i in range("]
    expected = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt, add_bos=False, add_eos=False)], device=gpu)
        out = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                 eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)[0, ids.shape[1]:].tolist()
        expected.append(tokenizer.decode(out[: out.index(tokenizer.eos_id)] if tokenizer.eos_id in out else out))
    stop = expected[1][2:4]  # cuts prompt 1's text early
    assert stop and expected[1].split(stop)[0] != expected[1]
    expected[1] = expected[1].split(stop)[0]
    requests = [Instance("generate_until", {}, (p, {"until": [stop] if i == 1 else [], "max_gen_toks": 24}), i)
                for i, p in enumerate(prompts)]
    caplog.set_level("INFO")
    on_gpu = copy_to(model, gpu, torch.float32)

    def adapter(compiled: bool, batch_size: int = 4) -> TorchtuneLM:
        return TorchtuneLM(on_gpu, tokenizer, gpu, max_seq_len=128, batch_size=batch_size, compile_decode=compiled,
                           stop_check_every=stop_check_every)

    assert adapter(False).generate_until(requests) == expected
    compiled = adapter(True)
    assert compiled.generate_until(requests) == expected
    assert compiled.generate_until(requests[::-1]) == expected[::-1]
    assert adapter(True, batch_size=3).generate_until(requests) == expected
    assert "compiled decode failed" not in caplog.text


# ------------------------------------------------------------------------------ precompute

def test_fp32_logits_are_the_fp32_product_of_bf16_operands(gpu):
    """The precompute's projection: accumulated and returned in fp32, not rounded to bf16 (which
    moves logits of 20 by up to 0.06)."""
    gen = torch.Generator(device=gpu).manual_seed(0)
    h = torch.randn(64, 1024, generator=gen, device=gpu).bfloat16()
    w = (torch.randn(4096, 1024, generator=gen, device=gpu) * 0.15).bfloat16()
    exact = h.double() @ w.double().T
    got = fp32_logits(h, w)
    assert got.dtype == torch.float32
    assert (got.double() - exact).abs().max() < 1e-4 * exact.abs().max()
    rounded = (h @ w.T).float()
    assert (rounded.double() - exact).abs().max() > 10 * (got.double() - exact).abs().max()


def lm_like_qwen3(device: torch.device) -> nn.Module:
    """A 2-layer Qwen3 of width 256 with Qwen3's vocabulary whose entropies spread as an LM's
    do, from 0 to several nats (a random model's are all near log(vocab) = 11.9): the tied
    embedding's rows get norms from 1.7 to 2.3, so that each token's copy of itself through
    the residual stream is predicted more or less sharply against the layers' noise. (Found
    by trying: with norms of 1 every entropy is above 11, with 2 to 16 nearly all are 0.)"""
    torch.manual_seed(0)
    model = qwen3(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=256, intermediate_dim=768,
                  max_seq_len=2048, head_dim=64, norm_eps=1e-6, rope_base=1_000_000.0, tie_word_embeddings=True)
    with torch.no_grad():
        weight = model.tok_embeddings.weight
        weight.normal_(0, 1 / math.sqrt(256)).mul_(torch.empty(VOCAB, 1).uniform_(1.7, 2.3))
    return model.eval().to(device)


def test_packed_compiled_bf16_entropies_are_within_1e_2_nats_of_fp32(gpu):
    """What the real precompute configs run: bf16, samples packed whole into rows (flex
    attention's block mask on a GPU), the layers compiled, Qwen3's vocabulary. Reference: the
    same bf16-rounded weights in fp32, batched by length, eager. On average within 1e-2 nats,
    and 99% of tokens within 0.06. Measured on the CPU (GPU_TESTS_ON_CPU=1, 12 samples): mean
    0.006 nats, 99th percentile 0.046, largest 0.081; with the logits rounded to bf16 before
    the upcast, as before ``fp32_logits``, 0.014, 0.088 and 0.139. What is left comes from bf16
    activations in the layers, not from the projection."""
    rng = np.random.default_rng(0)
    count = 48 if gpu.type == "cuda" else 12
    samples = [rng.integers(0, VOCAB, int(n)).tolist() for n in rng.integers(16, 400, count)]
    fp32 = lm_like_qwen3(gpu)
    bf16 = copy_to(fp32, gpu, torch.bfloat16)
    for low, high in zip(bf16.parameters(), fp32.parameters()):
        high.data = low.data.float()  # one set of weights, rounded to bf16 as a checkpoint stores them
    reference = torch.cat([h[1:] for h in shard_entropies(fp32, samples, 8, 1024, 32768, pack_len=None)])
    middle = (reference > 0.5) & (reference < 4)
    assert middle.float().mean() > 0.25 and (reference < 0.1).float().mean() > 0.1, "not LM-like entropies"
    training.compile_model(bf16, verbose=False)
    for _ in range(2):  # the second pass runs what the first compiled
        got = torch.cat([h[1:] for h in shard_entropies(bf16, samples, 4, 1024, 32768, pack_len=512)])
        error = (got - reference).abs()
        assert error.mean() < 1e-2 and error.quantile(0.99) < 0.06, (float(error.mean()), float(error.quantile(0.99)))
