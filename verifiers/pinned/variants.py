"""kb's variants of a pinned build: the pinned tree with named edits, built exactly as the pin is.

A claim about what a compile-time switch buys (the FA3 paper's pingpong ablation, for one) needs a build the
pin does not make: the pinned kernel with the switch turned the other way, or with kb's trace records in its
loop. A variant is a base revision of build.py's table and a list of edits, each naming a line of a pinned
file by number and by the sha256 of its text at the pinned commit (the pinned text is not copied into kb),
what to do there (replace it, or insert after it) and kb's own text, and why. Nothing else changes: units,
flags, cutlass commit and harness are the base revision's.

How it is built without touching the clone or build.py:

- `derive()` writes the edited blobs, the trees above them and a commit whose parent is the pin into a
  kb-owned bare repository under the build root (`variants.git`) that borrows the clone's objects through git
  alternates. Author, committer, dates and message are fixed, so the derived commit has the same SHA on every
  machine; it is recorded here (`Variant.sha`) and `derive()` refuses a result that differs.
- `build()` points KB_CLONE_FLASH_ATTENTION at that repository for the call and runs build.build on the
  variant's Revision (the base's, under the variant's name and the derived SHA), then adds to the manifest
  what the variant is: base revision and SHA, every edit (file, line, the line's sha256, action, kb's text,
  why). The manifest's `pinned_sources` says the sources are the pin with kb's edits.

Variants register in build.REVISIONS when this module is imported (the registry imports every verifier
module), as verifiers/pinned/larged.py does, so build.load() serves them. scripts/stage-pinned.sh does not
import this module: a variant is derived on the GPU host from the base's objects, which the packs carry.

`python -m verifiers.pinned.variants NAME [-j N]` builds one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from verifiers.pinned import build as pinned_build


@dataclasses.dataclass(frozen=True)
class Edit:
    """One change at one line of one pinned file, named by its number and the sha256 of its text at the base
    commit (the pinned text itself is not copied here): `replace` it with `text`, or `insert_after` it."""

    path: str
    line: int
    sha256: str
    action: Literal["replace", "insert_after"]
    text: str
    why: str


@dataclasses.dataclass(frozen=True)
class Variant:
    """A base revision of build.py's table with edits, and the commit they derive (checked by derive())."""

    name: str
    base: str
    edits: tuple[Edit, ...]
    sha: str
    about: str


_ML = "hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp"
# UseSchedulerBarrier's 16-bit branch (FP8 keeps the pinned rule).
NOSCHED = (Edit(_ML, 147, "c8bd9c08f6891c1a280c269d1aafd0a59afc631ce2f723645394f04130dd89ef", "replace",
                "                                             : false;  // kb variant: no warp-scheduler barrier",
                "UseSchedulerBarrier decides whether warp_scheduler_barrier_sync/arrive and mma_init's initial arrives "
                "compile in; false for 16-bit types removes the inter-warpgroup pingpong and nothing else"),)

_TRACE_HELPERS = """// kb trace instrumentation (kb's variant, verifiers/pinned/variants.py). With a buffer set by kb_trace_set
// (in the fp16 d128 unit) the first thread of each consumer warpgroup records, at named points of the
// steady-state mainloop, (clock64, event << 48 | smid << 32 | m_block) into its own slots: no atomics, no
// shared memory. Without a buffer nothing is written.
static __device__ unsigned long long* kb_trace_buf = nullptr;
static __device__ int kb_trace_ctas = 0;
static __device__ int kb_trace_tiles = 0;
static __device__ int kb_trace_events = 0;
__device__ __forceinline__ void kb_trace_record(int& k, int ev, int work_idx, int m_block) {
    if ((threadIdx.x % 128) != 0) { return; }
    unsigned long long* buf = kb_trace_buf;
    int const wg = int(threadIdx.x / 128) - 1;  // consumer warpgroup 0 or 1 (warpgroup 0 produces)
    if (buf == nullptr || wg < 0 || work_idx >= kb_trace_tiles || k >= kb_trace_events) { ++k; return; }
    unsigned long long const cta =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    if (cta >= (unsigned long long)kb_trace_ctas) { ++k; return; }
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    unsigned long long const slot = ((cta * 2 + wg) * kb_trace_tiles + work_idx) * kb_trace_events + k;
    buf[2 * slot] = clock64();
    buf[2 * slot + 1] = ((unsigned long long)ev << 48) | ((unsigned long long)smid << 32) | (unsigned int)m_block;
    ++k;
}"""


def _ev(line: int, sha: str, ev: int, what: str) -> Edit:
    return Edit(_ML, line, sha, "insert_after", f"            kb_trace_record(kb_k, {ev}, work_idx, m_block);  // kb: {what}",
                f"trace event {ev}: {what}")


# Events of the steady-state loop of CollectiveMainloopFwd::mma (the non-causal loop; lines at 3669b25).
TRACE_EVENTS = {0: "iteration start", 1: "K tile ready (consumer_wait on K returned)",
                2: "issue turn (warp_scheduler_barrier_sync returned)", 3: "QK and PV issued (scheduler arrive done)",
                4: "S ready (warpgroup_wait<1> returned)", 5: "softmax done (online_softmax returned)",
                6: "PV done (warpgroup_wait<0> returned)"}
TRACE = (
    Edit(_ML, 20, "46ce993853e784fef4405cc46a0fad6088de14649d0ec2e994d9cb332ea13fdf", "insert_after", _TRACE_HELPERS,
         "the trace buffer and the recording helper, inside namespace flash"),
    Edit(_ML, 676, "5380611f860185c68da82091b2a6d811a2c21ab4ee943981820003e32202f930", "insert_after",
         "        int kb_k = 0;  // kb: events this warpgroup recorded in this work tile", "the event counter of mma()"),
    _ev(760, "951406e908537923907bf92ce2a51a8fd7ebd3d45551a69775326f21abaa4a69", 0, TRACE_EVENTS[0]),
    _ev(762, "2835f9364a5508b822721c5cb5954a544207c4d4824eb17b235e3338f6128d66", 1, TRACE_EVENTS[1]),
    _ev(763, "0ab0d7c14b47c22e6166273477316e422057dbb67268899d12483d14b88db203", 2, TRACE_EVENTS[2]),
    _ev(768, "904f87a13e543ad56ee51154fba0addd115f4e8c1e600294de4932c99b775652", 3, TRACE_EVENTS[3]),
    _ev(769, "854b9b103b65aec63dd213c5621b2ef5d739689978e206110de616148046f965", 4, TRACE_EVENTS[4]),
    _ev(773, "8fe789524549aacd76c81a5f612f2faff9fd7c74fb967cc285865d24d60db2b5", 5, TRACE_EVENTS[5]),
    _ev(774, "2f218d49205458df9817a1d909ba18fdee23202bd047ef92913bc07db91ae75f", 6, TRACE_EVENTS[6]),
    Edit("hopper/flash_fwd_hdim128_fp16_sm90.cu", 9, "d10b36aa74a59bcf4a88185837f658afaf3646eff2bb16c3928d0e9335e945d2",
         "insert_after", """
// kb trace instrumentation: this unit's trace buffer (0 on success).
extern "C" int kb_trace_set(void* buf, int ctas, int tiles, int events) {
    if (cudaMemcpyToSymbol(flash::kb_trace_buf, &buf, sizeof(buf)) != cudaSuccess) { return 1; }
    if (cudaMemcpyToSymbol(flash::kb_trace_ctas, &ctas, sizeof(int)) != cudaSuccess) { return 4; }
    if (cudaMemcpyToSymbol(flash::kb_trace_tiles, &tiles, sizeof(int)) != cudaSuccess) { return 2; }
    if (cudaMemcpyToSymbol(flash::kb_trace_events, &events, sizeof(int)) != cudaSuccess) { return 3; }
    return 0;
}""", "the host setter of the trace buffer, in the one unit whose kernels are traced"),
)

VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant(name="fa3-2024-08-nosched", base="fa3-2024-08", edits=NOSCHED,
            about="FA3 hopper/ at 3669b25 without the warp-scheduler barrier (no pingpong between the two consumer "
                  "warpgroups) for 16-bit types; FP8 units keep the pinned rule",
            sha="be975fe6014d2de645401a76bc541f16499d5ad5"),
    Variant(name="fa3-2024-08-trace", base="fa3-2024-08", edits=TRACE,
            about="FA3 hopper/ at 3669b25 with kb's trace records in the forward mainloop's steady-state loop "
                  "(fp16 d128 unit's buffer); otherwise the pin",
            sha="f430850b8b8f2629b79bf6b392581cd7593e2ea9"),
    Variant(name="fa3-2024-08-nosched-trace", base="fa3-2024-08", edits=NOSCHED + TRACE,
            about="the two above together: the trace of a forward without the warp-scheduler barrier",
            sha="fb5247fe2c7d5c360f3301697a8057f074a334d6"),
)}

# Fixed identity and dates: the derived commit's SHA depends only on the base tree and the edits.
_GIT_ENV = {"GIT_AUTHOR_NAME": "kb", "GIT_AUTHOR_EMAIL": "kb@invalid", "GIT_AUTHOR_DATE": "1700000000 +0000",
            "GIT_COMMITTER_NAME": "kb", "GIT_COMMITTER_EMAIL": "kb@invalid", "GIT_COMMITTER_DATE": "1700000000 +0000"}


def _revision(v: Variant) -> pinned_build.Revision:
    return dataclasses.replace(pinned_build.revision(v.base), name=v.name, sha=v.sha)


for _v in VARIANTS.values():
    pinned_build.REVISIONS.setdefault(_v.name, _revision(_v))


def variant(name: str) -> Variant:
    """The named variant, or a KeyError listing the known ones."""
    if name not in VARIANTS:
        raise KeyError(f"no variant {name!r}; known: {', '.join(sorted(VARIANTS))}")
    return VARIANTS[name]


def _git(repo: Path, *args: str, data: bytes | None = None) -> str:
    res = subprocess.run(["git", f"--git-dir={repo}", *args], input=data, capture_output=True, timeout=120,
                         env={**os.environ, **_GIT_ENV})
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])}: {res.stderr.decode(errors='replace').strip()[:300]}")
    return res.stdout.decode().strip()


def _repo(clone: str) -> Path:
    """kb's bare repository under the build root, borrowing the clone's objects (alternates)."""
    clone_git = Path(clone) / ".git" if (Path(clone) / ".git").exists() else Path(clone)
    repo = pinned_build.build_root() / "variants.git"
    if not (repo / "objects").exists():
        repo.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, timeout=60)
    (repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (repo / "objects" / "info" / "alternates").write_text(f"{(clone_git / 'objects').resolve()}\n")
    return repo


def apply_edits(text: str, edits: list[Edit], path: str) -> str:
    """`text` with each edit of `path` applied, from the last line up; ValueError naming the edit whose line is
    missing or whose text does not hash as recorded (the base changed, or the edit is wrong)."""
    lines = text.split("\n")
    for e in sorted(edits, key=lambda e: e.line, reverse=True):
        if not 1 <= e.line <= len(lines):
            raise ValueError(f"{path}:{e.line}: no such line at the base commit ({len(lines)} lines)")
        got = hashlib.sha256(lines[e.line - 1].encode()).hexdigest()
        if got != e.sha256:
            raise ValueError(f"{path}:{e.line}: the line hashes {got[:16]}, not the recorded {e.sha256[:16]} ({e.why})")
        new = e.text.split("\n")
        lines[e.line - 1:e.line] = new if e.action == "replace" else [lines[e.line - 1], *new]
    return "\n".join(lines)


def _replace_in_tree(repo: Path, tree: str, parts: list[str], blob: str) -> str:
    """The SHA of `tree` with the file at `parts` replaced by `blob` (every tree above it rewritten)."""
    entries = _git(repo, "ls-tree", tree).splitlines()
    out, found = [], False
    for line in entries:
        meta, name = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if name == parts[0]:
            found = True
            sha = blob if len(parts) == 1 else _replace_in_tree(repo, sha, parts[1:], blob)
        out.append(f"{mode} {kind} {sha}\t{name}")
    if not found:
        raise FileNotFoundError(f"{'/'.join(parts)} is not in tree {tree[:12]}")
    # --missing: a GPU host holds only the blobs the builds read (scripts/stage-pinned.sh packs), not the rest
    return _git(repo, "mktree", "--missing", data=("\n".join(out) + "\n").encode())


def derive(v: Variant, clone: str) -> str:
    """Write the variant's commit into kb's repository; returns its SHA (RuntimeError if it is not `v.sha`)."""
    base = pinned_build.revision(v.base)
    repo = _repo(clone)
    tree = _git(repo, "rev-parse", f"{base.sha}^{{tree}}")
    by_path: dict[str, list[Edit]] = {}
    for e in v.edits:
        by_path.setdefault(e.path, []).append(e)
    for path, edits in sorted(by_path.items()):
        res = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob", f"{base.sha}:{path}"],
                             capture_output=True, timeout=60)  # the exact bytes (_git strips its output)
        if res.returncode != 0:
            raise FileNotFoundError(f"{path} at {base.sha[:12]}: {res.stderr.decode(errors='replace').strip()[:200]}")
        raw = res.stdout.decode()
        blob = _git(repo, "hash-object", "-w", "--stdin", data=apply_edits(raw, edits, path).encode())
        tree = _replace_in_tree(repo, tree, path.split("/"), blob)
    message = f"kb variant {v.name} of {v.base} ({base.sha})\n\n" + "".join(
        f"{e.path}: {e.why}\n" for e in v.edits)
    sha = _git(repo, "commit-tree", tree, "-p", base.sha, data=message.encode())
    if sha != v.sha:
        raise RuntimeError(f"{v.name}: the edits derive {sha}, not the recorded {v.sha} (base or edits changed?)")
    _git(repo, "update-ref", f"refs/variants/{v.name}", sha)
    return sha


def build(name: str, jobs: int = 2, log: Any = print) -> Path:
    """Derive and build (or find cached) the variant's library; its manifest says what was edited."""
    v = variant(name)
    clone, _ = pinned_build.pinned_clones()
    derive(v, clone)
    key = "KB_CLONE_FLASH_ATTENTION"
    before = os.environ.get(key)
    os.environ[key] = str(_repo(clone))
    try:
        out = pinned_build.build(name, jobs=jobs, log=log)
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
    manifest = json.loads((out / "manifest.json").read_text())
    base = pinned_build.revision(v.base)
    manifest["pinned_sources"] = f"the pin {v.base} ({base.sha}) with kb's edits (variant {v.name}); nothing else changed"
    manifest["variant"] = {"name": v.name, "base": v.base, "base_sha": base.sha, "derived_sha": v.sha, "about": v.about,
                           "edits": [{"path": e.path, "line": e.line, "line_sha256": e.sha256, "action": e.action,
                                      "text": e.text, "why": e.why} for e in v.edits]}
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, out / "manifest.json")
    return out


def unavailable(*names: str) -> str | None:
    """None when every named build (a pin or a variant) loads here, else why not; for a variant, the reason names
    the command that builds it (build.load's own hint names build.py's, which does not know variants)."""
    for name in names:
        try:
            pinned_build.load(name)
        except (FileNotFoundError, RuntimeError, OSError, KeyError) as e:
            why = str(e)
            if name in VARIANTS:
                why = why.replace(f"python -m verifiers.pinned.build --rev {name}", f"python -m verifiers.pinned.variants {name}")
            return why
    return None


def provenance(name: str) -> dict[str, Any]:
    """What a GPU run records about the variant build it used (build.provenance plus the edits)."""
    loaded = pinned_build.load(name)
    return {**pinned_build.provenance(name), "variant": loaded.manifest.get("variant")}


def main(argv: list[str] | None = None) -> int:
    """Command line: derive and build one variant (this table's, or one a module registers into it)."""
    # Run as `python -m`, this file is __main__, a second copy of the table; the modules that register variants
    # of their own (owners.py) write into the package's copy, so the command line reads that one.
    from verifiers.pinned import owners  # noqa: F401  (registers fa3-2024-08-owner)
    from verifiers.pinned import variants as table

    ap = argparse.ArgumentParser(prog="python -m verifiers.pinned.variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=sorted(table.VARIANTS))
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    ap.add_argument("--derive-only", action="store_true", help="write the derived commit and print its SHA")
    args = ap.parse_args(argv)
    try:
        if args.derive_only:
            clone, _ = pinned_build.pinned_clones()
            print(table.derive(table.variant(args.name), clone))
        else:
            table.build(args.name, args.jobs)
    except (KeyError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"{args.name}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
