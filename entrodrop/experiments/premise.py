"""The premise regime: the CPU demo's text and model, where the base's low-entropy tokens are near-certain.

`make reproduce REGIME=premise` runs it (entrodrop/experiments/reproduce.py; docs/reproduction.md,
"The premise regime").

The paper masks the low-entropy tokens because the base model already predicts them almost
surely (its section 2 and figure 1c). The CPU demo's base does not: its held-out low half averages
0.72 nats. Here the same decimal test cases are written as the decimal module's documentation
writes a computation, one doctest a case (``doctest_case``): the line ``addx035 add '70'
'10000e+9' -> '1.00000000E+13' Inexact Rounded`` becomes the call ``ctx.add(Decimal('70'),
Decimal('10000e+9'))`` after the prompt and ``Decimal('1.00000000E+13')`` on the line beneath;
and the same 0.67M Qwen3 is pre-trained on the other operations' cases in that form, three times as
long as the demo's base, so the form (the prompt, the call, the quotes and the constructor) is what
the base knows, and the operands and results are what it must learn (configs/premise/). Everything
else is the demo's: the docstrings as general replay, the target's first blocks with every other one
held out (64 blocks of 360 characters, 4.9k tokens to train on as in the demo), the continual
pre-training's steps, learning rate and evaluation.
"""

import shlex
from functools import partial
from typing import Optional

from entrodrop.experiments import demo

OUT = demo.REPO / "outputs" / "premise"
CONFIGS = "configs/premise"
# 64 blocks of doctests hold as many tokens as the demo's 44 blocks of test-case lines (4.9k to train on).
TARGET_BLOCKS = 64
# A directive of a .decTest file -> the attribute of decimal.Context it sets.
CONTEXT_ATTRIBUTES = {"precision": "prec", "rounding": "rounding", "maxexponent": "Emax", "minexponent": "Emin",
                      "clamp": "clamp"}


def doctest_case(line: str) -> Optional[str]:
    """A ``.decTest`` line as a doctest: a test case as the call on a context ``ctx`` and its result
    beneath, a directive as the context attribute it sets; None for any other line (version lines,
    a case the quoting leaves unreadable).

    >>> doctest_case("addx035 add '70'  '10000e+9' -> '1.00000000E+13' Inexact Rounded").splitlines()
    [">>> ctx.add(Decimal('70'), Decimal('10000e+9'))", "Decimal('1.00000000E+13')"]
    >>> doctest_case("rounding: half_up"), doctest_case("precision:   9"), doctest_case("version: 2.59")
    ('>>> ctx.rounding = ROUND_HALF_UP', '>>> ctx.prec = 9', None)
    """
    if "->" in line:
        try:
            words = shlex.split(line)
        except ValueError:
            return None
        arrow = words.index("->")
        result = words[arrow + 1] if len(words) > arrow + 1 else ""
        operands = ", ".join(f"Decimal('{o}')" for o in words[2:arrow])
        return f">>> ctx.{words[1]}({operands})\nDecimal('{result}')"
    key, _, value = line.partition(":")
    key, value = key.strip().lower(), value.strip()
    if key not in CONTEXT_ATTRIBUTES:
        return None
    return f">>> ctx.{CONTEXT_ATTRIBUTES[key]} = {'ROUND_' + value.upper() if key == 'rounding' else value}"


def doctest_blocks(text: str, limit: int = demo.BLOCK_CHARS, without: tuple = ()) -> list:
    """A ``.decTest`` file as blocks of doctests (``doctest_case``), comments and the cases of the
    operations ``without`` dropped, packed in order into blocks of at most ``limit`` characters (a
    case is never cut; one longer than ``limit`` is a block of its own).

    >>> doctest_blocks("-- add\\nprecision: 9\\n\\naddx001 add 1 1 -> 2\\nmulx1 multiply 2 1 -> 2", without=("multiply",))
    [">>> ctx.prec = 9\\n>>> ctx.add(Decimal('1'), Decimal('1'))\\nDecimal('2')"]
    >>> len(doctest_blocks("a1 add 1 1 -> 2\\na2 add 2 2 -> 4", limit=50))
    2
    """
    lines = [line.rstrip() for line in text.splitlines()
             if line.strip() and not line.startswith("--") and line.split()[1:2] not in ([op] for op in without)]
    out, block = [], ""
    for case in filter(None, map(doctest_case, lines)):
        if block and len(block) + 1 + len(case) > limit:
            out.append(block)
            block = ""
        block = f"{block}\n{case}" if block else case
    return out + [block] * bool(block)


def data_and_base_stages(*extra: str) -> list:
    """The demo's data and base stages (``entrodrop.experiments.demo.data_and_base_stages``) for
    this regime: its corpora, stores, base and entropies in outputs/premise, by configs/premise."""
    corpora = partial(demo.build_corpora, OUT, doctest_blocks, TARGET_BLOCKS)
    return demo.data_and_base_stages(*extra, out=OUT, configs=CONFIGS, corpora=corpora)
