"""An lm-eval model around the in-training torchtune model and tokenizer.

torchtune 0.6.1's ``eleuther_eval`` recipe refuses lm-eval 0.4.13 and its wrapper loads gpt2
from the hub, so this is a small ``TemplateLM`` of our own: ``loglikelihood`` (through
``_loglikelihood_tokens``), ``loglikelihood_rolling`` and ``generate_until`` (greedy, batched,
with torchtune's KV cache). Each generated row stops at an end token (``end_token_ids``: EOS and
every end-of-turn token the tokenizer defines) or at its own ``until`` strings as it generates,
and a batch stops when every row has: a base model in continual pre-training rarely emits EOS,
so cutting at ``until`` only afterwards ran every row to ``max_gen_toks``.

Chat templates (lm-eval's ``apply_chat_template``): a prompt is formatted by the tokenizer's own
``tokenize_messages``, and its ids are kept, not parsed again from the text: tiktoken (Llama 3)
reads ``<|eot_id|>`` written in text as plain characters.

Several processes: lm-eval sees one process on every rank (``world_size`` 1) and runs the
same requests everywhere; the adapter gives each rank every N-th batch of them, pads the
ranks to the same number of equal-sized batches (a sharded model runs its collectives in
every forward) and all-gathers the results, so every rank returns every answer.
"""

import contextlib
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torchtune import utils
from torchtune.generation import (
    get_causal_mask_from_padding_mask,
    get_position_ids_from_padding_mask,
)
from torchtune.modules.common_utils import delete_kv_caches
from tqdm import tqdm

from entrodrop.errors import ConfigError

log = utils.get_logger("INFO")


class _CompiledDecodeFailed(Exception):
    """The compiled decode step raised (the error is its ``__cause__``): decode eagerly instead."""


def end_token_ids(tokenizer) -> List[int]:
    """The ids that end a generation: EOS, the tokenizer's ``stop_tokens`` (Llama 3: ``<|eot_id|>``,
    ``<|eom_id|>``) and ChatML's ``<|im_end|>`` (Qwen's tokenizers list only EOS and padding).
    An instruct model ends its turn with an end-of-turn token, not EOS; without it a row runs on
    and appends what follows the turn to its answer."""
    ids = [tokenizer.eos_id, *getattr(tokenizer, "stop_tokens", []), getattr(tokenizer, "im_end_id", None)]
    return sorted({i for i in ids if i is not None})


# What Qwen3's chat template opens the answer with when thinking is off (enable_thinking=False).
NO_THINKING = "<think>\n\n</think>\n\n"


def chat_prompt_ids(tokenizer, messages: List[dict], add_generation_prompt: bool = True,
                    enable_thinking: Optional[bool] = None) -> List[int]:
    """``messages`` (``{"role", "content"}`` dicts) in the tokenizer's chat format, ending with the
    assistant's header when ``add_generation_prompt`` (an empty last assistant message, which
    torchtune's tokenizers leave open), without EOS. ``enable_thinking=False`` on a tokenizer with
    ``<think>`` opens the answer with an empty thought, as Qwen3's template does: the model then
    answers at once instead of reasoning at length first."""
    from torchtune.data import Message

    turns = [Message(role=m["role"], content=m["content"]) for m in messages]
    if add_generation_prompt:
        thinks = "<think>" in getattr(tokenizer, "special_tokens", {})
        turns.append(Message(role="assistant", content=NO_THINKING if enable_thinking is False and thinks else ""))
    if hasattr(tokenizer, "tt_model"):  # Llama 3: its end tokens close the last assistant message
        return tokenizer.tokenize_messages(turns, add_end_tokens=not add_generation_prompt)[0]
    return tokenizer.tokenize_messages(turns, add_eos=False)[0]


class TorchtuneLM(TemplateLM):
    """lm-eval's view of a torchtune ``TransformerDecoder``.

    Args:
        model: the model (plain or FSDP2-sharded), put in eval mode by the caller.
        tokenizer: a torchtune tokenizer (``encode``/``decode``, ``eos_id``, ``pad_id``).
        device: where the model runs.
        max_seq_len (int): longest input; longer contexts keep their last tokens.
        batch_size (int): sequences per forward.
        max_gen_toks (int): generation length when a task does not set ``max_gen_toks``.
        distributed (bool): share the requests over the ranks of the default process group.
        generation_batch_size (int): rows per generation batch (None: ``batch_size``). Decoding
            one token costs about the same for 8 rows as for 32 on a GPU, so it pays to set it
            well above the scoring batch, which holds whole sequences.
        compile_decode (bool): run the one-token decode step under ``torch.compile`` (on CUDA
            with ``mode="reduce-overhead"``: CUDA graphs over the static KV cache). Greedy
            outputs are the same tokens as eager. If the compiled step raises, the adapter logs
            one warning, decodes eagerly from then on and redoes the batch from its prompt.
        stop_check_every (int): decode steps between two reads of the new tokens, where rows
            are checked for EOS and stop strings (and, sharded, the ranks agree to stop). In
            between, the steps are queued on the device without waiting for it, and the host's
            per-row checks of one block overlap the device's next steps; a batch runs at most
            ``stop_check_every - 1`` steps past its last row's stop. Outputs do not depend on it.
            None: 8 on a GPU, 1 on the CPU (which has no device to overlap with, so a later
            check would only add steps).
        enable_thinking (Optional[bool]): with a chat template, False opens each answer with
            Qwen3's empty thought (``chat_prompt_ids``); None leaves the template as it is.
    """

    def __init__(self, model: torch.nn.Module, tokenizer, device: torch.device, max_seq_len: int,
                 batch_size: int, max_gen_toks: int = 256, distributed: bool = False,
                 generation_batch_size: Optional[int] = None, compile_decode: bool = False,
                 stop_check_every: Optional[int] = None, enable_thinking: Optional[bool] = None) -> None:
        super().__init__()
        self._enable_thinking = enable_thinking
        self._model, self._tokenizer, self._device = model, tokenizer, device
        self._max_seq_len, self._batch_size, self._max_gen_toks = max_seq_len, batch_size, max_gen_toks
        self._generation_batch_size = generation_batch_size or batch_size
        self._compile_decode, self._cache_shape = compile_decode, None
        if stop_check_every is None:
            stop_check_every = 1 if device.type == "cpu" else 8
        if stop_check_every < 1:
            raise ValueError(f"stop_check_every={stop_check_every}: must be at least 1")
        self._stop_check_every = stop_check_every
        # None once a compiled step has failed: ``_generate`` falls back to the eager one.
        self._compiled_step = self._compile_step(self._decode_step) if compile_decode else None
        self._dtype = next(model.parameters()).dtype
        self._end_ids = set(end_token_ids(tokenizer))
        self._chat_prompts: Dict[str, List[int]] = {}  # apply_chat_template's text -> its ids
        self._dp_size = dist.get_world_size() if distributed else 1
        self._dp_rank = dist.get_rank() if distributed else 0

    @classmethod
    def from_config(cls, model: torch.nn.Module, tokenizer, device: torch.device, lm_eval,
                    distributed: bool = False) -> "TorchtuneLM":
        """The adapter an ``evaluation.lm_eval`` config section describes (``max_seq_len``,
        ``batch_size``, ``max_gen_toks``, ``generation_batch_size``, ``compile_decode``,
        ``enable_thinking``), around ``model`` and ``tokenizer`` on ``device``; ``distributed``
        shares the requests over the ranks of the default process group."""
        return cls(model, tokenizer, device, lm_eval.max_seq_len, lm_eval.batch_size, lm_eval.max_gen_toks,
                   distributed=distributed, generation_batch_size=lm_eval.generation_batch_size,
                   compile_decode=lm_eval.compile_decode, enable_thinking=lm_eval.enable_thinking)

    @property
    def eot_token_id(self) -> int:
        return self._tokenizer.eos_id

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, **kwargs) -> List[int]:
        """``string``'s ids; a chat prompt (``apply_chat_template``'s text) keeps its own."""
        if string in self._chat_prompts:
            return list(self._chat_prompts[string])
        return self._tokenizer.encode(string, add_bos=False, add_eos=False)

    def _encode_pair(self, context: str, continuation: str) -> Tuple[List[int], List[int]]:
        """A scored continuation after a chat prompt is encoded on its own (lm-eval's split of the
        whole text would first move the prompt's closing newline to the continuation)."""
        if context in self._chat_prompts:
            return self.tok_encode(context), self.tok_encode(continuation)
        return super()._encode_pair(context, continuation)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self._tokenizer.decode(list(tokens))

    # -------------------------------------------------------------- chat template

    def apply_chat_template(self, chat_history: List[dict], add_generation_prompt: bool = True) -> str:
        """The prompt in the tokenizer's chat format (``chat_prompt_ids``), as text for lm-eval;
        ``tok_encode`` maps the text back to these ids."""
        ids = chat_prompt_ids(self._tokenizer, chat_history, add_generation_prompt, self._enable_thinking)
        text = self._tokenizer.decode(ids, skip_special_tokens=False)
        self._chat_prompts[text] = ids
        return text

    @property
    def tokenizer_name(self) -> str:
        return type(self._tokenizer).__name__

    def chat_template(self, chat_template=False) -> str:
        """What lm-eval records as the template: torchtune's tokenizers format chats in code."""
        return f"{type(self._tokenizer).__name__}.tokenize_messages" if chat_template else ""

    # -------------------------------------------------------------- sharing over ranks

    def _log_size(self, kind: str, requests, extra: str = "") -> None:
        """Before a request type runs: how many requests of which task, and ``extra``."""
        if self._dp_rank == 0 and requests:
            tasks = Counter(getattr(r, "task_name", None) or "?" for r in requests)
            log.info(f"lm-eval {kind}: {len(requests):,} requests ("
                     + ", ".join(f"{task} {count:,}" for task, count in tasks.items()) + f"){extra}")

    def _map_batches(self, items: list, fn, filler, batch_size: Optional[int] = None, desc: str = "",
                     disable_tqdm: bool = False) -> list:
        """``fn`` over batches of ``items`` (``(tokens, n, ...)`` tuples; ``batch_size``, default the
        scoring one), this rank taking every N-th batch; all ranks run the same number of full
        batches (``filler`` pads them) and get all results, in the order of ``items``. Rank 0
        shows a progress bar (``desc``) with an ETA."""
        b, n = batch_size or self._batch_size, self._dp_size
        # Longest first, so a batch holds similar lengths (little padding) and memory runs out early if at all.
        order = sorted(range(len(items)), key=lambda i: len(items[i][0]), reverse=True)
        batches = [[items[i] for i in order[k : k + b]] for k in range(0, len(order), b)]
        batches += [[] for _ in range(-len(batches) % n)]
        mine = []
        for batch in tqdm(batches[self._dp_rank :: n], desc=desc, unit="batch", leave=False,
                          disable=disable_tqdm or self._dp_rank != 0 or not desc):
            padded = batch + [filler] * (b - len(batch))
            mine.append(fn(padded)[: len(batch)])
        if n == 1:
            done = [r for rs in mine for r in rs]
        else:
            gathered = [None] * n
            dist.all_gather_object(gathered, mine)
            # batch k was computed by rank k % n as its (k // n)-th batch
            done = [r for k in range(len(batches)) for r in gathered[k % n][k // n]]
        results = [None] * len(items)
        for i, r in zip(order, done):
            results[i] = r
        return results

    # -------------------------------------------------------------- scoring

    @torch.no_grad()
    def _score(self, batch: List[Tuple[List[int], int]]) -> List[Tuple[float, bool]]:
        """(sum of log p, all greedy) of the last ``n`` tokens of each sequence."""
        inputs = [seq[-(self._max_seq_len + 1) :] for seq, _ in batch]
        width = max(len(s) for s in inputs) - 1
        tokens = torch.zeros(len(inputs), width, dtype=torch.long)
        for r, seq in enumerate(inputs):
            tokens[r, : len(seq) - 1] = torch.tensor(seq[:-1])
        # Right padding: attention is causal, so no real position sees it.
        logits = self._model(tokens.to(self._device))
        logits = torch.cat(logits, dim=1) if isinstance(logits, list) else logits
        results = []
        for r, ((_, n), seq) in enumerate(zip(batch, inputs)):
            targets = torch.tensor(seq[-n:], device=self._device)
            logprobs = F.log_softmax(logits[r, len(seq) - 1 - n : len(seq) - 1].float(), dim=-1)
            results.append((float(logprobs.gather(-1, targets[:, None]).sum()),
                            bool((logprobs.argmax(-1) == targets).all())))
        return results

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> List[Tuple[float, bool]]:
        self._log_size("loglikelihood", requests)
        return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> List[Tuple[float, bool]]:
        items = [(context + continuation, len(continuation)) for _, context, continuation in requests]
        return self._map_batches(items, self._score, filler=([self.eot_token_id] * 2, 1), desc="loglikelihood",
                                 disable_tqdm=disable_tqdm)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        windows, owner = [], []
        for k, (text,) in enumerate(req.args for req in requests):
            for context, continuation in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                    max_seq_len=self._max_seq_len, context_len=1)):
                windows.append((context + continuation, len(continuation)))
                owner.append(k)
        self._log_size("loglikelihood_rolling", requests, f", {len(windows):,} windows")
        scores = self._map_batches(windows, self._score, filler=([self.eot_token_id] * 2, 1),
                                   desc="loglikelihood_rolling", disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for k, (logprob, _) in zip(owner, scores):
            totals[k] += logprob
        return totals

    # -------------------------------------------------------------- generation

    def _stopped(self, ids: List[int], n: int, stops: Sequence[str]) -> bool:
        """Whether a row whose generated tokens are ``ids`` needs no more: EOS, its ``n`` tokens,
        or one of its ``stops`` in the text of its last tokens (a stop string of c characters
        lies within 4c + 2 byte-level tokens)."""
        if len(ids) >= n or ids[-1] in self._end_ids:
            return True
        window = 4 * max((len(stop) for stop in stops), default=0) + 2
        text = self.tok_decode(ids[-window:]) if stops else ""
        return any(stop and stop in text for stop in stops)

    def _all_ranks_done(self, done: bool) -> bool:
        """Alone, whether this batch is done; sharded, whether every rank's is (every forward of
        a sharded model gathers weights, so the ranks stop at the same step)."""
        if self._dp_size == 1:
            return done
        left = torch.tensor([0 if done else 1], device=self._device)
        dist.all_reduce(left)
        return int(left.item()) == 0

    def _decode_step(self, x: torch.Tensor, input_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The greedy next token ``[b, 1]`` of each row: one forward over the KV cache."""
        logits = self._model(x, input_pos=input_pos, mask=mask)
        return (logits[-1] if isinstance(logits, list) else logits)[:, -1].argmax(-1, keepdim=True)

    def _compile_step(self, step: Callable) -> Callable:
        """``step`` under ``torch.compile``, one graph per shape; on a GPU ``"reduce-overhead"``
        replays it as a CUDA graph (no per-kernel launch cost). A subclass may compile otherwise
        (the tests give one whose step fails, to see the eager fallback)."""
        mode = "reduce-overhead" if self._device.type == "cuda" else None
        return torch.compile(step, mode=mode, dynamic=False)

    def _compiled_decode(self, x: torch.Tensor, input_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The compiled decode step once, as CUDA graphs need it: each call opens a new step
        (the last replay's outputs may then be overwritten), and the ``[b, 1]`` output is cloned
        at once, since it is the next step's input and the next replay overwrites it. Feeding
        the graph's own output back in raised "accessing tensor output of CUDAGraphs that has
        been overwritten by a subsequent run" on an H100. Any error: ``_CompiledDecodeFailed``."""
        try:
            torch.compiler.cudagraph_mark_step_begin()
            return self._compiled_step(x, input_pos, mask).clone()
        except Exception as error:  # whatever dynamo, inductor or CUDA graphs raise
            raise _CompiledDecodeFailed(error) from error

    def _fresh_caches(self, rows: int, length: int) -> None:
        """Empty KV caches of ``rows`` x ``length``: the ones already set up when their shape fits
        (so a compiled decode step, and its CUDA graph, keeps the same buffers), else new ones."""
        if self._cache_shape == (rows, length):
            self._model.reset_caches()
            return
        if self._cache_shape:
            delete_kv_caches(self._model)
        with self._device:
            self._model.setup_caches(rows, self._dtype, decoder_max_seq_len=length)
        self._cache_shape = (rows, length)

    @contextlib.contextmanager
    def _kv_caches(self):
        """KV caches for one ``generate_until`` call (``_fresh_caches`` per batch), deleted after:
        the model trains without them."""
        self._cache_shape = None
        try:
            yield
        finally:
            if self._cache_shape:
                delete_kv_caches(self._model)
            self._cache_shape = None

    def _generate(self, batch: List[Tuple[List[int], int, Sequence[str]]], max_new: int) -> List[List[int]]:
        """``_greedy``, eagerly for good once the compiled decode step has failed: one warning, and
        the batch again from its prompt, on fresh KV caches. A compile error never ends an
        evaluation.

        With several processes each falls back on its own. A sharded model gathers weights in
        every forward, so the ranks must run the same forwards: a failure that every rank meets
        at the same step (the same code and shapes, the usual case) keeps them in step, as they
        all redo the batch; a rank that fails alone redoes its prompt while the others decode,
        and the evaluation hangs until the process group's timeout."""
        try:
            return self._greedy(batch, max_new)
        except _CompiledDecodeFailed as failed:
            error = failed.__cause__
            first_line = (str(error).strip().splitlines() or [""])[0][:200]
            log.warning(f"compiled decode failed ({type(error).__name__}: {first_line}); decoding eagerly from now "
                        f"on, this batch again from its prompt")
            self._compiled_step = None
            if self._cache_shape:  # what the failed step left in the caches is dropped with them
                delete_kv_caches(self._model)
                self._cache_shape = None
            return self._greedy(batch, max_new)

    @torch.no_grad()
    def _greedy(self, batch: List[Tuple[List[int], int, Sequence[str]]], max_new: int) -> List[List[int]]:
        """Greedy continuations of left-padded prompts ``(prompt, n, stops)``: each row generates
        until ``_stopped``, at most ``max_new`` tokens; the batch stops at the first check (every
        ``stop_check_every`` tokens) after every row has. A row's tokens are those an unstopped
        loop would give, up to where it stopped.

        The cache holds ``width + max_new`` positions; with ``compile_decode`` it is rounded up to
        a power of two (at most ``max_seq_len``), so a few shapes serve every batch and the decode
        step compiles a few times, not once per prompt length."""
        if max_new == 0:
            return [[] for _ in batch]
        prompts = [p[-(self._max_seq_len - max_new) :] for p, *_ in batch]
        width = max(len(p) for p in prompts)
        length = width + max_new
        if self._compile_decode:
            length = min(max(self._max_seq_len, length), 1 << (length - 1).bit_length())
        pad = self._tokenizer.pad_id
        tokens = torch.full((len(prompts), width), pad, dtype=torch.long)
        for r, p in enumerate(prompts):
            tokens[r, width - len(p) :] = torch.tensor(p)
        # torchtune's masks and positions for left-padded prompts; its generate() is not used
        # because it keeps every step's [b, 1, vocab] logits (GBs at a 152k vocabulary).
        padding = F.pad(tokens != pad, (0, length - width), value=True)
        masks = get_causal_mask_from_padding_mask(padding, target_seq_len=length).to(self._device)
        positions = get_position_ids_from_padding_mask(padding).to(self._device)
        generated: List[List[int]] = [[] for _ in batch]
        stopped = [False] * len(batch)
        self._fresh_caches(len(prompts), length)
        # New tokens land on the device and are read a block at a time.
        new = torch.empty(len(prompts), max_new, dtype=torch.long, device=self._device)
        # The prompt, of a new width each batch, runs eagerly; each decode step has one shape.
        x = self._decode_step(tokens.to(self._device), positions[:, :width], masks[:, :width])
        made, read = 1, 0
        while True:
            new[:, made - 1 : made].copy_(x)
            if made - read == self._stop_check_every or made == max_new:
                for r, block in enumerate(new[:, read:made].tolist()):
                    for token in block:
                        if stopped[r]:
                            break
                        generated[r].append(token)
                        stopped[r] = self._stopped(generated[r], batch[r][1], batch[r][2])
                read = made
                # Every rank has made the same number of tokens: they check, and stop, together.
                if made == max_new or self._all_ranks_done(all(stopped)):
                    break
            now = slice(width + made - 1, width + made)
            step = self._compiled_decode if self._compiled_step else self._decode_step
            x = step(x, positions[:, now], masks[:, now])
            made += 1
        return generated

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        items, stops = [], []
        for context, gen_kwargs in (req.args for req in requests):
            until = gen_kwargs.get("until", [])
            stops.append([until] if isinstance(until, str) else list(until))
            items.append((self.tok_encode(context), int(gen_kwargs.get("max_gen_toks", self._max_gen_toks))))
        too_long = sorted({n for _, n in items if n >= self._max_seq_len})
        if too_long:
            raise ConfigError(f"tasks ask for max_gen_toks={too_long}, which leaves no room for a prompt in "
                             f"evaluation.lm_eval.max_seq_len={self._max_seq_len}")
        self._log_size("generate_until", requests, f", at most {sum(n for _, n in items):,} new tokens")
        # lm-eval sends every task's requests at once: generate each max_gen_toks apart, so a
        # short-answer task does not run as many steps as the longest one.
        outputs = [None] * len(items)
        for max_new in sorted({n for _, n in items}):
            group = [k for k, (_, n) in enumerate(items) if n == max_new]
            with self._kv_caches():
                done = self._map_batches([(*items[k], stops[k]) for k in group],
                                         lambda batch: self._generate(batch, max_new),
                                         filler=([self.eot_token_id], 1, []), batch_size=self._generation_batch_size,
                                         desc=f"generate_until (max_gen_toks {max_new})", disable_tqdm=disable_tqdm)
            for k, ids in zip(group, done):
                outputs[k] = ids
        texts = []
        for ids, until in zip(outputs, stops):
            ends = [k for k, token in enumerate(ids) if token in self._end_ids]
            if ends:
                ids = ids[: ends[0]]
            text = self.tok_decode(ids)
            for stop in until:
                text = text.split(stop)[0] if stop else text
            texts.append(text)
        return texts

