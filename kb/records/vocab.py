"""Controlled vocabularies, defined once and validated everywhere."""

from __future__ import annotations

from typing import Literal, get_args

Generation = Literal["FA1", "FA2", "FA3", "FA4", "cross", "large-d", "rubin", "hardware"]
Phase = Literal["forward", "backward", "both", "n/a"]
Label = Literal["mathematical", "source-backed", "paper-reported", "inferred", "measured"]
SourceKind = Literal["paper", "repo", "notes", "web", "hardware", "private"]
Verdict = Literal["supports", "refutes", "inconclusive", "error", "skipped"]
StatusName = Literal[
    "verified",
    "refuted",
    "inconclusive",
    "stale",
    "unverified",
    "needs-hardware",
    "review-only",
]
VerifierKind = Literal[
    "cpu-check",
    "source-check",
    "pinned-code",
    "gpu-kernel-run",
    "gpu-profile",
    "gpu-bitwise-repeat",
    "gpu-benchmark",
]

TOPICS: tuple[str, ...] = (
    "online-softmax", "tiling", "io-complexity", "memory", "recomputation",
    "backward-math", "determinism", "atomics", "reduction-order",
    "launch-geometry", "tile-shape", "shared-memory", "registers", "occupancy",
    "warp-specialization", "pipelining", "async-copy", "tensor-cores",
    "causal-masking", "dropout", "gqa", "varlen", "split-kv", "scheduling",
    "low-precision", "exp-emulation", "throughput", "hardware", "api",
    "numerics", "kv-cache", "inference", "compilation", "tmem", "cluster",
    "history", "provenance", "profiling",
)  # fmt: skip

GENERATIONS: tuple[str, ...] = get_args(Generation)
PHASES: tuple[str, ...] = get_args(Phase)
LABELS: tuple[str, ...] = get_args(Label)
STATUSES: tuple[str, ...] = get_args(StatusName)
VERDICTS: tuple[str, ...] = get_args(Verdict)
VERIFIER_KINDS: tuple[str, ...] = get_args(VerifierKind)
