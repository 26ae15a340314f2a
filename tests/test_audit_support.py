"""Builders for the audit tests: real git repositories with drift, and a kb project citing them.

The code repository has a pin commit and a head commit that, between them,
leave one cited span alone, move one, edit one, rename one file, delete one
file, move a function to another file, and delete a file whose symbol lives
on elsewhere. The notes repository edits one section and drops another.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils
import yaml

from kb.config import Config, load_config
from kb.index.store import open_index
from kb.pinned.notes import find_section, lines_sha256


def git(repo: Path, *args: str) -> str:
    """Run git in repo (fixed identity and dates, so runs are reproducible)."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "PATH": "/usr/bin:/bin:/usr/local/bin",
           "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit_tree(repo: Path, files: dict[str, str | None], message: str) -> str:
    """Write (or with None, delete) files, commit, return the SHA."""
    for rel, text in files.items():
        p = repo / rel
        if text is None:
            if p.exists():
                git(repo, "rm", "-q", rel)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return path


def _filler(tag: str, n: int) -> list[str]:
    return [f"// {tag} filler line {i}: nothing cited here" for i in range(n)]


KERNEL_PIN = "\n".join([
    "// kernel.cu: header line one",          # 1
    "#include <cuda.h>",                       # 2
    "#define TILE 128",                        # 3
    *_filler("kernel-a", 6),                   # 4-9
    "__device__ void online_softmax() {",      # 10  (moved)
    "    m = max(m, x);",                      # 11
    "}",                                       # 12
    *_filler("kernel-b", 7),                   # 13-19
    "    atomicAdd(&dq_accum[i], dq);",        # 20  (edited)
    "    __syncthreads();",                    # 21
    *_filler("kernel-c", 4),                   # 22-25
]) + "\n"

KERNEL_HEAD = "\n".join([
    "// kernel.cu: header line one",
    "#include <cuda.h>",
    "#define TILE 128",
    "// a new comment pushes the softmax block down",
    "// and another one",
    *_filler("kernel-a", 6),
    "__device__ void online_softmax() {",      # now 12-14
    "    m = max(m, x);",
    "}",
    *_filler("kernel-b", 7),
    "    dq_accum_split[blockIdx.y][i] = dq;",  # edited
    "    __syncthreads();",
    *_filler("kernel-c", 4),
]) + "\n"

HELPER_PIN = "\n".join([*_filler("helper", 4),
                        "void reduce_partials(float* out) {",   # 5-7
                        "    out[0] += out[1];",
                        "}",
                        *_filler("helper-tail", 4)]) + "\n"
HELPER_HEAD = "\n".join([*_filler("helper", 4), *_filler("helper-tail", 4)]) + "\n"
REDUCE_HEAD = "\n".join(["// util/reduce.cu: new home of the reduction",
                         "void reduce_partials(float* out) {",
                         "    out[0] += out[1];",
                         "}"]) + "\n"
RENAMED = "\n".join(["// old_name.h", "struct Params {", "    int seqlen_q;", "    int seqlen_k;", "};", *_filler("params", 8)]) + "\n"
GONE = "\n".join(["// gone.cu", "int legacy_path() { return 1; }", *_filler("gone", 3)]) + "\n"
SCHED_PIN = "\n".join(["// sched.cu", "int tile_scheduler_next(int i) {", "    return i + 1;", "}", *_filler("sched", 6)]) + "\n"
SCHED_ELSEWHERE = "\n".join(["// scheduler/v2.cu: rewritten", "int tile_scheduler_next(int i) {",
                             "    return i + gridDim.x;", "}"]) + "\n"
UNTOUCHED = "\n".join(["// untouched.cu", "int stays_put = 1;", "int also = 2;"]) + "\n"

NOTE_PIN = """# Notes

## Alpha

The alpha section is left alone.

## Beta

Beta says dQ is accumulated with atomicAdd.

## Gamma

Gamma is about to be removed.
"""
NOTE_HEAD = """# Notes

## Alpha

The alpha section is left alone.

## Beta

Beta now says dQ goes to per-split buffers.

## Later

Gamma was folded away.
"""


@dataclass
class Repos:
    """The built repositories and their commits."""

    code: Path
    notes: Path
    pin: str
    head: str
    mid: str
    notes_pin: str
    notes_head: str


def build_repos(tmp: Path) -> Repos:
    """The code repository (pin, a middle commit, head) and the notes repository (pin, head)."""
    code = new_repo(tmp / "code")
    pin = commit_tree(code, {"src/kernel.cu": KERNEL_PIN, "src/helper.cu": HELPER_PIN, "src/old_name.h": RENAMED,
                             "src/gone.cu": GONE, "src/sched.cu": SCHED_PIN, "src/untouched.cu": UNTOUCHED}, "pin")
    mid = commit_tree(code, {"src/kernel.cu": KERNEL_HEAD}, "move and edit kernel lines")
    git(code, "mv", "src/old_name.h", "src/new_name.h")
    head = commit_tree(code, {"src/helper.cu": HELPER_HEAD, "src/util/reduce.cu": REDUCE_HEAD, "src/gone.cu": None,
                              "src/sched.cu": None, "src/scheduler/v2.cu": SCHED_ELSEWHERE}, "rename, delete, move")
    notes = new_repo(tmp / "notes")
    notes_pin = commit_tree(notes, {"docs/notes/a.md": NOTE_PIN}, "notes pin")
    notes_head = commit_tree(notes, {"docs/notes/a.md": NOTE_HEAD}, "notes edit")
    return Repos(code, notes, pin, head, mid, notes_pin, notes_head)


def repo_anchor(text: str, path: str, sha: str, start: int, end: int, symbol: str | None = None,
                source: str = "code") -> dict:
    """A repository anchor with the true hash of lines start..end of text."""
    digest = lines_sha256(text.encode(), start, end)
    assert digest is not None
    a = {"source": source, "sha": sha, "path": path, "lines": [start, end], "sha256": digest[0]}
    if symbol:
        a["symbol"] = symbol
    return a


def note_anchor(heading: str, text: str = NOTE_PIN) -> dict:
    """A notes anchor with the true section hash at the notes pin."""
    sec = find_section(text, heading)
    assert sec is not None
    return {"source": "fa-notes", "path": "docs/notes/a.md", "heading": heading, "sha256": sec.sha256}


def claim(cid: str, *anchors: dict, note: str = "alpha") -> dict:
    """A review-only claim with a notes anchor first."""
    return {"id": cid, "statement": f"Statement of {cid} for the audit tests.", "generation": "cross",
            "phase": "n/a", "topics": ["provenance"], "label": "source-backed",
            "anchors": [note_anchor(note), *anchors], "checks": [],
            "review": "Audit fixture; nothing executable checks it."}


def drift_claims(r: Repos) -> list[dict]:
    """One claim per kind of drift, named for what happens to its anchor."""
    p = r.pin
    return [
        claim("t.repo.unchanged", repo_anchor(KERNEL_PIN, "src/kernel.cu", p, 1, 3)),
        claim("t.repo.untouched-file", repo_anchor(UNTOUCHED, "src/untouched.cu", p, 2, 3)),
        claim("t.repo.moved", repo_anchor(KERNEL_PIN, "src/kernel.cu", p, 10, 12, symbol="online_softmax")),
        claim("t.repo.edited", repo_anchor(KERNEL_PIN, "src/kernel.cu", p, 20, 21)),
        claim("t.repo.renamed", repo_anchor(RENAMED, "src/old_name.h", p, 2, 5, symbol="Params")),
        claim("t.repo.deleted", repo_anchor(GONE, "src/gone.cu", p, 2, 2)),
        claim("t.repo.symbol-moved", repo_anchor(HELPER_PIN, "src/helper.cu", p, 5, 7, symbol="reduce_partials")),
        claim("t.repo.symbol-rewritten", repo_anchor(SCHED_PIN, "src/sched.cu", p, 2, 4, symbol="tile_scheduler_next")),
        claim("t.repo.bad-hash", {**repo_anchor(KERNEL_PIN, "src/kernel.cu", p, 1, 3), "sha256": "0" * 64}),
        claim("t.notes.edited", note="beta"),
        claim("t.notes.gone", note="gamma"),
    ]


def write_project(root: Path, r: Repos, claims: list[dict], *, extra_sources: list[dict] | None = None,
                  clones: dict[str, str] | None = None, code_url: str = "https://github.com/acme/code",
                  pins: dict[str, str] | None = None, tracking: list[str] | None = None) -> Path:
    """claims/, sources/ and kb.local.toml for a project citing the test repositories."""
    (root / "claims").mkdir(parents=True, exist_ok=True)
    (root / "sources").mkdir(exist_ok=True)
    sources = [
        {"id": "fa-notes", "kind": "notes", "repo": str(r.notes), "commit": r.notes_pin},
        {"id": "code", "kind": "repo", "url": code_url, "pins": pins or {"v1": r.pin},
         **({"tracking": tracking} if tracking else {})},
        *(extra_sources or []),
    ]
    (root / "sources" / "all.yaml").write_text(yaml.safe_dump({"sources": sources}, sort_keys=False))
    (root / "claims" / "audit.yaml").write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    clones = {"fa-notes": str(r.notes), "code": str(r.code)} if clones is None else clones
    (root / "kb.local.toml").write_text("[clones]\n" + "".join(f'{k} = "{v}"\n' for k, v in clones.items()))
    return root


def index(root: Path) -> tuple[Config, sqlite_utils.Database]:
    """Config and an up-to-date index for the project."""
    cfg = load_config(root=root, db=str(root / "kb.db"))
    return cfg, open_index(cfg).db

