"""What a training run's stores are, not where they are: checked at start-up and on resume.

A store's identity is its manifest's key (the fingerprints of the tokenizer, corpus and model it
was computed from, and ``max_seq_len``), its counts, and a hash of its table (``samples.npy``:
each sample's length and token hash, so the hash tells the token ids apart). Two paths holding
the same identity hold the same data; one path, from another working directory or after a new
tokenize run, may hold another.

At start-up (``check_training_stores``, on the identities of the stores as they were opened,
``entrodrop.data.training_stores``): each token store was made with the run's tokenizer, and the
target, general and validation stores are three stores. The identities go into each checkpoint;
a resume compares them (``store_changes``), so a store that moved resumes and another store under
the same path is refused.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from omegaconf import OmegaConf

from entrodrop.data.fingerprints import fingerprint_tokenizer, fingerprint_vocabulary
from entrodrop.data.sample_store import MANIFEST, SAMPLES, SampleStore, table_digest
from entrodrop.errors import CacheMismatchError, ConfigError

# The config keys of a training run's stores, token stores first; the tokenizer check reads these.
TOKEN_STORES = ("data.target_tokens", "data.general_tokens", "evaluation.validation.target_tokens")
ENTROPY_CACHES = ("data.target_entropy", "evaluation.validation.target_entropy")
# Why two of the token stores must differ, by pair (the second is the one to change).
_SAME_STORE = {
    ("data.target_tokens", "data.general_tokens"):
        "the general replay, which token dropout never perturbs, would be the target data itself; set "
        "data.general_tokens to the general corpus's token store",
    ("data.target_tokens", "evaluation.validation.target_tokens"):
        "validation would score the data the run trains on; set evaluation.validation.target_tokens to the held-out "
        "store (a corpus's validation_store_dir in the tokenize config)",
    ("data.general_tokens", "evaluation.validation.target_tokens"):
        "validation would score the general data the run trains on; set evaluation.validation.target_tokens to the "
        "held-out target store (a corpus's validation_store_dir in the tokenize config)",
}


def training_stores(cfg) -> Dict[str, Optional[str]]:
    """Each store key of a training config (``TOKEN_STORES``, ``ENTROPY_CACHES``) and its path (None: not read)."""
    paths = {key: OmegaConf.select(cfg, key, throw_on_missing=True) for key in TOKEN_STORES + ENTROPY_CACHES}
    return {key: None if path is None else str(path) for key, path in paths.items()}


def _manifest(store_dir: str) -> Optional[Dict[str, Any]]:
    path = Path(store_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def store_identity(store_dir: Optional[str]) -> Optional[Dict[str, Any]]:
    """What the store at ``store_dir`` holds, as plain values: ``kind``, ``key``, ``num_samples``,
    ``num_tokens`` and ``table`` (the first 16 hex digits of the sha256 of its ``samples.npy``);
    None where there is no store (the reader that opens it names why).

    Example:
        >>> store_identity("/nonexistent/store") is None
        True
    """
    manifest = _manifest(store_dir) if store_dir else None
    if manifest is None:
        return None
    table = Path(store_dir) / SAMPLES
    return _identity(manifest, table_digest(table.read_bytes()) if table.is_file() else None)


def _identity(manifest: Mapping[str, Any], digest: Optional[str]) -> Dict[str, Any]:
    return {"kind": manifest["kind"], "key": manifest["key"], "num_samples": manifest["num_samples"],
            "num_tokens": manifest.get("num_tokens"), "table": digest}


def opened_identities(stores: Mapping[str, Optional[SampleStore]]) -> Dict[str, Dict[str, Any]]:
    """``store_identities`` of stores already open, from what opening them read (no file read again)."""
    return {key: {"path": str(store.dir.resolve()) if store else None,
                  "identity": _identity(store.manifest, store.table_digest) if store else None}
            for key, store in stores.items()}


def store_identities(stores: Mapping[str, Optional[str]]) -> Dict[str, Dict[str, Any]]:
    """``{key: {"path": resolved path or None, "identity": store_identity}}`` for ``training_stores``:
    what a checkpoint keeps, and what a resume compares with it."""
    return {key: {"path": str(Path(path).resolve()) if path else None, "identity": store_identity(path)}
            for key, path in stores.items()}


def tokenizer_problems(identities: Mapping[str, Mapping[str, Any]], stores: Mapping[str, Optional[str]],
                       tokenizer_cfg: Mapping[str, Any]) -> List[str]:
    """One line for each token store made with another tokenizer than ``tokenizer_cfg``: the
    vocabulary fingerprints (``fingerprint_vocabulary``) compared; a store whose key has none
    compares the fingerprint of the whole tokenizer config it was made with."""
    problems, now = [], {}
    for key in TOKEN_STORES:
        identity = identities[key]["identity"]
        if identity is None:
            continue
        field = "vocabulary" if "vocabulary" in identity["key"] else "tokenizer"
        if field not in now:
            now[field] = (fingerprint_vocabulary if field == "vocabulary" else fingerprint_tokenizer)(dict(tokenizer_cfg))
        if identity["key"][field] != now[field]:
            fix = ("set tokenizer to the one the store was made with" if field == "vocabulary" else
                   "set tokenizer to the tokenize config's, every key as it was (this store's manifest records the "
                   "fingerprint of the whole tokenizer config)")
            problems.append(f"{key}={stores[key]} was tokenized with another tokenizer ({field} fingerprint "
                            f"{identity['key'][field]}) than this run's tokenizer ({now[field]}): tokenize it again "
                            f"with this tokenizer (recipes/tokenize_corpus.py into a new store_dir), or {fix}")
    return problems


def same_store_problems(identities: Mapping[str, Mapping[str, Any]], stores: Mapping[str, Optional[str]]) -> List[str]:
    """One line for each pair of ``TOKEN_STORES`` that are one store: one path, or two paths
    holding the same samples (the same identity); the line says why that is wrong."""
    problems = []
    for (a, b), why in _SAME_STORE.items():
        if stores[a] is None or stores[b] is None:
            continue
        same_path = identities[a]["path"] == identities[b]["path"]
        same = identities[a]["identity"] is not None and identities[a]["identity"] == identities[b]["identity"]
        if same_path or same:
            where = stores[a] if same_path else f"{stores[a]} and {stores[b]} hold the same samples"
            problems.append(f"{b} and {a} are the same token store ({where}): {why}")
    return problems


def check_training_stores(identities: Dict[str, Any], stores: Mapping[str, Optional[str]],
                          tokenizer_cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """Refuse token stores of another tokenizer than the run's, and one store given for two of
    the target, general and validation stores (``stores``: key -> path), by their ``identities``
    (``opened_identities``, or ``store_identities`` of the paths); returns ``identities``, for the
    checkpoints.

    Raises:
        CacheMismatchError: a token store of another tokenizer (each named with both fingerprints).
        ConfigError: two of the token stores are one store.
    """
    problems = same_store_problems(identities, stores)
    if problems:
        raise ConfigError("\n".join(problems))
    problems = tokenizer_problems(identities, stores, tokenizer_cfg)
    if problems:
        raise CacheMismatchError("\n".join(problems))
    return identities


def _under(key: str, prefixes: Sequence[str]) -> bool:
    parts = key.split(".")
    return any(".".join(parts[:n]) in prefixes for n in range(1, len(parts) + 1))


def _what_differs(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    fields = [f"key.{f}: {saved['key'].get(f)} then, {now['key'].get(f)} now"
              for f in sorted(set(saved["key"]) | set(now["key"])) if saved["key"].get(f) != now["key"].get(f)]
    fields += [f"{f}: {saved[f]} then, {now[f]} now" for f in ("kind", "num_samples", "num_tokens") if saved[f] != now[f]]
    if saved["table"] != now["table"]:
        fields.append(f"its samples' token ids (table {saved['table']} then, {now['table']} now)")
    return "; ".join(fields)


def store_changes(saved: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]],
                  may_change: Sequence[str]) -> List[str]:
    """One line for each store of a checkpoint (``saved``, ``store_identities`` at its run's
    start) that is not the store the config names now (``current``), but for keys under
    ``may_change``; a store that moved is the same store. A store not on disk now is skipped: its
    reader refuses it at start-up."""
    problems = []
    for key, then in saved.items():
        now = current.get(key, {"path": None, "identity": None})
        if _under(key, may_change):
            continue
        if now["path"] is None and then["path"] is not None:
            problems.append(f"{key}: the checkpoint trained on the store then at {then['path']}, now {key} is null: "
                            f"set {key} to that store")
        elif then["path"] is None and now["path"] is not None:
            problems.append(f"{key}: the checkpoint trained without one, now {key}={now['path']}: set {key} to null")
        elif then["identity"] is not None and now["identity"] is not None and then["identity"] != now["identity"]:
            problems.append(f"{key}={now['path']} is another store than the one the checkpoint trained on (then at "
                            f"{then['path']}): {_what_differs(then['identity'], now['identity'])}; set {key} to the "
                            "store the checkpoint trained on")
    return problems


def check_evaluation_stores(trained: Optional[Mapping[str, Mapping[str, Any]]], tokens: str, entropy: str,
                            tokenizer_cfg: Mapping[str, Any], trained_with: str) -> None:
    """What training checks of its validation stores, for an offline evaluation of a run's
    checkpoints: the held-out token store ``tokens`` was made with ``tokenizer_cfg``, and, where
    ``trained`` holds the identities of the stores the run trained with (a checkpoint's
    ``"stores"``; None where it saved none), it is neither of its training stores, and the entropy
    cache ``entropy`` was computed by the model that computed the run's. ``trained_with``: the
    checkpoint that kept ``trained``, for the messages. Manifests and tables only.

    Raises:
        ConfigError: the validation store is one of the run's training stores.
        CacheMismatchError: a store of another tokenizer, or a cache of another model.
    """
    key = "evaluation.validation.target_tokens"
    now = store_identities({key: tokens})[key]
    identities = {k: {"path": None, "identity": None} for k in TOKEN_STORES}
    identities.update({k: v for k, v in (trained or {}).items() if k in TOKEN_STORES})
    identities[key] = now
    stores = {k: identities[k]["path"] for k in TOKEN_STORES}
    problems = [f"{p} (the stores {trained_with} was trained with)" for p in same_store_problems(identities, stores)
                if p.startswith(key)]
    if problems:
        raise ConfigError("\n".join(problems))
    problems = tokenizer_problems({k: v if k == key else {"identity": None} for k, v in identities.items()},
                                  stores, tokenizer_cfg)
    if problems:
        raise CacheMismatchError("\n".join(problems))
    cached = store_identity(entropy)
    models = {(v["identity"] or {}).get("key", {}).get("model") for k, v in (trained or {}).items() if k in ENTROPY_CACHES}
    models.discard(None)
    if cached is not None and models and cached["key"].get("model") not in models:
        raise CacheMismatchError(
            f"the entropy cache {entropy} was computed by another model (fingerprint {cached['key'].get('model')}) than "
            f"the entropy caches {trained_with} was trained with ({', '.join(sorted(models))}): compute it with the "
            "run's base model (recipes/precompute_entropy.py, its checkpointer.checkpoint_dir)")
