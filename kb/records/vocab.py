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

# What each derived status means (kb.index.status derives them); `kb claims --help` and its empty-result note
# read this. `unverified` is real but transient: a check that has not run yet (a claim added or changed since
# the evidence was recorded) or whose last run was a harness error, so a corpus with evidence for every
# check it can run has none.
STATUS_MEANINGS: dict[str, str] = {
    "verified": "every check supports the statement",
    "refuted": "a check contradicts the statement",
    "inconclusive": "the checks disagree, tie, or do not reach the statement's numbers",
    "stale": "a cited source changed upstream since the claim was checked",
    "unverified": "a check has not run yet, or its last run was a harness error (not evidence)",
    "needs-hardware": "the deciding check or experiment needs a GPU this evidence does not cover",
    "review-only": "nothing executable decides it; the review reason says why",
}
assert set(STATUS_MEANINGS) == set(STATUSES), "every status has a meaning"
