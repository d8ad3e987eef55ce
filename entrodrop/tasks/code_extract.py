"""The program a code benchmark runs, taken from a model's reply as a person would take it.

One function, ``program``, serves every code task (HumanEval, MBPP, LiveCodeBench), for the
replies a base model writes (the prompt's continuation) and those a chat model writes (code in
a Markdown fence after a sentence). Two steps:

1. Where the code is (``code_in_reply``), the first that applies:

   - a fenced block: the last that defines the entry point (a chat reply that corrects itself
     ends with its final version), else the first that holds code, else the first; a fence left
     open runs to the end of the reply (generation may stop inside it);
   - the text between ``[BEGIN]`` and ``[DONE]`` (MBPP's few-shot form);
   - the raw reply, or, when it does not compile, its longest run of lines that does (a sentence
     before or after the code is not code).

   A candidate wrapped in single or double quotes (OpenCompass's MBPP shots quote their code)
   loses them, and Markdown's ``\\_`` becomes ``_``, when only that makes it compile. A reasoning
   model's drafts, up to its ``</think>``, are not looked at.

2. How it becomes a program (``program``):

   - a reply that defines the entry point is a whole program. The prompt goes first when it
     compiles alone (HumanEval's signature and docstring), so its imports and helper functions
     stay, and the reply's definition, coming after, replaces the prompt's stub;
   - any other reply is the body: the prompt followed by it, re-indented under the entry point's
     ``def`` when it came without that indentation (``return x`` alone in a fence);
   - for a function task, the top-level lines a chat reply adds to show its function at work
     (``assert`` statements, ``print(...)`` calls, an ``if __name__ == "__main__":`` block) are
     dropped: they are not the answer, and a wrong example must not fail a right function. A
     stdin program (no entry point) is kept whole: its top-level lines are the program.

Everything here is text in, text out; nothing is executed (``compile`` only checks syntax).
"""

import ast
import re
import textwrap
from typing import List, Optional, Tuple

FENCE = re.compile(r"^[ \t]*```")
# The most lines the fence-less search looks through (a start is tried against each end).
MAX_SEARCH_LINES = 400
# The most spans it compiles: a bound on the time one reply can take (about 0.2 s).
MAX_SEARCH_TRIES = 2000


def compiles(code: str) -> bool:
    """Whether ``code`` is a Python module the interpreter would accept (syntax only).

    Example:
        >>> compiles("x = 1"), compiles("return x"), compiles("Here is the code:")
        (True, False, False)
    """
    try:
        compile(code, "<reply>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the text
        return False


WRAPPER = "__entrodrop_body"


def indentation(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


def as_body(code: str) -> str:
    """``code`` placed inside functions, to check a reply that is a body: an indented one under
    nested ``def`` lines down to its first line's column (later lines may return to the module,
    as a continuation's next ``def`` does), an unindented one (``return x``) indented under one.
    """
    first = next((line for line in code.split("\n") if line.strip()), "")
    column = indentation(first)
    if column == 0:
        return f"def {WRAPPER}():\n" + textwrap.indent(code, "    ", lambda line: True)
    return "".join(" " * c + f"def {WRAPPER}():\n" for c in range(0, column, 4)) + code.expandtabs(4)


def holds_code(text: str) -> bool:
    """Whether ``text`` compiles (as a module, or as a function body: ``return x``) and does
    more than name a value: ``Solution`` or ``5`` alone is a word, not code.

    Example:
        >>> holds_code("def f():\\n    return 1"), holds_code("    return x\\n\\ndef g():\\n    pass")
        (True, True)
        >>> holds_code("return x"), holds_code("3\\n"), holds_code("Here it is:")
        (True, False, False)
    """
    if compiles(text):
        tree = ast.parse(text)
    elif compiles(as_body(text)):
        tree = ast.parse(as_body(text))
    else:
        return False
    return any(isinstance(node, ast.stmt) and not (isinstance(node, ast.FunctionDef) and node.name == WRAPPER)
               and not (isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.Name)))
               for node in ast.walk(tree))


def defines(code: str, entry_point: Optional[str]) -> bool:
    """Whether ``code`` defines ``entry_point`` (a function, a method or a class of that name)."""
    if not entry_point:
        return False
    return re.search(rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(entry_point)}\b", code, re.M) is not None


def fenced_blocks(reply: str) -> List[str]:
    """The contents of the reply's Markdown code fences, in order, each dedented; an unclosed
    fence runs to the end.

    Example:
        >>> fenced_blocks("Like this:\\n```python\\nx = 1\\n```\\nand\\n```\\ny = 2")
        ['x = 1', 'y = 2']
    """
    blocks, current = [], None
    for line in reply.split("\n"):
        if FENCE.match(line):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        blocks.append(current)
    return [textwrap.dedent("\n".join(lines)).strip("\n") for lines in blocks]


def between_markers(reply: str) -> Optional[str]:
    """What follows ``[BEGIN]`` up to ``[DONE]`` (or the end), or None without ``[BEGIN]``."""
    if "[BEGIN]" not in reply:
        return None
    return reply.split("[BEGIN]", 1)[1].split("[DONE]", 1)[0].strip("\n")


def longest_code_span(text: str) -> Optional[str]:
    """The run of lines of ``text`` with the most non-blank lines that ``holds_code``, the
    earliest among equals (EvalPlus's ``code_extract`` rule), or None.

    Example:
        >>> longest_code_span("Sure! Here it is:\\ndef f(x):\\n    return x\\nIt returns x.")
        'def f(x):\\n    return x'
    """
    lines = text.split("\n")[:MAX_SEARCH_LINES]
    filled = [bool(line.strip()) for line in lines]
    best, best_count, tries = None, 0, 0
    for start in range(len(lines)):
        if not filled[start] or sum(filled[start:]) <= best_count or not opens_statement(lines[start]):
            continue
        end = len(lines)
        while end > start and sum(filled[start:end]) > best_count and tries < MAX_SEARCH_TRIES:
            tries += 1
            span = "\n".join(lines[start:end])
            if holds_code(span):
                best, best_count = span.rstrip(), sum(filled[start:end])
                break
            # Cut just before the line that stops it compiling, or one line when that is the last.
            failing = error_line(span)
            end = start + failing - 1 if 1 < failing < end - start else end - 1
    return best


def error_line(text: str) -> int:
    """The line (from 1) where ``text`` stops compiling, read as a module or as a body,
    whichever gets further; 0 when it compiles."""

    def line_of(code: str, offset: int) -> int:
        try:
            compile(code, "<reply>", "exec", dont_inherit=True)
            return 0
        except SyntaxError as e:
            return max((e.lineno or 1) - offset, 1)
        except ValueError:
            return 1

    body = as_body(text)
    return max(line_of(text, 0), line_of(body, body.count("\n") - text.count("\n")))


def opens_statement(line: str) -> bool:
    """Whether a line can be the first of a piece of code: it is a statement, or the header of
    a block (``def f(x):``, ``for x in y:``). Prose lines are neither, which keeps the search short.

    Example:
        >>> opens_statement("    for x in xs:"), opens_statement("return x"), opens_statement("Here it is:")
        (True, True, False)
    """
    stripped = line.strip()
    return holds_code(stripped) or (stripped.endswith(":") and holds_code(stripped + "\n    pass"))


def repaired(code: str) -> str:
    """``code`` without quotes around it or Markdown's ``\\_``, when only that makes it compile.

    Example:
        >>> repaired(" 'def f(x):\\n    return x' ")
        'def f(x):\\n    return x'
    """
    if holds_code(code):
        return code
    stripped = code.strip()
    tries = []
    if stripped[:1] in ("'", '"') and stripped[:3] not in ("'''", '"""'):
        unquoted = stripped[1:-1] if stripped[-1:] == stripped[0] and len(stripped) > 1 else stripped[1:]
        tries.append(unquoted)
    tries += [t.replace("\\_", "_") for t in tries + [code] if "\\_" in t]
    return next((t for t in tries if holds_code(t)), code)


def code_in_reply(reply: str, entry_point: Optional[str] = None) -> str:
    """The code of a model's reply: a fenced block, ``[BEGIN]``...``[DONE]``, or the reply's
    own code (see the module docstring).

    Args:
        reply (str): the model's text.
        entry_point (Optional[str]): the function (or class) the benchmark calls, if any; the
            last fenced block that defines it wins over the others.

    Returns:
        str: the code, or the reply itself when nothing in it compiles (it then fails).

    Example:
        >>> code_in_reply("Here you go:\\n\\n```python\\ndef add(a, b):\\n    return a + b\\n```\\nDone.")
        'def add(a, b):\\n    return a + b'
        >>> code_in_reply("[BEGIN]\\n 'def add(a, b):\\n    return a + b' \\n")
        'def add(a, b):\\n    return a + b'
    """
    reply = reply.split("</think>")[-1]  # a reasoning model's drafts come before its answer
    blocks = [b for b in fenced_blocks(reply) if b.strip()]
    if blocks:
        chosen = (next((b for b in reversed(blocks) if defines(b, entry_point)), None)
                  or next((b for b in blocks if holds_code(repaired(b))), None) or blocks[0])
        return repaired(chosen)
    marked = between_markers(reply)
    text = repaired(marked if marked is not None else reply.strip("\n"))
    if holds_code(text):
        return text
    return longest_code_span(text) or text


def entry_indent(prompt: str, entry_point: Optional[str]) -> Tuple[int, int]:
    """The column of the entry point's ``def`` in the prompt (0 when absent) and the column its
    body starts at."""
    found = (re.findall(rf"^([ \t]*)(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}\b", prompt, re.M)
             if entry_point else [])
    column = len(found[-1].expandtabs(4)) if found else 0
    return column, column + 4


def joined_body(prompt: str, body: str, entry_point: Optional[str]) -> str:
    """The prompt continued by ``body``, which is re-indented under the entry point when its
    first line is not indented deeper than the ``def``.

    Example:
        >>> joined_body('def f(x):\\n    \"\"\"Twice x.\"\"\"\\n', "return 2 * x", "f")
        'def f(x):\\n    \"\"\"Twice x.\"\"\"\\n    return 2 * x'
    """
    column, body_column = entry_indent(prompt, entry_point)
    first = next((line for line in body.split("\n") if line.strip()), "")
    if indentation(first) > column:
        return prompt + body  # the prompt's own continuation, as lm-eval joins it
    indented = textwrap.indent(textwrap.dedent(body).strip("\n"), " " * body_column)
    head = prompt.rstrip(" \t")  # a starter code ends with its body's indentation
    return head + ("" if head.endswith("\n") or not head else "\n") + indented


def is_demo(node: ast.stmt) -> bool:
    """Whether a top-level statement only shows the function at work: an ``assert``, a
    ``print(...)`` call, or an ``if __name__ == "__main__":`` block."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return isinstance(node.value.func, ast.Name) and node.value.func.id == "print"
    if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
        sides = [node.test.left, *node.test.comparators]
        return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    return False


def without_demos(code: str) -> str:
    """``code`` without its top-level ``is_demo`` statements (unchanged if it does not compile).

    Example:
        >>> without_demos("def f():\\n    return 1\\n\\nassert f() == 2\\nprint(f())")
        'def f():\\n    return 1\\n'
    """
    if not compiles(code):
        return code
    lines = code.split("\n")
    for node in reversed(ast.parse(code).body):
        if is_demo(node):
            del lines[node.lineno - 1 : node.end_lineno]
    return "\n".join(lines).rstrip() + "\n"


def program(reply: str, prompt: str = "", entry_point: Optional[str] = None) -> str:
    """The program to run for a model's reply to a code problem.

    Args:
        reply (str): the model's text (a continuation, or a chat answer).
        prompt (str): code the reply may continue: HumanEval's prompt, LiveCodeBench's starter
            code; "" where the prompt is not code (MBPP, LiveCodeBench's stdin problems).
        entry_point (Optional[str]): the function the tests call (a function task); None for a
            stdin program, which is kept whole.

    Returns:
        str: the program text (it may not compile: the reply then fails its tests).

    Example:
        >>> prompt = 'import math\\n\\ndef f(x):\\n    \"\"\"Root of x.\"\"\"\\n'
        >>> print(program("Here:\\n```python\\ndef f(x):\\n    return math.sqrt(x)\\n\\nprint(f(4))\\n```",
        ...               prompt, "f"))
        import math
        <BLANKLINE>
        def f(x):
            \"\"\"Root of x.\"\"\"
        <BLANKLINE>
        def f(x):
            return math.sqrt(x)
        <BLANKLINE>
        >>> print(program("    return math.sqrt(x)\\n\\n\\ndef g():\\n    pass", prompt, "f"))
        import math
        <BLANKLINE>
        def f(x):
            \"\"\"Root of x.\"\"\"
            return math.sqrt(x)
        <BLANKLINE>
        <BLANKLINE>
        def g():
            pass
        <BLANKLINE>
    """
    code = code_in_reply(reply, entry_point)
    if defines(code, entry_point) or not prompt:
        whole = prompt.rstrip() + "\n\n" + code if prompt and compiles(prompt) else code
        if prompt and not compiles(whole) and compiles(code):
            whole = code  # e.g. a reply opening with ``from __future__``, which must come first
    else:
        whole = joined_body(prompt, code, entry_point)
    return without_demos(whole) if entry_point else whole


def called_function(tests: str, reference: str) -> Optional[str]:
    """The function ``tests`` call that the reference solution defines (MBPP names it nowhere
    else), or None.

    Example:
        >>> called_function("assert math.isclose(area(2), 12.56)", "import math\\ndef area(r):\\n    ...")
        'area'
    """
    defined = set(re.findall(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", reference, re.M))
    return next((name for name in re.findall(r"(\w+)\s*\(", tests) if name in defined), None)
