"""The GPU teaching checks' child sees packages staged on PYTHONPATH (the H200's /tmp/site) despite `python -I`.

And scripts/stage-teaching.sh: packs of the pinned commits that a bare repository serves as the clones do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from verifiers.pinned import teaching

ROOT = Path(__file__).resolve().parents[1]


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "kbstaged").mkdir(parents=True)
    (site / "kbstaged" / "__init__.py").write_text("WHERE = 'staged'\n")
    (site / "kbstagedmod.py").write_text("X = 1\n")
    return site


def test_pythonpath_sites_names_only_folders_on_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "elsewhere"), str(site)]))
    monkeypatch.syspath_prepend(str(site))
    # A package and a module found in the staged folder; pytest (the venv's) and a missing name are not named.
    assert teaching.pythonpath_sites(("kbstaged", "kbstagedmod", "pytest", "kb_no_such_package")) == [str(site.resolve())]
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    assert teaching.pythonpath_sites(("kbstaged",)) == []


def test_boot_runs_the_child_as_main_with_the_staged_folder_first(tmp_path: Path) -> None:
    site = _site(tmp_path)
    child = tmp_path / "child.py"
    child.write_text("import sys, kbstaged\n"
                     "if __name__ == '__main__':\n"
                     "    print(kbstaged.WHERE, sys.argv == [__file__], sys.path[0])\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONPATH": str(site)}
    plain = subprocess.run([sys.executable, "-I", str(child)], capture_output=True, text=True, env=env)
    assert plain.returncode != 0 and "kbstaged" in plain.stderr  # -I hides PYTHONPATH: the failure on the H200
    res = subprocess.run([sys.executable, "-I", "-c", teaching.BOOT, str(child), str(site)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["staged", "True", str(site)]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_stage_teaching_packs_serve_the_pinned_tree(tmp_path: Path) -> None:
    """Pack two commits' worth of a repository, install the pack of the second one, archive it: identical."""
    repo = tmp_path / "src"

    def git(*args: str, cwd: Path = repo) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                              env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()

    repo.mkdir()
    git("init", "-q")
    (repo / "a.py").write_text("one\n")
    git("add", "."), git("commit", "-qm", "1")
    (repo / "sub").mkdir()
    (repo / "sub" / "b.py").write_text("two\n")
    git("add", "."), git("commit", "-qm", "2")
    sha = git("rev-parse", "HEAD")
    work = tmp_path / "work"
    (work / "sources").mkdir(parents=True)
    (work / "sources" / "teaching.yaml").write_text(
        f"sources:\n  - id: demo-repo\n    kind: repo\n    pins:\n      main: {sha}\n")
    (work / "kb.local.toml").write_text(f'[clones]\n"demo-repo" = "{repo}"\n')
    script = ROOT / "scripts" / "stage-teaching.sh"
    env = {**os.environ, "PY": sys.executable, "TEACH_ROOT": str(tmp_path / "teach")}
    subprocess.run(["bash", str(script)], cwd=work, check=True, capture_output=True, env=env)
    packs = sorted(p.name for p in (work / ".gpu" / "teaching").iterdir())
    assert packs == [f"demo-repo@{sha}.{x}" for x in ("idx", "pack", "tree")]
    (work / "kb.local.toml").write_text('[clones]\nflash-attention = "/tmp/fa.git"\n')
    subprocess.run(["bash", str(script), "--install"], cwd=work, check=True, capture_output=True, env=env)
    clones = tomllib.loads((work / "kb.local.toml").read_text())["clones"]
    bare = tmp_path / "teach" / "demo-repo.git"
    assert clones == {"flash-attention": "/tmp/fa.git", "demo-repo": str(bare)}
    staged = subprocess.run(["git", f"--git-dir={bare}", "archive", "--format=tar", sha], check=True,
                            capture_output=True).stdout
    assert staged == subprocess.run(["git", "archive", "--format=tar", sha], cwd=repo, check=True,
                                    capture_output=True).stdout
    # Only the pinned commit's objects travel: the first commit is not in the pack.
    first = git("rev-parse", "HEAD~1")
    assert subprocess.run(["git", f"--git-dir={bare}", "cat-file", "-e", first]).returncode != 0
