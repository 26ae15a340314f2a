"""Build hook: a built wheel carries the corpus under kb/_corpus, so `kb init DIR` works from an install.

Everything else is in pyproject.toml. What is copied is kb.config.CORPUS_TREE and CORPUS_FILES, read from
that module's file as literals, so the list lives in one place.
"""

import ast
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _corpus_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """CORPUS_TREE and CORPUS_FILES as kb/config.py states them (read as literals, nothing imported)."""
    found = {}
    for node in ast.parse((ROOT / "kb" / "config.py").read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("CORPUS_TREE", "CORPUS_FILES"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found["CORPUS_TREE"], found["CORPUS_FILES"]


class BuildPyWithCorpus(build_py):
    """build_py, then the corpus into build/lib/kb/_corpus (not for editable installs: they read the checkout)."""

    def run(self) -> None:
        """Build the package, then copy the corpus beside it."""
        super().run()
        if getattr(self, "editable_mode", False):
            return
        tree, files = _corpus_lists()
        dest = Path(self.build_lib) / "kb" / "_corpus"
        shutil.rmtree(dest, ignore_errors=True)
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".inflight-*")
        for name in tree:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, dest / name, ignore=skip)
        for name in files:
            if (ROOT / name).is_file():
                shutil.copy2(ROOT / name, dest / name)


setup(cmdclass={"build_py": BuildPyWithCorpus})
