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
then eager, timed without a warm-up of its own, for "agree"); no transformers rows.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from entrodrop.checkpointing import write_random_checkpoint
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default: 8,32 on CPU; 8,32,128 on CUDA)")
    parser.add_argument("--max-new", type=int, default=None, help="tokens to generate (default: 64 CPU, 128 CUDA)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-check-every", type=int, default=None,
                        help="decode steps between reads of the new tokens (default: the adapter's, 8 on CUDA, 1 on CPU)")
    parser.add_argument("--quick", action="store_true",
                        help="batches 32,128, --repeats 1, the adapter's rows alone (what it names explicitly wins)")
    args = parser.parse_args()
    if args.quick:  # the quick defaults, then the command line again: what it names explicitly wins
        parser.set_defaults(batch_sizes="32,128", repeats=1)
        args = parser.parse_args()
    import transformers
    from lm_eval.api.instance import Instance

    from entrodrop.checkpointing import HFCheckpointer
    from entrodrop.eval.adapter import TorchtuneLM
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.qwen3._model_builders import qwen3_tokenizer

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA GPU here")
    device, dtype = torch.device(args.device), torch.bfloat16 if cuda else torch.float32
    batch_sizes = [int(b) for b in (args.batch_sizes or ("8,32,128" if cuda else "8,32")).split(",")]
    max_new = args.max_new or (128 if cuda else 64)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    from entrodrop.models.tiny import TINY_QWEN3

    ckpt, shape = checkpoint(args.device), QWEN3_0_6B if cuda else TINY_QWEN3
    tok_dir = TINY / "qwen3"
    tokenizer = NoEos(qwen3_tokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"), str(tok_dir / "tokenizer.json")))
    with torch.device(device):
        ours = qwen3(**shape).to(dtype).eval()
    ours.load_state_dict(HFCheckpointer(str(ckpt), "QWEN3", tempfile.mkdtemp()).load_checkpoint()["model"])
    ours.to(device=device, dtype=dtype)
    speak_known_ids(ours.tok_embeddings.weight, tokenizer.num_known)
    theirs = None
    if not args.quick:
        theirs = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype).to(device).eval()
        # tied: the head's rows too
        speak_known_ids(theirs.get_input_embeddings().weight, tokenizer.num_known)
    print(f"device {torch.cuda.get_device_name() if cuda else 'cpu'}, model {ckpt.name} "
          f"({sum(p.numel() for p in ours.parameters()) / 1e6:.1f}M parameters), {dtype}, {max_new} new tokens, "
          f"prompts of 8 to {args.prompt_tokens} tokens, best of {args.repeats}\n")
    print("| what | batch | new tokens | seconds | new tokens/s | agree |")
    print("|---|---|---|---|---|---|", flush=True)

    def row(what: str, b: int, tokens: int, seconds: float, agree=None) -> None:
        print(f"| {what} | {b} | {tokens} | {seconds:.2f} | {tokens / seconds:,.0f} | "
              f"{'-' if agree is None else f'{agree:.0%}'} |", flush=True)

    for b in batch_sizes:
        texts = prompts(tokenizer, b, args.prompt_tokens)
        lm = TorchtuneLM(ours, tokenizer, device, max_seq_len=args.prompt_tokens + max_new + 1, batch_size=b,
                         stop_check_every=args.stop_check_every)
        compiled = TorchtuneLM(ours, tokenizer, device, max_seq_len=args.prompt_tokens + max_new + 1, batch_size=b,
                               compile_decode=True, stop_check_every=args.stop_check_every)

        def adapter(stops, lm=lm):
            return lm.generate_until([Instance("generate_until", {}, (t, {"until": until, "max_gen_toks": max_new}), i)
                                      for i, (t, until) in enumerate(zip(texts, stops))])

        if args.quick:  # compiled first: the figure that matters; eager after it, for "agree", unwarmed
            compiled_seconds, compiled_out = timed(lambda: adapter([[]] * b, compiled), args.repeats, sync)
            seconds, generated = timed(lambda: adapter([[]] * b), args.repeats, sync, warmup=False)
            row("adapter, compiled decode", b, b * max_new, compiled_seconds,
                sum(a == c for a, c in zip(generated, compiled_out)) / b)
            row("adapter", b, b * max_new, seconds)
            continue
        seconds, generated = timed(lambda: adapter([[]] * b), args.repeats, sync)
        # Each row's own stop string, two characters that its text reaches after a quarter of it.
        stops = [[text[len(text) // 4 : len(text) // 4 + 2]] for text in generated]
        stop_seconds, cut = timed(lambda: adapter(stops), args.repeats, sync)
        needed = sum(len(tokenizer.encode(c + stop[0], add_bos=False, add_eos=False)) for c, stop in zip(cut, stops))
        compiled_seconds, compiled_out = timed(lambda: adapter([[]] * b, compiled), args.repeats, sync)

        encoded = [tokenizer.encode(t, add_bos=False, add_eos=False) for t in texts]
        width = max(map(len, encoded))
        pad = tokenizer.pad_id
        input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=device)
        attention = (torch.arange(width, device=device)[None] >= torch.tensor([width - len(e) for e in encoded],
                                                                              device=device)[:, None]).long()

        def hf():
            with torch.no_grad():
                return theirs.generate(input_ids=input_ids, attention_mask=attention, do_sample=False,
                                       max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=pad)

        hf_seconds, hf_out = timed(hf, args.repeats, sync)
        hf_texts = [tokenizer.decode(r[width:].tolist()) for r in hf_out]
        row("adapter", b, b * max_new, seconds, sum(a == h for a, h in zip(generated, hf_texts)) / b)
        row("adapter, stop strings", b, min(needed, b * max_new), stop_seconds)
        row("adapter, compiled decode", b, b * max_new, compiled_seconds,
            sum(a == c for a, c in zip(generated, compiled_out)) / b)
        row("transformers generate", b, b * max_new, hf_seconds)
        if cuda:  # transformers' fast path: a static cache and a compiled forward (a CPU compile takes minutes)
            static = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype).to(device).eval()
            speak_known_ids(static.get_input_embeddings().weight, tokenizer.num_known)
            static.forward = torch.compile(static.forward, mode="reduce-overhead", fullgraph=True)

            def hf_static():
                with torch.no_grad():
                    return static.generate(input_ids=input_ids, attention_mask=attention, do_sample=False,
                                           max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=pad,
                                           cache_implementation="static")

            row("transformers generate, static cache + compile", b, b * max_new,
                timed(hf_static, args.repeats, sync)[0])


if __name__ == "__main__":
    main()
