"""The local tasks' likelihood scores (``humaneval_likelihood``, ``demo_target_held_out``): a
log-likelihood per character. Their YAMLs name them ``!function likelihood.<name>``, which
lm-eval loads from this file, beside them."""


def logprob_per_char(doc: dict, results: list) -> dict:
    """Log-likelihood of the canonical solution given the prompt, per character of the solution:
    comparable across tokenizers, and it moves even for tiny models."""
    (logprob, _), = results
    return {"logprob_per_char": logprob / max(len(doc["canonical_solution"]), 1)}


def text_logprob_per_char(doc: dict, results: list) -> dict:
    """A whole text's log-likelihood (lm-eval's rolling windows: every token scored once) per
    character, the unit of ``logprob_per_char``: the held-out target text of the demos, whose
    score can improve as a run specializes, and worsen once it overfits."""
    (logprob,) = results
    return {"logprob_per_char": logprob / max(len(doc["text"]), 1)}
