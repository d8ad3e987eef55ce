"""Write a config as the text of its parent config with some keys changed, so every comment of
the parent - the documentation of its keys - stays in the derived config word for word
(``scripts/make_configs.py``; the table of derived configs is ``entrodrop.config.derived_configs``).

The YAML is edited as lines, as the configs are written: one key a line, a mapping indented
under its key, lists in flow style (``[a, b]``), a key's comment on the lines right above it.
``set_value`` replaces a key's lines (a scalar or a whole mapping) or adds the key at the end of
its mapping, ``delete_key`` removes a key and its comment, ``set_comment`` rewrites a comment.

Example:
    >>> text = "a:\\n  # why b\\n  b: 1\\nc: 2\\n"
    >>> print(set_value(text, "a.b", 3), end="")
    a:
      # why b
      b: 3
    c: 2
    >>> print(set_comment(delete_key(text, "c"), "a.b", "why b is 1"), end="")
    a:
      # why b is 1
      b: 1
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import yaml

DELETE = object()  # a value of Derived.values: the key and its comment leave the derived config
COMMAND = "python scripts/make_configs.py"


@dataclass(frozen=True)
class Derived:
    """A config written from ``parent`` (a file under configs/), in this order:

    ``replace``: old -> new text, everywhere in the parent (header, comments and values), for a
    path named in several places; each old text must be there.
    ``header``: the derived config's own opening comment (what it is and the commands that run it,
    without the "# "), instead of the parent's; None keeps the parent's, after ``replace``.
    ``values``: dotted key -> value (a mapping replaces the key's whole block), or ``DELETE``.
    ``comments``: dotted key -> the comment above it (without the "# "); None removes it.
    """

    parent: str
    header: Optional[str] = None
    values: Dict[str, object] = field(default_factory=dict)
    comments: Dict[str, Optional[str]] = field(default_factory=dict)
    replace: Dict[str, str] = field(default_factory=dict)


class _Dumper(yaml.SafeDumper):
    """Values as the hand-written configs write them: True and False (not YAML's true and false),
    lists in flow style, small numbers as 1.0e-5 (not PyYAML's 1.0e-05, and 0.001 as 1.0e-3),
    a string with a comma in double quotes."""


def _float(dumper: yaml.SafeDumper, value: float) -> yaml.ScalarNode:
    if not value or not math.isfinite(value) or abs(value) >= 0.01:
        return dumper.represent_float(value)
    mantissa, exponent = f"{value:e}".split("e")
    return dumper.represent_scalar("tag:yaml.org,2002:float", f"{float(mantissa)!r}e{int(exponent)}")


_Dumper.add_representer(bool, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:bool", str(value)))
_Dumper.add_representer(list, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True))
_Dumper.add_representer(float, _float)
# The configs quote the lm-eval result keys ("acc,none").
_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value,
                                                                           style='"' if "," in value else None))


def _keys(lines: List[str]) -> Iterator[Tuple[str, int, int]]:
    """(dotted key, indent, line index) of each key of the YAML ``lines``, in order."""
    path: List[Tuple[int, str]] = []  # (indent, name) of the mappings the current line sits in
    for i, line in enumerate(lines):
        stripped = line.lstrip(" ")
        if not stripped.strip() or stripped.startswith(("#", "- ")) or ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, stripped.split(":", 1)[0]))
        yield ".".join(name for _, name in path), indent, i


def _is_content(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _block_end(lines: List[str], i: int, indent: int) -> int:
    """The line after the last one of the key on line ``i``: its own, and the deeper ones below."""
    end = i + 1
    for j in range(i + 1, len(lines)):
        if _is_content(lines[j]):
            if len(lines[j]) - len(lines[j].lstrip(" ")) <= indent:
                break
            end = j + 1
    return end


def _comment_start(lines: List[str], i: int) -> int:
    """The first line of the comment right above line ``i`` (``i`` itself if there is none)."""
    while i > 0 and lines[i - 1].strip().startswith("#"):
        i -= 1
    return i


def _find(lines: List[str], key: str) -> Optional[Tuple[int, int]]:
    """(line index, indent) of dotted ``key``; None if it is not there."""
    found = [(i, indent) for name, indent, i in _keys(lines) if name == key]
    if len(found) > 1:
        raise ValueError(f"{key} is on {len(found)} lines of the config, not 1")
    return found[0] if found else None


def _comment_lines(comment: str, indent: int) -> List[str]:
    return [f"{' ' * indent}# {line}".rstrip() + "\n" for line in comment.splitlines()]


def _rendered(name: str, value, indent: int) -> List[str]:
    """The lines of ``name: value`` at ``indent``: a mapping in block style, under the key."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        body = yaml.dump(value, Dumper=_Dumper, default_flow_style=False, sort_keys=False, width=math.inf)
        return [f"{pad}{name}:\n"] + [f"{pad}  {line}\n" for line in body.splitlines()]
    scalar = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=math.inf).removesuffix("\n")
    return [f"{pad}{name}: {scalar.removesuffix(chr(10) + '...')}\n"]


def set_value(text: str, key: str, value) -> str:
    """``text`` with dotted ``key`` set to ``value``: its lines replaced (the comment above them
    kept), or, for a key the text lacks, added at the end of its mapping, which must be there."""
    lines = text.splitlines(keepends=True)
    found = _find(lines, key)
    if found:
        i, indent = found
        rest = lines[i].split(":", 1)[1]
        if "#" in rest:
            raise ValueError(f"{key} has a comment on its own line: move it above the key")
        end = _block_end(lines, i, indent)
        return "".join(lines[:i] + _rendered(key.rsplit(".", 1)[-1], value, indent) + lines[end:])
    mapping, _, name = key.rpartition(".")
    if not mapping:
        return "".join(lines + _rendered(name, value, 0))
    found = _find(lines, mapping)
    if not found:
        raise ValueError(f"neither {key} nor {mapping} is in the config")
    i, indent = found
    end = _block_end(lines, i, indent)
    return "".join(lines[:end] + _rendered(name, value, indent + 2) + lines[end:])


def delete_key(text: str, key: str) -> str:
    """``text`` without dotted ``key``: its lines, those below it and the comment above it."""
    lines = text.splitlines(keepends=True)
    found = _find(lines, key)
    if not found:
        raise ValueError(f"{key} is not in the config: it cannot be deleted")
    i, indent = found
    return "".join(lines[:_comment_start(lines, i)] + lines[_block_end(lines, i, indent):])


def set_comment(text: str, key: str, comment: Optional[str]) -> str:
    """``text`` with the comment right above dotted ``key`` replaced by ``comment`` (None: none)."""
    lines = text.splitlines(keepends=True)
    found = _find(lines, key)
    if not found:
        raise ValueError(f"{key} is not in the config: it has no comment to set")
    i, indent = found
    return "".join(lines[:_comment_start(lines, i)] + _comment_lines(comment or "", indent) + lines[i:])


def split_header(text: str) -> Tuple[str, str]:
    """(the opening comment, the rest from the blank line that ends it) of a config's ``text``."""
    header, blank, body = text.partition("\n\n")
    if not blank or not all(line.startswith("#") for line in header.splitlines()):
        raise ValueError("a config opens with a comment (its commands), then a blank line")
    return header + "\n", "\n" + body


def note(parent: str) -> str:
    """The lines that open every derived config: where it comes from, and how to rewrite it."""
    return (f"# Generated by `{COMMAND}` from {parent} and its row in\n"
            "# entrodrop/config/derived_configs.py: change those and run it again, never this file.\n")


def render(parent_text: str, derived: Derived) -> str:
    """The text of the config ``derived`` makes from its parent's ``parent_text``."""
    text = parent_text
    for old, new in derived.replace.items():
        if old not in text:
            raise ValueError(f"{old!r} is not in {derived.parent}: fix the replace of its derived config")
        text = text.replace(old, new)
    header, body = split_header(text)
    if derived.header is not None:
        header = "".join(f"# {line}".rstrip() + "\n" for line in derived.header.splitlines())
    for key, value in derived.values.items():
        body = delete_key(body, key) if value is DELETE else set_value(body, key, value)
    for key, comment in derived.comments.items():
        body = set_comment(body, key, comment)
    return note(derived.parent) + header + body


def generated(repo: Path, table: Dict[str, Derived]) -> Dict[Path, str]:
    """Each derived config under ``repo`` and the text it should hold."""
    return {repo / path: render((repo / derived.parent).read_text(), derived) for path, derived in table.items()}


def out_of_date(repo: Path, table: Dict[str, Derived]) -> List[str]:
    """A message for each derived config under ``repo`` that differs from what ``render`` writes or
    is missing, and for each config that says it is generated but has no row in ``table``."""
    wanted = generated(repo, table)
    problems = [f"{path.relative_to(repo)} is out of date: run {COMMAND}"
                for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
    orphans = [path for path in sorted((repo / "configs").rglob("*.yaml"))
               if path not in wanted and path.read_text().startswith(f"# Generated by `{COMMAND}`")]
    return problems + [f"{path.relative_to(repo)} has no row in entrodrop/config/derived_configs.py: remove it"
                       for path in orphans]
