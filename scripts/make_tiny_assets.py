"""Build the tiny offline assets the tests and the demo load, since nothing can come from a hub.

    python scripts/make_tiny_assets.py --out assets/tiny

writes

    tokenizer/   a byte-level BPE in Qwen's format (vocab.json + merges.txt, and tokenizer.json
                 for the Hugging Face side), trained on real text that ships with Python:
                 the standard library's source and the prose of its pydoc topics
    qwen3/, llama3_1/  for each model family (entrodrop/models/families.py), its tiny model
                 (tiny_shape, random weights) as a Hugging Face checkpoint in its tiny_dir:
                 config.json, model.safetensors, tokenizer files
    qwen3_demo/  a Qwen3 of 4 layers, width 256, 3.7M parameters, random weights: the CPU
                 benchmarks' model (bench_recipe.py, bench_loader.py), larger than configs/demo's
    sample.txt   a slice of real text for smoke runs
    target.jsonl a small target-domain corpus (code: top-level blocks of stdlib modules the
                 tokenizer did not see), one {"text": ...} record a line, and target_val.jsonl,
                 16 held-out blocks for validation
    general.jsonl a general-domain corpus (English prose: the paragraphs of pydoc's topic pages)

The tiny models' hyper-parameters are repeated in entrodrop/config/derived_configs.py, which
writes them into configs/tiny/*.yaml; the recipes check the YAML against each config.json when
they load, so the two cannot drift apart silently.
Running it again with the same Python gives the same files.
"""

import argparse
import json
import pydoc_data.topics
import sysconfig
from pathlib import Path
from typing import Iterator, List

import torch
from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from torchtune.models.qwen2._tokenizer import PRETOKENIZE_REGEX

from entrodrop.models.checkpointing import write_random_checkpoint
from entrodrop.models.families import FAMILIES
from entrodrop.models.qwen3._model_builders import QWEN3_SPECIAL_TOKENS
from entrodrop.models.tiny import BPE_VOCAB_SIZE, DEMO_QWEN3, TINY, TINY_QWEN3

CORPUS_CHARS = 4_000_000
TARGET_RECORDS = 64


def python_source_files() -> List[Path]:
    """The standard library's own .py files, sorted so every run reads them in one order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in stdlib.glob("*.py") if p.is_file())


def corpus(max_chars: int) -> Iterator[str]:
    """Real text available offline: pydoc's English topic pages, then stdlib source."""
    budget = max_chars
    texts = [*pydoc_data.topics.topics.values()]
    texts += [p.read_text(encoding="utf-8", errors="replace") for p in python_source_files()]
    for text in texts:
        if budget <= 0:
            return
        yield text[:budget]
        budget -= len(text)


def train_tokenizer(out: Path) -> None:
    """Byte-level BPE with Qwen2's pre-tokenizer, saved in Qwen's vocab.json + merges.txt format."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(CORPUS_CHARS), trainer)
    special = sorted(QWEN3_SPECIAL_TOKENS, key=QWEN3_SPECIAL_TOKENS.get)
    tok.add_special_tokens(special)
    out.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(out))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "model_max_length": TINY_QWEN3["max_seq_len"],
    }, indent=2))


def main(out: Path) -> None:
    tokenizer_dir = out / "tokenizer"
    train_tokenizer(tokenizer_dir)
    for name, family in FAMILIES.items():
        write_random_checkpoint(out / family.tiny_dir, name, TINY[name], tokenizer_dir, dtype=torch.float32,
                                seed=family.tiny_seed)
    write_random_checkpoint(out / "qwen3_demo", "QWEN3", DEMO_QWEN3, tokenizer_dir, dtype=torch.float32, seed=2)
    # Held-out text: the last stdlib files, which the tokenizer's budget did not reach.
    held_out = [p.read_text(encoding="utf-8") for p in python_source_files()[-12:]]
    (out / "sample.txt").write_text("\n".join(held_out[-3:])[:20_000], encoding="utf-8")
    blocks = [b.strip() for text in held_out[:-3] for b in text.split("\n\n\n") if len(b.strip()) >= 200]
    for name, part in [("target", blocks[:TARGET_RECORDS]), ("target_val", blocks[TARGET_RECORDS : TARGET_RECORDS + 16])]:
        with (out / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for block in part:
                f.write(json.dumps({"text": block[:3000]}) + "\n")
    paragraphs = [p.strip() for text in pydoc_data.topics.topics.values() for p in text.split("\n\n")]
    with (out / "general.jsonl").open("w", encoding="utf-8") as f:
        for paragraph in paragraphs:
            if len(paragraph) >= 80:
                f.write(json.dumps({"text": paragraph}) + "\n")
    print(f"tiny assets written to {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("assets/tiny"))
    main(parser.parse_args().out)
