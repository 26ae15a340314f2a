"""The verifier registry: ids, kinds, requirements, parameters and code hashes.

Verifier modules live in a project's `verifiers/` directory (a Python package)
and register with the `verifier` decorator; `load_verifiers` is handed that
directory, so kb never imports a package above itself by name. Importing them
must not import torch: the heavy imports happen inside the functions, in the
worker process that runs them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kb.records.vocab import VerifierKind
from kb.verify.codehash import CodeHasher


class Params(BaseModel):
    """Base for verifier parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Requirements:
    """What a machine must have for a verifier to run there."""

    cuda: bool = False
    min_cc: int | None = None  # compute capability as 80, 90, 100
    max_cc: int | None = None
    packages: tuple[str, ...] = ()
    min_gpu_memory_gb: float = 0.0
    git_source: bool = False  # needs a local clone of the anchored repository
    online_fallback: bool = False  # ...or, with `kb verify --online`, the file fetched from GitHub
    tools: tuple[str, ...] = ()  # executables, e.g. nvcc, cuobjdump (found by kb.hw.find_tool)

    def describe(self) -> str:
        """Human text such as 'CUDA sm_90..sm_90, package flash_attn'."""
        parts = []
        if self.cuda:
            cc = "CUDA"
            if self.min_cc is not None or self.max_cc is not None:
                lo = f"sm_{self.min_cc}" if self.min_cc else ""
                hi = f"sm_{self.max_cc}" if self.max_cc else ""
                cc += f" {lo}" if lo == hi else f" {lo or 'any'}..{hi or 'newer'}"
            parts.append(cc)
        parts += [f"package {p}" for p in self.packages]
        parts += [f"tool {t}" for t in self.tools]
        if self.git_source:
            parts.append("a local clone of the cited repository")
        return ", ".join(parts) or "nothing"


@dataclass
class Outcome:
    """What a verifier returns: measurements, and optionally its own verdict."""

    measurements: dict[str, tuple[Any, str]] = field(default_factory=dict)
    verdict: str | None = None
    reason: str | None = None
    log: str = ""
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What a verifier may consult besides its parameters."""

    claim: dict[str, Any]
    expect: dict[str, Any]
    sources: dict[str, dict[str, Any]]
    clones: dict[str, str]
    hardware: dict[str, dict[str, float]]


@dataclass(frozen=True)
class VerifierSpec:
    """One registered verifier."""

    id: str
    kind: VerifierKind
    func: Callable[[Any, Context], Outcome]
    params: type[Params]
    requires: Requirements
    timeout_s: float
    version: str | None
    doc: str
    # True: the verifier returns its own verdict (Outcome.verdict), which may be stricter than its
    # expectation, never more lenient; False: the worker judges its measurements; None: not declared
    # (kb.verify.expect.decides_own_verdict reads it from the verifier's code).
    own_verdict: bool | None = None

    @property
    def is_gpu(self) -> bool:
        """Whether this verifier needs a GPU."""
        return self.requires.cuda

    def code_hash(self) -> str:
        """Hash of the verifier's code (or its pinned version): old evidence goes stale when it changes.

        Covers the verifier function and everything of the verifier package it
        uses, transitively (kb.verify.codehash): a fix in a helper invalidates
        evidence made with the old helper; a comment edit or a module move does not.
        """
        if self.version:
            return f"v:{self.version}"
        mod = self.func.__module__
        key = (mod, self.func.__qualname__)
        # The runner's lanes are threads, and CPython 3.11's ast.parse is not safe to run in two threads at once
        # ("AST constructor recursion depth mismatch"): hashes are computed one at a time.
        with _HASH_LOCK:
            if key not in _HASHES:
                _HASHES[key] = _hasher(mod.split(".")[0]).hash_function(*key)
            return _HASHES[key]


def requirements_for(spec: VerifierSpec, params: dict[str, Any]) -> Requirements:
    """A check's requirements: the verifier's, narrowed by its parameters.

    GPU checks may name the architecture they are about (`min_cc`/`max_cc`, e.g.
    100 for Blackwell) and the implementation (`impl: fa4` needs flash_attn).
    """
    req = spec.requires
    if not req.cuda:
        return req
    pkgs = req.packages + (("flash_attn",) if params.get("impl") == "fa4" else ())
    # Read through the verifier's params model, so a verifier can default the architecture from its other
    # parameters (a check on kb's sm_90 build of a pin is about sm_90 unless it says otherwise).
    try:
        parsed: Any = spec.params.model_validate(params)
    except ValueError:
        parsed = None

    def given(name: str, default: int | None) -> int | None:
        value = getattr(parsed, name, None) if parsed is not None else params.get(name)
        return default if value is None else value

    return Requirements(
        cuda=True,
        min_cc=given("min_cc", req.min_cc),
        max_cc=given("max_cc", req.max_cc),
        packages=pkgs,
        min_gpu_memory_gb=req.min_gpu_memory_gb,
        git_source=req.git_source,
        online_fallback=req.online_fallback,
        tools=req.tools,
    )


_HASHES: dict[tuple[str, str], str] = {}
_HASH_LOCK = threading.Lock()
_HASHERS: dict[str, CodeHasher] = {}


def _hasher(package: str) -> CodeHasher:
    if package not in _HASHERS:
        _HASHERS[package] = CodeHasher(package)
    return _HASHERS[package]


_REGISTRY: dict[str, VerifierSpec] = {}


def verifier(
    id: str,
    kind: VerifierKind,
    params: type[Params],
    requires: Requirements | None = None,
    timeout_s: float = 60.0,
    version: str | None = None,
    own_verdict: bool | None = None,
) -> Callable[[Callable[[Any, Context], Outcome]], Callable[[Any, Context], Outcome]]:
    """Register a function as the verifier `id`.

    `own_verdict=True` declares that the function may return its own verdict (Outcome.verdict)
    rather than leave it to the expectation; stored verdicts are re-derived accordingly.
    """

    def wrap(func: Callable[[Any, Context], Outcome]) -> Callable[[Any, Context], Outcome]:
        if id in _REGISTRY and _REGISTRY[id].func.__qualname__ != func.__qualname__:
            raise RuntimeError(f"verifier id {id!r} registered twice")
        _REGISTRY[id] = VerifierSpec(
            id, kind, func, params, requires or Requirements(), timeout_s, version, inspect.getdoc(func) or "",
            own_verdict,
        )
        return func

    return wrap


_LOADED_FROM: list[Path] = []


def load_verifiers(directory: Path | None) -> dict[str, VerifierSpec]:
    """Import every module of the verifier package at `directory` and return the registry.

    The directory's parent goes first on `sys.path`, so a project binds to the
    verifiers beside its claims even when another package of that name is
    installed. One verifier package per process: later calls return the
    registry already loaded. None (no verifier package anywhere) gives an
    empty registry, so every check reports an unknown verifier.
    """
    if not _LOADED_FROM and directory is not None:
        directory = Path(directory).resolve()
        if not (directory / "__init__.py").is_file():
            raise FileNotFoundError(f"{directory} is not a verifier package (no __init__.py)")
        parent = str(directory.parent)
        if parent in sys.path:
            sys.path.remove(parent)
        sys.path.insert(0, parent)
        pkg = importlib.import_module(directory.name)
        # Verifier modules live in subpackages by kind of evidence (cpu/, source/, pinned/, gpu/).
        for mod in pkgutil.walk_packages(pkg.__path__, prefix=f"{directory.name}."):
            # `*_child` modules are programs a verifier starts in a sandboxed interpreter (they may import
            # torch or the pinned code at the top), not verifier modules: the scan leaves them alone.
            if not mod.name.rpartition(".")[2].endswith("_child"):
                importlib.import_module(mod.name)
        _LOADED_FROM.append(directory)
    return _REGISTRY
