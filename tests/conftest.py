"""Shared fixtures: a small real kb project in a temporary folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kb.cli import cli

REPO = Path(__file__).resolve().parent.parent

# A note anchor that hashes correctly at the pinned notes commit (taken from the corpus).
NOTE_ANCHOR = yaml.safe_load((REPO / "claims" / "gpu-h200.yaml").read_text())["claims"][0]["anchors"][0]


def claim(cid: str, **over: object) -> dict:
    """A valid claim record, with overrides."""
    base = {
        "id": cid,
        "statement": "Two plus two equals four, stated for a test.",
        "generation": "cross",
        "phase": "n/a",
        "topics": ["numerics"],
        "label": "mathematical",
        "anchors": [dict(NOTE_ANCHOR)],
        "checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 4}}}],
    }
    base.update(over)
    return base


def write_claims(root: Path, name: str, claims: list[dict]) -> Path:
    """Write claims/<name>.yaml."""
    path = root / "claims" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"claims": claims}, sort_keys=False))
    return path


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A project with the real sources/ and verifiers/ and one good claims file."""
    root = tmp_path / "proj"
    shutil.copytree(REPO / "sources", root / "sources")
    shutil.copytree(REPO / "verifiers", root / "verifiers", ignore=shutil.ignore_patterns("__pycache__"))
    write_claims(root, "good", [
        claim("test.arith.four"),
        claim("test.arith.wrong", statement="Two plus two equals five, stated by a note.",
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 5}}}],
              cause={"kind": "note", "why": "The note says five; two plus two is four (a test finding)."}),
        claim("test.review.only", checks=[], review="Design rationale; nothing executable decides it.",
              depends_on=["test.arith.four"]),
    ])
    return root


@pytest.fixture()
def run_kb(project: Path):
    """Invoke the CLI in-process against the project; returns the click Result."""
    runner = CliRunner()

    def go(*args: str):
        return runner.invoke(cli, ["--root", str(project), "--db", str(project / ".kb" / "kb.db"), *args],
                             catch_exceptions=False)

    return go


SNIPPETS = Path(__file__).parent / "fixtures" / "snippets"
# The suite's own snippets (tests/fixtures/snippets/) are found beside verifiers/snippets/ in every test.
os.environ.setdefault("KB_SNIPPET_PATH", str(SNIPPETS))


def trusting(source: str, *shas: str, **extra: str) -> dict[str, str]:
    """Environment for a child kb that may execute `source` at `shas` (test repositories) and read the test snippets."""
    return {"KB_TRUST_PINS": ",".join(f"{source}@{s}" for s in shas), "KB_SNIPPET_PATH": str(SNIPPETS), **extra}


def kb_subprocess(root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
    """Run `python -m kb` in a child process (what verify needs: real worker processes)."""
    full = {**os.environ, "KB_ROOT": str(root), "KB_DB": str(root / ".kb" / "kb.db"),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kb", *args], capture_output=True, text=True, env=full,
                          timeout=timeout, cwd=root)


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in a test repository; stdout stripped."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def commit_files(repo: Path, files: dict[str, str], message: str = "commit", env: dict[str, str] | None = None) -> str:
    """Write files into a (new or existing) git repository, commit them, and return the commit SHA."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", ".")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=Ann Author", "commit", "-qm", message, env=env)
    return git(repo, "rev-parse", "HEAD")


def superproject_with_submodule(project: Path, tmp_path: Path, files: dict[str, str],
                                sub_files: dict[str, str]) -> tuple[Path, str, str]:
    """A repository `up` whose tree records `third/sub` as a submodule gitlink to a second repository `sub`, as
    a superproject does, registered in `project` as sources `testrepo` and `sub`; returns (up, sha, sub_sha)."""
    sub_sha = commit_files(tmp_path / "sub", sub_files, "sub")
    up = tmp_path / "up"
    commit_files(up, files, "one")
    git(up, "update-index", "--add", "--cacheinfo", f"160000,{sub_sha},third/sub")
    git(up, "-c", "user.email=t@t", "-c", "user.name=T", "commit", "-qm", "submodule")
    sha = git(up, "rev-parse", "HEAD")
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n"
        f"  - id: sub\n    kind: repo\n    url: https://example.invalid/sub\n    pins:\n      main: {sub_sha}\n")
    return up, sha, sub_sha


def variant_kernel_sass(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """kb's variant `name` of the FA3 pin, derived here and its fp16 d128 forward unit compiled for the pin's
    target (about a minute on 2 cores): (the object, the SASS of the kernel the paper's shape runs: non-causal,
    cluster 2, static persistent scheduler). Skips without nvcc, cuobjdump or the clones (kb.local.toml)."""
    import re
    import tarfile
    from io import BytesIO

    from kb.verify.hw import find_tool
    from verifiers.pinned import build as pinned_build
    from verifiers.pinned import (
        owners,  # noqa: F401  (registers its variant)
        variants,
    )
    from verifiers.pinned.compiled import gitlink

    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if not nvcc or not cuobjdump:
        pytest.skip("needs nvcc and cuobjdump")
    try:
        clone, cut = pinned_build.pinned_clones()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    v = variants.variant(name)
    rev = pinned_build.revision(v.name)
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path / "build"))
    assert variants.derive(v, clone) == v.sha
    repo = variants._repo(clone)
    src, cut_src = tmp_path / "src", tmp_path / "cut"
    cut_commit = gitlink(str(repo), v.sha, rev.cutlass_path)
    for git_dir, sha, dirs, dest in ((repo, v.sha, ["hopper"], src), (Path(cut), cut_commit, list(rev.cutlass_dirs), cut_src)):
        gd = git_dir / ".git" if (git_dir / ".git").exists() else git_dir
        data = subprocess.run(["git", f"--git-dir={gd}", "archive", sha, "--", *dirs], capture_output=True,
                              check=True).stdout
        with tarfile.open(fileobj=BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
    obj = tmp_path / "unit.o"
    flags = [f for f in rev.flags if not f.startswith("--ptxas-options")]
    subprocess.run([nvcc, "-gencode", rev.gencode, *flags, f"-I{src / 'hopper'}",
                    *[f"-I{cut_src / d}" for d in rev.cutlass_dirs], "-c", str(src / "hopper" / rev.units["fwd:fp16:128"]),
                    "-o", str(obj)], check=True, capture_output=True, timeout=900)
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    funcs = re.split(r"\n\s+Function : ", sass)
    # non-causal (Is_causal false: ...ELb0ENS_29StaticPersistent...), cluster 2 (the 7th traits argument)
    kernel = next(f for f in funcs if "Li176ELi12ELi2ELb0ELi2E" in f.split("\n")[0]
                  and "StaticPersistentTileScheduler" in f.split("\n")[0])
    return obj, kernel
