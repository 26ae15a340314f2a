"""The wheel is a product (#27): built, installed into a fresh venv, run outside any checkout.

No network: the wheel is built with the running environment's setuptools (--no-build-isolation) and
installed with --no-deps; the fresh venv reaches kb's dependencies through a .pth line naming this
environment's site-packages (not kb itself: the venv's own copy from the wheel comes first).
Skip with `-m 'not install'`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.install

SOURCE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "LICENSE-CORPUS.md",
                "STATUS.md", "STATUS.json", "PROVENANCE.md")


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the wheel from a copy of the checkout (its tree stays clean) and install it into a fresh venv."""
    pytest.importorskip("setuptools")
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    from kb.config import CORPUS_TREE

    for name in ("kb", *CORPUS_TREE):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", ".inflight-*"))
    for name in SOURCE_FILES:
        shutil.copy2(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "PYTHON"))}
    res = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", str(base / "dist"), str(src)], base, env)
    assert res.returncode == 0, res.stdout + res.stderr
    wheel = next((base / "dist").glob("flashattention_kb-*.whl"))
    venv = base / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env).returncode == 0
    py = venv / "bin" / "python"
    res = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
               base, env)
    assert res.returncode == 0, res.stdout + res.stderr
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base, env)
                   .stdout.strip())
    (purelib / "_kb_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    outside = base / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "purelib": purelib, "outside": outside, "base": base, "env": env}


def test_the_wheel_carries_metadata_licences_corpus_and_templates(installed: dict) -> None:
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    meta = zipfile.ZipFile(installed["wheel"]).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Name: flashattention-kb" in meta and "License-Expression: MIT AND CC-BY-4.0" in meta
    assert "Classifier: " in meta and "Project-URL: " in meta and "Description-Content-Type: text/markdown" in meta
    assert any(n.endswith("licenses/LICENSE") for n in names) and any(n.endswith("licenses/LICENSE-CORPUS.md") for n in names)
    assert any(n.startswith("kb/_corpus/site/templates/") and n.endswith(".html") for n in names)  # templates packaged
    assert any(n.startswith("kb/_corpus/claims/") for n in names) and "kb/_corpus/STATUS.json" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_outside_a_corpus_exit_2_then_kb_init_makes_one(installed: dict) -> None:
    kb = str(installed["venv"] / "bin" / "kb")
    env, outside = installed["env"], installed["outside"]
    where = _run([str(installed["venv"] / "bin" / "python"), "-c", "import kb; print(kb.__file__)"], outside, env)
    assert where.stdout.startswith(str(installed["purelib"])), where.stdout + where.stderr
    before = sorted(p.name for p in (installed["purelib"] / "kb").iterdir())
    for args in (["claims"], ["validate"], ["export", "status"], ["show", "x"]):
        res = _run([kb, *args], outside, env)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "no kb corpus here" in res.stderr and "kb init DIR" in res.stderr, res.stderr
    # Nothing was written into the install (no .kb/ index, no STATUS.md) nor into the folder it ran in.
    assert sorted(p.name for p in (installed["purelib"] / "kb").iterdir()) == before
    assert not (installed["purelib"] / ".kb").exists() and not (installed["purelib"] / "STATUS.md").exists()
    assert list(outside.iterdir()) == []
    corpus = installed["base"] / "my-corpus"
    res = _run([kb, "init", str(corpus)], outside, env)
    assert res.returncode == 0, res.stderr
    assert (corpus / "claims").is_dir() and (corpus / "verifiers" / "__init__.py").is_file()
    assert _run([kb, "init", str(corpus)], outside, env).returncode == 2  # never over an existing corpus
    # From another folder, through KB_ROOT: the questions of the README.
    res = _run([kb, "claims", "-g", "fa2", "--arch", "A100", "--json"], outside, {**env, "KB_ROOT": str(corpus)})
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows and all(r["generation"] == "FA2" for r in rows)
    res = _run([kb, "show", rows[0]["id"]], outside, {**env, "KB_ROOT": str(corpus)})
    assert res.returncode == 0 and rows[0]["id"] in res.stdout, res.stderr
    # And from inside it, with nothing set.
    res = _run([kb, "export", "status", "--check"], corpus / "claims", env)
    assert res.returncode == 0, res.stderr  # the copy derives the same statuses as the committed STATUS.md
    assert (corpus / ".kb" / "kb.db").is_file() and not (installed["purelib"] / ".kb").exists()
