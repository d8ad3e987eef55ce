"""Check a recipe's config against the keys the recipe reads, before any compute.

A schema is a nested dict that mirrors the YAML: each leaf is a check, a function of the value
that returns why it is invalid (or None), and each ``Component()`` leaf is a ``_component_``
node whose arguments must bind to what it names. ``check_config`` returns every problem at
once - each missing key, each unknown key with the closest known one (a misspelt override
such as ``token_dropout.gama_max=0.5`` would otherwise be merged in and ignored), each invalid
value - and ``raise_problems`` makes them one error. A key that was renamed is reported with
its new name (``renamed``), so an old config says what to change rather than just "unknown".

Example:
    >>> from omegaconf import OmegaConf
    >>> schema = {"seed": integer(), "token_dropout": {"gamma_max": number_in(0, 1)}}
    >>> check_config(OmegaConf.create({"token_dropout": {"gama_max": 0.5}}), schema)
    ['missing key: seed', 'missing key: token_dropout.gamma_max', 'unknown key: token_dropout.gama_max (did you mean gamma_max?)']
    >>> check_config(OmegaConf.create({"seed": 0, "sede": 1}), {"seed": integer()}, renamed={"sede": "use seed"})
    ['unknown key: sede (renamed: use seed)']
"""

import difflib
import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

Check = Callable[[Any], Optional[str]]  # value -> why it is invalid, or None



# ---------------------------------------------------------------------------- value checks


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def anything() -> Check:
    return lambda value: None


def integer(minimum: Optional[int] = None) -> Check:
    """An int (not a bool), at least ``minimum``."""
    def check(value):
        if not _is_int(value):
            return "must be an integer"
        if minimum is not None and value < minimum:
            return "must be a positive integer" if minimum == 1 else f"must be >= {minimum}"
        return None
    return check


def number_in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Check:
    """A number in the interval; ``*_open`` excludes that end. Math notation in the message."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def check(value):
        if not _is_number(value):
            return f"must be a number in {interval}"
        inside = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        return None if inside else f"must be in {interval}"
    return check


def positive_number() -> Check:
    return lambda value: None if _is_number(value) and value > 0 else "must be a positive number"


def one_of(*choices: Any) -> Check:
    return lambda value: None if value in choices else f"must be one of {choices}"


def boolean() -> Check:
    return lambda value: None if isinstance(value, bool) else "must be True or False"


def string() -> Check:
    return lambda value: None if isinstance(value, str) and value else "must be a non-empty string"


def optional(check: Check) -> Check:
    """``check``, or null."""
    return lambda value: None if value is None else check(value)


def existing_dir(what: str, marker: str, how: str) -> Check:
    """A directory holding ``marker`` (a store's manifest, a checkpoint's config.json)."""
    def check(value):
        if not isinstance(value, str) or not value:
            return "must be a path"
        return None if (Path(value) / marker).is_file() else f"holds no {what} ({marker} missing): {how}"
    return check


# A problem with a path that is not there, as the checks here and the schemas' rules word it.
_MISSING_PATH = re.compile(r"[\w.]+=(\S+) (holds no|does not exist|is not a directory)")


def relative_paths_note(problems: Sequence[str]) -> List[str]:
    """One line when a path of ``problems`` that is not there is relative: relative paths are
    read from the working directory, which it names. The shipped configs' paths are relative to
    the repository root, so a run started in another folder finds none of its stores.

    Example:
        >>> relative_paths_note(["data.target_tokens=/data/target holds no store (manifest.json missing)"])
        []
    """
    relative = [m.group(1) for m in map(_MISSING_PATH.match, problems) if m and not os.path.isabs(m.group(1))]
    if not relative:
        return []
    return [f"Relative paths (such as {relative[0]}) are read from the working directory, {os.getcwd()}: run from "
            "the folder they are relative to (the repository root for the configs under configs/), or give "
            "absolute paths"]


def mapping(check: Check) -> Check:
    """A dict whose every value passes ``check`` (open keys, e.g. lm-eval task groups)."""
    def check_all(value):
        if not isinstance(value, Mapping):
            return "must be a mapping"
        bad = {k: why for k, why in ((k, check(v)) for k, v in value.items()) if why}
        return "; ".join(f"{k}: {why}" for k, why in bad.items()) or None
    return check_all


def list_of_strings() -> Check:
    def check(value):
        ok = isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)
        return None if ok else "must be a list of names"
    return check


@dataclass(frozen=True)
class Component:
    """A ``_component_`` node: what it names must import, and its other keys must be arguments
    of it. ``bound`` lists the arguments the recipe passes itself (the optimizer's params)."""

    bound: Sequence[str] = ()


# ---------------------------------------------------------------------------- the check


def _closest(name: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def _component_problems(node: Any, spec: Component, path: str) -> List[str]:
    # What config.instantiate uses.
    from torchtune.config._utils import _get_component_from_path

    if not isinstance(node, Mapping) or "_component_" not in node:
        return [f"{path}: must be a node with a _component_"]
    try:
        target = _get_component_from_path(node["_component_"])
    except Exception as e:  # torchtune raises InstantiationError with the import failure
        return [f"{path}._component_={node['_component_']}: cannot be imported ({e})"]
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    names = [n for n in params if n not in spec.bound]
    problems = [f"unknown key: {path}.{key}{_closest(key, names)} ({node['_component_']} takes {names})"
                for key in node if key != "_component_" and key not in params]
    required = [n for n, p in params.items() if p.default is p.empty and n not in spec.bound
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    problems += [f"missing key: {path}.{n} (an argument of {node['_component_']})" for n in required if n not in node]
    return problems


def _unknown(path: str, known: Sequence[str], renamed: Mapping[str, str]) -> str:
    key = path.rsplit(".", 1)[-1]
    if key.startswith("+"):  # Hydra's "add a key"; torchtune's overrides take the key as it is
        return (f"unknown key: {path} (drop the +: an override key=value sets a key whether or not the YAML "
                "has it)")
    hint = f" (renamed: {renamed[path]})" if path in renamed else _closest(key, known)
    return f"unknown key: {path}{hint}"


def whole_config_problem(cfg: Any) -> Optional[str]:
    """Why ``cfg`` is no config at all (empty, a list, keys that are not names), or None.

    Said once: checked key by key, such a config is every key of the schema missing.

    Example:
        >>> whole_config_problem(OmegaConf.create([1, 2]))
        'the config is a list, not a mapping of keys to values (key: value lines, as in the files under configs/)'
    """
    if not isinstance(cfg, Mapping):
        kind = "a list" if isinstance(cfg, Sequence) and not isinstance(cfg, str) else f"{cfg!r}"
        return f"the config is {kind}, not a mapping of keys to values (key: value lines, as in the files under configs/)"
    if not cfg:
        return "the config is empty (it holds no key): give a recipe's config, e.g. one under configs/"
    not_names = [key for key in cfg if not isinstance(key, str)]  # YAML reads `1:` as a number
    return f"the key {not_names[0]} is not a name (keys are names, such as seed)" if not_names else None


def check_config(cfg: DictConfig, schema: Mapping[str, Any], prefix: str = "",
                 renamed: Optional[Mapping[str, str]] = None) -> List[str]:
    """Every missing key, unknown key and invalid value of ``cfg`` against ``schema``.

    Values are read resolved (``${...}`` interpolations filled in); one that cannot be resolved
    is a problem too. ``renamed`` maps a dotted key that is no longer read to what replaces it.
    """
    renamed = renamed or {}
    problems: List[str] = []
    node = cfg if isinstance(cfg, Mapping) else {}
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        if key not in node:
            problems.append(f"missing key: {path}")
            continue
        try:
            value = node[key]
            value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except Exception as e:  # omegaconf's InterpolationResolutionError and kin
            problems.append(f"{path}: cannot be resolved ({e})")
            continue
        if isinstance(spec, Mapping):
            if isinstance(node[key], Mapping):
                problems += check_config(node[key], spec, f"{path}.", renamed)
            else:
                problems.append(f"{path}={value!r} must be a node with keys {list(spec)}")
        elif isinstance(spec, Component):
            problems += _component_problems(value, spec, path)
        else:
            why = spec(value)
            if why:
                problems.append(f"{path}={value} {why}")
    problems += [_unknown(f"{prefix}{key}", list(schema), renamed) for key in node if key not in schema]
    return problems




