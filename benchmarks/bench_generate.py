"""Greedy generation speed: our lm-eval adapter against transformers' `generate`. Prints a table.

    python benchmarks/bench_generate.py                     # CPU, the tiny Qwen3 (`make assets`), ~1 min
    python benchmarks/bench_generate.py --device cuda       # Qwen3-0.6B's shape, random weights, bf16
    python benchmarks/bench_generate.py --device cuda --quick   # the adapter alone, batches 32 and 128 (make gpu-check)

Both sides run the same weights (one Hugging Face checkpoint, loaded by our checkpointer and by
transformers) on the same left-padded prompts: the first lines of the tiny target corpus,
tokenized with the tiny tokenizer. On CUDA the checkpoint is Qwen3-0.6B's published shape
(28 layers, 1024 wide, 16 x 128 heads, 8 KV heads, 151,936 tokens, tied) with random weights,
built locally: nothing comes from the hub. The tiny tokenizer knows 2,074 of those ids, and its
``decode`` fails on the rest, so the embedding rows of the others are zero (tied: their logits
are exactly 0, below the largest of the known ids' random logits): the model emits only ids the
tokenizer can decode, at the full vocabulary's cost (the projection and argmax cover every row).

Rows:
    adapter            TorchtuneLM.generate_until, no stop string: every row makes max_new tokens
    adapter, stop      each row with a stop string its text reaches a quarter of the way: the time
                       follows the tokens needed (counted up to and including the stop)
    adapter, compiled  compile_decode=True: the decode step under torch.compile (on CUDA
                       mode="reduce-overhead", CUDA graphs over the static KV cache); its
                       compilation is in the warm-up, not in the time
    transformers       model.generate, dynamic cache, max_new tokens forced (min_new_tokens)
    transformers, static + compile (CUDA only)  cache_implementation="static", forward compiled

"new tokens/s" is rows x tokens generated / seconds, the best of --repeats after a warm-up;
"agree" is the share of rows whose greedy tokens equal transformers' (fp32 on CPU: all of them;
bf16 may differ after a near tie); for the compiled adapter, those equal to the eager adapter's.
Each row is printed as it is measured: a run cut off by a time limit keeps the rows it finished.

``--quick`` (on CUDA under 90 s, the budget of make gpu-check): batches 32 and 128, 128 new
tokens, one timed run, and the adapter's rows alone (compiled first, so its figure comes first;
then eager, timed without a warm-up of its own, for "agree"); no transformers rows. On the CPU,
``--quick`` runs every row at tiny sizes: batch 2, 8 new tokens, prompts of 8 to 16 tokens, once.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from entrodrop.models.checkpointing import write_random_checkpoint
from entrodrop.models.shapes import QWEN3_0_6B

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"


class NoEos:
    """A tokenizer whose EOS never comes, so every row runs to max_new (as a base model's do).
    Ids it does not know decode to nothing, not to an error (none should come: see
    ``speak_known_ids``)."""

    eos_id = -1

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.num_known = known_ids(tokenizer)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def decode(self, ids, **kwargs) -> str:
        return self._tokenizer.decode([i for i in ids if i < self.num_known], **kwargs)


def known_ids(tokenizer) -> int:
    """How many ids, from 0, the (torchtune Qwen2-style) tokenizer decodes: its BPE ids and special tokens."""
    return 1 + max(max(tokenizer.decoder), *tokenizer.special_tokens.values())


def speak_known_ids(embedding: torch.Tensor, num_known: int) -> None:
    """Zero the (tied) embedding rows of the ids from ``num_known`` on: their logits are then 0,
    under the largest of the known ids' (random, centred) logits, so greedy decoding never
    picks them; the output projection and the argmax still span the whole vocabulary."""
    with torch.no_grad():
        embedding[num_known:] = 0


def checkpoint(device: str) -> Path:
    """The tiny Qwen3 on CPU; Qwen3-0.6B's shape with random bf16 weights on CUDA, drawn there."""
    if device == "cpu":
        return TINY / "qwen3"
    out = Path(tempfile.mkdtemp()) / "qwen3_0_6b_shape"
    write_random_checkpoint(out, "QWEN3", QWEN3_0_6B, TINY / "tokenizer", device=device)
    return out


def prompts(tokenizer, count: int, max_tokens: int) -> list:
    lines = [json.loads(line)["text"] for line in (TINY / "target.jsonl").read_text().splitlines()]
    texts = [t for t in lines if len(tokenizer.encode(t, add_bos=False, add_eos=False)) >= 8]
    out = []
    for k in range(count):  # different lengths: left padding matters
        ids = tokenizer.encode(texts[k % len(texts)], add_bos=False, add_eos=False)
        out.append(tokenizer.decode(ids[: 8 + (k * 7) % (max_tokens - 8)]))
    return out


def timed(fn, repeats: int, sync, warmup: bool = True) -> tuple:
    if warmup:
        fn()
    best, result = float("inf"), None
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    args = parse_args()
    cuda = args.device == "cuda"
    device, dtype = torch.device(args.device), torch.bfloat16 if cuda else torch.float32
    batch_sizes = [int(b) for b in (args.batch_sizes or ("8,32,128" if cuda else "8,32")).split(",")]
    max_new = args.max_new or (128 if cuda else 64)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ckpt = checkpoint(args.device)
    tokenizer = tiny_tokenizer()
    ours = our_model(ckpt, device, dtype, tokenizer)
    adapter_alone = args.quick and cuda
    theirs = None if adapter_alone else transformers_model(ckpt, device, dtype, tokenizer)
    print(f"device {torch.cuda.get_device_name() if cuda else 'cpu'}, model {ckpt.name} "
          f"({sum(p.numel() for p in ours.parameters()) / 1e6:.1f}M parameters), {dtype}, {max_new} new tokens, "
          f"prompts of 8 to {args.prompt_tokens} tokens, best of {args.repeats}\n")
    print("| what | batch | new tokens | seconds | new tokens/s | agree |")
    print("|---|---|---|---|---|---|", flush=True)
    for b in batch_sizes:
        texts = prompts(tokenizer, b, args.prompt_tokens)
        eager, compiled = (adapter_generate(ours, tokenizer, device, texts, max_new, args, compile_decode=c)
                           for c in (False, True))
        if adapter_alone:  # compiled first: the figure that matters; eager after it, for "agree", unwarmed
            compiled_seconds, compiled_out = timed(lambda: compiled([[]] * b), args.repeats, sync)
            seconds, generated = timed(lambda: eager([[]] * b), args.repeats, sync, warmup=False)
            row("adapter, compiled decode", b, b * max_new, compiled_seconds, agreement(generated, compiled_out))
            row("adapter", b, b * max_new, seconds)
            continue
        seconds, generated = timed(lambda: eager([[]] * b), args.repeats, sync)
        # Each row's own stop string, two characters that its text reaches after a quarter of it.
        stops = [[text[len(text) // 4 : len(text) // 4 + 2]] for text in generated]
        stop_seconds, cut = timed(lambda: eager(stops), args.repeats, sync)
        needed = sum(len(tokenizer.encode(c + stop[0], add_bos=False, add_eos=False)) for c, stop in zip(cut, stops))
        compiled_seconds, compiled_out = timed(lambda: compiled([[]] * b), args.repeats, sync)
        hf_seconds, hf_ids = timed(transformers_generate(theirs, tokenizer, texts, device, max_new), args.repeats, sync)
        prompt_width = max(len(tokenizer.encode(t, add_bos=False, add_eos=False)) for t in texts)
        row("adapter", b, b * max_new, seconds, agreement(generated, decoded(tokenizer, hf_ids, prompt_width)))
        row("adapter, stop strings", b, min(needed, b * max_new), stop_seconds)
        row("adapter, compiled decode", b, b * max_new, compiled_seconds, agreement(generated, compiled_out))
        row("transformers generate", b, b * max_new, hf_seconds)
        if cuda:  # transformers' fast path: a static cache and a compiled forward (a CPU compile takes minutes)
            static = transformers_model(ckpt, device, dtype, tokenizer)
            static.forward = torch.compile(static.forward, mode="reduce-overhead", fullgraph=True)
            row("transformers generate, static cache + compile", b, b * max_new,
                timed(transformers_generate(static, tokenizer, texts, device, max_new, cache_implementation="static"),
                      args.repeats, sync)[0])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default: 8,32 on CPU; 8,32,128 on CUDA)")
    parser.add_argument("--max-new", type=int, default=None, help="tokens to generate (default: 64 CPU, 128 CUDA)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-check-every", type=int, default=None,
                        help="decode steps between reads of the new tokens (default: the adapter's, 8 on CUDA, 1 on CPU)")
    parser.add_argument("--quick", action="store_true",
                        help="CUDA: batches 32,128, --repeats 1, the adapter's rows alone; CPU: every row at tiny "
                             "sizes (what it names explicitly wins)")
    args = parser.parse_args()
    if args.quick:  # the quick defaults, then the command line again: what it names explicitly wins
        parser.set_defaults(**(dict(batch_sizes="32,128", repeats=1) if args.device == "cuda" else
                               dict(batch_sizes="2", max_new=8, prompt_tokens=16, repeats=1)))
        args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU here")
    return args


def tiny_tokenizer():
    from entrodrop.models.qwen3._model_builders import qwen3_tokenizer

    tok_dir = TINY / "qwen3"
    return NoEos(qwen3_tokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"), str(tok_dir / "tokenizer.json")))


def our_model(ckpt: Path, device: torch.device, dtype: torch.dtype, tokenizer) -> torch.nn.Module:
    """The torchtune model of ``ckpt`` (Qwen3-0.6B's shape on CUDA, the tiny one on CPU), made to
    speak only what the tokenizer decodes."""
    from entrodrop.models.checkpointing import HFCheckpointer
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.tiny import TINY_QWEN3

    with torch.device(device):
        model = qwen3(**(QWEN3_0_6B if device.type == "cuda" else TINY_QWEN3)).to(dtype).eval()
    model.load_state_dict(HFCheckpointer(str(ckpt), "QWEN3", tempfile.mkdtemp()).load_checkpoint()["model"])
    model.to(device=device, dtype=dtype)
    speak_known_ids(model.tok_embeddings.weight, tokenizer.num_known)
    return model


def transformers_model(ckpt: Path, device: torch.device, dtype: torch.dtype, tokenizer) -> torch.nn.Module:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype).to(device).eval()
    speak_known_ids(model.get_input_embeddings().weight, tokenizer.num_known)  # tied: the head's rows too
    return model


def adapter_generate(model, tokenizer, device, texts: list, max_new: int, args, compile_decode: bool):
    """``generate(stops)``: the lm-eval adapter's generate_until over ``texts``, each row with its stops."""
    from lm_eval.api.instance import Instance

    from entrodrop.eval.adapter import TorchtuneLM

    lm = TorchtuneLM(model, tokenizer, device, max_seq_len=args.prompt_tokens + max_new + 1, batch_size=len(texts),
                     compile_decode=compile_decode, stop_check_every=args.stop_check_every)

    def generate(stops: list) -> list:
        return lm.generate_until([Instance("generate_until", {}, (t, {"until": until, "max_gen_toks": max_new}), i)
                                  for i, (t, until) in enumerate(zip(texts, stops))])

    return generate


def transformers_generate(model, tokenizer, texts: list, device, max_new: int, **options):
    """``generate()``: transformers' greedy generate over ``texts``, left-padded (the ids; ``decoded``
    reads them as texts, after the clock)."""
    encoded = [tokenizer.encode(t, add_bos=False, add_eos=False) for t in texts]
    width, pad = max(map(len, encoded)), tokenizer.pad_id
    input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=device)
    attention = (torch.arange(width, device=device)[None] >= torch.tensor([width - len(e) for e in encoded],
                                                                          device=device)[:, None]).long()

    def generate() -> list:
        with torch.no_grad():
            return model.generate(input_ids=input_ids, attention_mask=attention, do_sample=False,
                                  max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=pad, **options)

    return generate


def decoded(tokenizer, ids: torch.Tensor, prompt_width: int) -> list:
    return [tokenizer.decode(r[prompt_width:].tolist()) for r in ids]


def agreement(texts: list, others: list) -> float:
    return sum(a == b for a, b in zip(texts, others)) / len(texts)


def row(what: str, b: int, tokens: int, seconds: float, agree=None) -> None:
    print(f"| {what} | {b} | {tokens} | {seconds:.2f} | {tokens / seconds:,.0f} | "
          f"{'-' if agree is None else f'{agree:.0%}'} |", flush=True)


if __name__ == "__main__":
    main()
