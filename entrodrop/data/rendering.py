"""A row of a ``datasets`` source as a sample, and the hashes that compare samples and problems.

``render`` gives a row's text (a ``column``, a ``template`` over columns, or a
``conversation_column``'s turns as plain text), or its turns for the tokenizer's chat template;
None for a row whose column is null or empty. ``sample_hash`` finds exact duplicates,
``problem_hash`` the rows of one problem (its ``problem_key``, ``normalised``). The rules, and
how the selection uses the hashes, are in the ``entrodrop.data.store_plans`` docstring.
"""

import hashlib
import json
import string
from collections import Counter
from typing import Any, List, Mapping, Optional, Tuple, Union

from entrodrop.errors import SourceError

STYLES = {"openai": ("role", "content"), "sharegpt": ("from", "value")}
# sharegpt speakers -> torchtune's message roles (torchtune's ShareGPTToMessages reads the same)
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant"}
# The roles each style knows: torchtune's message roles (openai), the speakers above (sharegpt).
KNOWN_ROLES = {"openai": ("system", "user", "assistant", "ipython", "tool"), "sharegpt": tuple(SHAREGPT_ROLES)}
USER_ROLES = ("user", "human")
UNKNOWN_ROLES = ("drop", "keep", "error")
FIRST_USER_TURN = "first_user_turn"  # problem_key: a row's problem is the text of its first user turn
Rendered = Union[str, List[Tuple[str, str]]]  # a text, or (role, text) turns for the chat template


def template_fields(template: str) -> List[str]:
    """The column names a ``str.format`` template reads.

    Example:
        >>> template_fields("{problem}\\n\\n{solution}")
        ['problem', 'solution']
    """
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def columns_read(entry: Mapping[str, Any]) -> List[str]:
    """The columns a rendering reads."""
    if entry["column"]:
        return [entry["column"]]
    if entry["template"]:
        return list(dict.fromkeys(template_fields(entry["template"])))  # a field may appear twice
    return [entry["conversation_column"]]


def problem_column(entry: Mapping[str, Any]) -> Optional[str]:
    """The column ``problem_key`` names (None: none, or ``first_user_turn``, read off the turns)."""
    return None if entry["problem_key"] in (None, FIRST_USER_TURN) else entry["problem_key"]


def columns_needed(entry: Mapping[str, Any]) -> List[str]:
    """The columns the rendering and the problem key read."""
    return list(dict.fromkeys(columns_read(entry) + [c for c in [problem_column(entry)] if c]))


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list)) and not (value.strip() if isinstance(value, str) else value))


def _turn_problem(turn: Any, k: int, entry: Mapping[str, Any], where: str) -> str:
    """Why turn ``k`` cannot be read: its text is null (or missing), or its keys are another style's."""
    column, style = entry["conversation_column"], entry["conversation_style"]
    role_key, text_key = STYLES[style]
    if isinstance(turn, Mapping) and turn.get(role_key) is not None:
        return (f"{where}: turn {k} of {column!r} ({role_key} {turn[role_key]!r}) has a null {text_key!r} (or none): "
                f"every turn needs its text; fix or drop the row")
    keys = sorted(k for k, v in turn.items() if v is not None) if isinstance(turn, Mapping) else type(turn).__name__
    return (f"{where}: turn {k} of {column!r} has {keys}, not {role_key!r} and {text_key!r} (conversation_style: "
            f"{style}; the other style reads "
            f"{' and '.join(repr(k) for s, v in STYLES.items() if s != style for k in v)})")


def render(row: Mapping[str, Any], entry: Mapping[str, Any], where: str,
           unknown_roles: Optional[Counter] = None) -> Optional[Rendered]:
    """A row as a sample: its text (or turns, with ``chat_template``); None when a column it
    reads is null or empty, or every turn was left out.

    Args:
        unknown_roles: counts, by role, the turns whose role the style does not know.

    Raises:
        SourceError: a column that holds no text, a turn without its role or text key, or a
            role the style does not know under ``unknown_roles: error``.

    Example:
        >>> entry = {"column": None, "template": None, "conversation_column": "messages",
        ...          "conversation_style": "openai", "chat_template": False, "unknown_roles": "drop"}
        >>> render({"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}, entry, "x")
        '1+1?\\n\\n2'
    """
    if entry["column"] or entry["template"]:
        values = {c: row[c] for c in columns_read(entry)}
        if any(_empty(v) for v in values.values()):
            return None
        bad = [c for c, v in values.items() if not isinstance(v, str)]
        if bad:
            raise SourceError(f"{where}: column {bad[0]!r} holds {type(values[bad[0]]).__name__}, not text: name a "
                              "text column, or conversation_column for a list of turns")
        return values[entry["column"]] if entry["column"] else entry["template"].format(**values)
    turns = row[entry["conversation_column"]]
    if _empty(turns):
        return None
    style = entry["conversation_style"]
    role_key, text_key = STYLES[style]
    if not isinstance(turns, list):
        raise SourceError(f"{where}: {entry['conversation_column']!r} holds {type(turns).__name__}, not a list of turns")
    rendered = []
    for k, turn in enumerate(turns):
        # Arrow gives a turn the keys of every turn of the column: a key it lacks is None there.
        if not isinstance(turn, Mapping) or turn.get(role_key) is None or turn.get(text_key) is None:
            raise SourceError(_turn_problem(turn, k, entry, where))
        role = turn[role_key]
        if role not in KNOWN_ROLES[style]:
            if entry["unknown_roles"] == "error":
                raise SourceError(f"{where}: turn {k} of {entry['conversation_column']!r} has the role {role!r}, which "
                                  f"conversation_style {style} does not know ({', '.join(KNOWN_ROLES[style])}): set "
                                  "unknown_roles: drop to leave such turns out, or keep to keep them")
            if unknown_roles is not None:
                unknown_roles[role] += 1
            if entry["unknown_roles"] == "drop":
                continue
        rendered.append((role, turn[text_key]))
    if not rendered:
        return None
    if entry["chat_template"]:
        return [(SHAREGPT_ROLES.get(role, role), text) for role, text in rendered]
    return "\n\n".join(text for _, text in rendered)


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def sample_hash(sample: Rendered) -> int:
    """64 bits of a rendered sample, for finding exact duplicates."""
    return _hash64(sample.encode("utf-8") if isinstance(sample, str) else json.dumps(sample).encode("utf-8"))


def normalised(text: str) -> str:
    """A problem's text as problems are compared: whitespace runs as one space, ends stripped, case folded.

    Example:
        >>> normalised("  Find  x:\\n 2X = 4 ") == normalised("find x: 2x = 4")
        True
    """
    return " ".join(text.split()).casefold()


def problem_text(row: Mapping[str, Any], entry: Mapping[str, Any]) -> Optional[str]:
    """The ``normalised`` text of a row's ``problem_key`` (its column, or its first user turn), or
    None: no key set, or the row's value is null, empty or not text."""
    key = entry["problem_key"]
    if key is None:
        return None
    if key == FIRST_USER_TURN:
        role_key, text_key = STYLES[entry["conversation_style"]]
        turns = row[entry["conversation_column"]] or []
        value = next((t.get(text_key) for t in turns if isinstance(t, Mapping) and t.get(role_key) in USER_ROLES), None)
    else:
        value = row[key]
    return normalised(value) if isinstance(value, str) and value.strip() else None


def problem_hash(row: Mapping[str, Any], entry: Mapping[str, Any], row_hash: int) -> Tuple[int, bool]:
    """64 bits of the row's problem, and whether the row has a problem key: a row without one
    (``problem_key: null``, or a null value) is its own problem (its ``row_hash``)."""
    text = problem_text(row, entry)
    return (row_hash, False) if text is None else (_hash64(b"problem\0" + text.encode("utf-8")), True)
