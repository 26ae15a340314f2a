"""kb's variants of a pinned build: the pinned tree with named edits, built exactly as the pin is.

A claim about what a compile-time switch buys (the FA3 paper's pingpong ablation, for one) needs a build the
pin does not make: the pinned kernel with the switch turned the other way. A variant is a base revision of
build.py's table and a list of edits, each an exact text that must occur once in the named file at the pinned
commit, the text kb puts in its place, and why. Nothing else changes: units, flags, cutlass commit and harness
are the base revision's.

How it is built without touching the clone or build.py:

- `derive()` writes the edited blobs, the trees above them and a commit whose parent is the pin into a
  kb-owned bare repository under the build root (`variants.git`) that borrows the clone's objects through git
  alternates. Author, committer, dates and message are fixed, so the derived commit has the same SHA on every
  machine; it is recorded here (`Variant.sha`) and `derive()` refuses a result that differs.
- `build()` points KB_CLONE_FLASH_ATTENTION at that repository for the call and runs build.build on the
  variant's Revision (the base's, under the variant's name and the derived SHA), then adds to the manifest
  what the variant is: base revision and SHA, every edit (file, the replaced text's sha256, the new text,
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
from typing import Any

from verifiers.pinned import build as pinned_build


@dataclasses.dataclass(frozen=True)
class Edit:
    """One replacement in one pinned file: `old` must occur exactly once at the base commit."""

    path: str
    old: str
    new: str
    why: str


@dataclasses.dataclass(frozen=True)
class Variant:
    """A base revision of build.py's table with edits, and the commit they derive (checked by derive())."""

    name: str
    base: str
    edits: tuple[Edit, ...]
    sha: str
    about: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant(
        name="fa3-2024-08-nosched", base="fa3-2024-08",
        about="FA3 hopper/ at 3669b25 without the warp-scheduler barrier (no pingpong between the two consumer "
              "warpgroups) for 16-bit types; FP8 units keep the pinned rule",
        edits=(Edit(
            path="hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp",
            old="                                             : kHeadDim <= 128;",
            new="                                             : false;  // kb variant: no warp-scheduler barrier",
            why="UseSchedulerBarrier decides whether warp_scheduler_barrier_sync/arrive and mma_init's initial "
                "arrives compile in; false for 16-bit types removes the inter-warpgroup pingpong and nothing else"),),
        sha="56f70f7eedac74f5ec07fc888ef2cec028dbbdd2"),
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
    """`text` with each edit of `path` applied; ValueError when an edit's old text does not occur exactly once."""
    for e in edits:
        n = text.count(e.old)
        if n != 1:
            raise ValueError(f"{path}: the edit's old text occurs {n} times at the base commit (must be once): "
                             f"{e.old.strip()[:80]!r}")
        text = text.replace(e.old, e.new)
    return text


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
    return _git(repo, "mktree", data=("\n".join(out) + "\n").encode())


def derive(v: Variant, clone: str) -> str:
    """Write the variant's commit into kb's repository; returns its SHA (RuntimeError if it is not `v.sha`)."""
    base = pinned_build.revision(v.base)
    repo = _repo(clone)
    tree = _git(repo, "rev-parse", f"{base.sha}^{{tree}}")
    by_path: dict[str, list[Edit]] = {}
    for e in v.edits:
        by_path.setdefault(e.path, []).append(e)
    for path, edits in sorted(by_path.items()):
        # the exact bytes (_git strips its output)
        raw = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob", f"{base.sha}:{path}"],
                             capture_output=True, check=True, timeout=60).stdout.decode()
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
                           "edits": [{"path": e.path, "old_sha256": hashlib.sha256(e.old.encode()).hexdigest(),
                                      "new": e.new, "why": e.why} for e in v.edits]}
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, out / "manifest.json")
    return out


def provenance(name: str) -> dict[str, Any]:
    """What a GPU run records about the variant build it used (build.provenance plus the edits)."""
    loaded = pinned_build.load(name)
    return {**pinned_build.provenance(name), "variant": loaded.manifest.get("variant")}


def main(argv: list[str] | None = None) -> int:
    """Command line: derive and build one variant."""
    ap = argparse.ArgumentParser(prog="python -m verifiers.pinned.variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=sorted(VARIANTS))
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel nvcc processes (default 2)")
    ap.add_argument("--derive-only", action="store_true", help="write the derived commit and print its SHA")
    args = ap.parse_args(argv)
    try:
        if args.derive_only:
            clone, _ = pinned_build.pinned_clones()
            print(derive(variant(args.name), clone))
        else:
            build(args.name, args.jobs)
    except (KeyError, FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"{args.name}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
