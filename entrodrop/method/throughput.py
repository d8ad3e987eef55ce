"""Tokens a second over a run of batches, for the entropy precompute's log (``Throughput``)."""

import time
from typing import Callable, List, Optional


class Throughput:
    """Tokens a second over a run of batches, overall and in steady state, for the precompute's
    log. Call it with each batch's token count as the batch finishes (``shard_entropies``'s
    ``on_batch``: a batch's entropies have reached the CPU by then, so the device is done with
    it). The steady state leaves out the first ``warmup_batches`` batches, where
    ``torch.compile`` compiles: the first batch of a shape, and batched by length the second
    too (the recompile with dynamic shapes). On an H100 the compile held a 586k-token run to
    37k tokens/s overall while the progress bar peaked at 105k/s.

    >>> clock = iter([0.0, 10.0, 11.0, 12.0, 13.0]).__next__
    >>> meter = Throughput(warmup_batches=2, clock=clock)
    >>> for tokens in (100, 100, 100, 100):
    ...     meter(tokens)
    >>> meter.summary()
    '400 tokens in 13.0s (31 tokens/s); steady state 100 tokens/s after 2 warm-up batches (11.0s)'
    >>> short = Throughput(warmup_batches=2, clock=iter([0.0, 10.0, 11.0]).__next__)
    >>> short(100); short(100); short.summary()
    '200 tokens in 11.0s (18 tokens/s); no steady state: 2 batches, 2 of them warm-up'
    """

    def __init__(self, warmup_batches: int = 2, clock: Callable[[], float] = time.perf_counter) -> None:
        self._warmup_batches, self._clock = warmup_batches, clock
        self._finished = [clock()]  # the clock at the start, then as each batch finished
        self._tokens: List[int] = []

    def __call__(self, num_tokens: int) -> None:
        self._tokens.append(num_tokens)
        self._finished.append(self._clock())

    def steady_tokens_per_second(self) -> Optional[float]:
        """Tokens a second after the warm-up batches; None when no batch came after them."""
        if len(self._tokens) <= self._warmup_batches:
            return None
        seconds = self._finished[-1] - self._finished[self._warmup_batches]
        return sum(self._tokens[self._warmup_batches :]) / seconds if seconds > 0 else None

    def summary(self) -> str:
        """One line: all tokens, their seconds and tokens/s, then the steady state and the warm-up."""
        seconds = self._finished[-1] - self._finished[0]
        line = f"{sum(self._tokens)} tokens in {seconds:.1f}s ({sum(self._tokens) / max(seconds, 1e-9):.0f} tokens/s)"
        steady = self.steady_tokens_per_second()
        if steady is None:
            return line + f"; no steady state: {len(self._tokens)} batches, {self._warmup_batches} of them warm-up"
        warmup, n = self._finished[self._warmup_batches] - self._finished[0], self._warmup_batches
        return f"{line}; steady state {steady:.0f} tokens/s after {n} warm-up batches ({warmup:.1f}s)"
