"""Greedy generation speed: our lm-eval adapter against transformers' `generate`. Prints a table.

    python scripts/bench_generate.py                     # CPU, the tiny Qwen3 (`make assets`), ~1 min
    python scripts/bench_generate.py --device cuda       # Qwen3-0.6B's shape, random weights, bf16

Both sides run the same weights (one Hugging Face checkpoint, loaded by our checkpointer and by
transformers) on the same left-padded prompts: the first lines of the tiny target corpus,
tokenized with the tiny tokenizer. On CUDA the checkpoint is Qwen3-0.6B's published shape
(28 layers, 1024 wide, 16 x 128 heads, 8 KV heads, 151,936 tokens, tied) with random weights,
built locally: nothing comes from the hub.

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
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from entrodrop.models.shapes import QWEN3_0_6B

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"


class NoEos:
    """A tokenizer whose EOS never comes, so every row runs to max_new (as a base model's do)."""

    eos_id = -1

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def checkpoint(device: str) -> Path:
    """The tiny Qwen3 on CPU; Qwen3-0.6B's shape with random weights on CUDA."""
    if device == "cpu":
        return TINY / "qwen3"
    from make_tiny_assets import (  # scripts/ is on sys.path: run as a script
        init_weights,
        write_model,
    )

    from entrodrop.models.qwen3._component_builders import qwen3

    out = Path(tempfile.mkdtemp()) / "qwen3_0_6b_shape"
    model = qwen3(**QWEN3_0_6B)
    init_weights(model, seed=0)
    write_model(out, "QWEN3", QWEN3_0_6B, model, TINY / "tokenizer")
    return out


def prompts(tokenizer, count: int, max_tokens: int) -> list:
    lines = [json.loads(line)["text"] for line in (TINY / "target.jsonl").read_text().splitlines()]
    texts = [t for t in lines if len(tokenizer.encode(t, add_bos=False, add_eos=False)) >= 8]
    out = []
    for k in range(count):  # different lengths: left padding matters
        ids = tokenizer.encode(texts[k % len(texts)], add_bos=False, add_eos=False)
        out.append(tokenizer.decode(ids[: 8 + (k * 7) % (max_tokens - 8)]))
    return out


def timed(fn, repeats: int, sync) -> tuple:
    fn()  # warm-up
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
    parser.add_argument("--max-new", type=int, default=None, help="tokens to generate (default: 64 CPU, 256 CUDA)")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop-check-every", type=int, default=None,
                        help="decode steps between reads of the new tokens (default: the adapter's, 8 on CUDA, 1 on CPU)")
    args = parser.parse_args()
    import transformers
    from lm_eval.api.instance import Instance

    from entrodrop.checkpointing import HFCheckpointer
    from entrodrop.eval.adapter import TorchtuneLM
    from entrodrop.models.qwen3._component_builders import qwen3
    from entrodrop.models.qwen3._model_builders import qwen3_tokenizer

    cuda = args.device == "cuda"
    device, dtype = torch.device(args.device), torch.bfloat16 if cuda else torch.float32
    batch_sizes = [int(b) for b in (args.batch_sizes or ("8,32,128" if cuda else "8,32")).split(",")]
    max_new = args.max_new or (256 if cuda else 64)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    from make_tiny_assets import TINY_QWEN3  # scripts/ is on sys.path: run as a script

    ckpt, shape = checkpoint(args.device), QWEN3_0_6B if cuda else TINY_QWEN3
    tok_dir = TINY / "qwen3"
    tokenizer = NoEos(qwen3_tokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"), str(tok_dir / "tokenizer.json")))
    with torch.device(device):
        ours = qwen3(**shape).to(dtype).eval()
    ours.load_state_dict(HFCheckpointer(str(ckpt), "QWEN3", tempfile.mkdtemp()).load_checkpoint()["model"])
    ours.to(device=device, dtype=dtype)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype).to(device).eval()
    print(f"device {args.device}, model {ckpt.name} ({sum(p.numel() for p in ours.parameters()) / 1e6:.1f}M parameters), "
          f"{dtype}, {max_new} new tokens, prompts of 8 to {args.prompt_tokens} tokens")

    rows = []
    for b in batch_sizes:
        texts = prompts(tokenizer, b, args.prompt_tokens)
        lm = TorchtuneLM(ours, tokenizer, device, max_seq_len=args.prompt_tokens + max_new + 1, batch_size=b,
                         stop_check_every=args.stop_check_every)
        compiled = TorchtuneLM(ours, tokenizer, device, max_seq_len=args.prompt_tokens + max_new + 1, batch_size=b,
                               compile_decode=True, stop_check_every=args.stop_check_every)

        def adapter(stops, lm=lm):
            return lm.generate_until([Instance("generate_until", {}, (t, {"until": until, "max_gen_toks": max_new}), i)
                                      for i, (t, until) in enumerate(zip(texts, stops))])

        seconds, generated = timed(lambda: adapter([[]] * b), args.repeats, sync)
        rows.append(("adapter", b, b * max_new, seconds))
        # Each row's own stop string, two characters that its text reaches after a quarter of it.
        stops = [[text[len(text) // 4 : len(text) // 4 + 2]] for text in generated]
        stop_seconds, cut = timed(lambda: adapter(stops), args.repeats, sync)
        needed = sum(len(tokenizer.encode(c + stop[0], add_bos=False, add_eos=False)) for c, stop in zip(cut, stops))
        rows.append(("adapter, stop strings", b, min(needed, b * max_new), stop_seconds))
        compiled_seconds, compiled_out = timed(lambda: adapter([[]] * b, compiled), args.repeats, sync)
        rows.append(("adapter, compiled decode", b, b * max_new, compiled_seconds,
                     sum(a == c for a, c in zip(generated, compiled_out)) / b))

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
        rows.append(("transformers generate", b, b * max_new, hf_seconds))
        hf_texts = [tokenizer.decode(row[width:].tolist()) for row in hf_out]
        agree = sum(a == h for a, h in zip(generated, hf_texts)) / b
        rows[-4] = rows[-4] + (agree,)
        if cuda:  # transformers' fast path: a static cache and a compiled forward (a CPU compile takes minutes)
            static = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=dtype).to(device).eval()
            static.forward = torch.compile(static.forward, mode="reduce-overhead", fullgraph=True)

            def hf_static():
                with torch.no_grad():
                    return static.generate(input_ids=input_ids, attention_mask=attention, do_sample=False,
                                           max_new_tokens=max_new, min_new_tokens=max_new, pad_token_id=pad,
                                           cache_implementation="static")

            rows.append(("transformers generate, static cache + compile", b, b * max_new,
                         timed(hf_static, args.repeats, sync)[0]))

    print("\n| what | batch | new tokens | seconds | new tokens/s | agree |")
    print("|---|---|---|---|---|---|")
    for what, b, tokens, seconds, *agree in rows:
        print(f"| {what} | {b} | {tokens} | {seconds:.2f} | {tokens / seconds:,.0f} | "
              f"{f'{agree[0]:.0%}' if agree else '-'} |")


if __name__ == "__main__":
    main()
