"""The README's tour is real output: each example, re-run here, must print what the README shows.

Index-only examples are compared everywhere (they read only committed files and
evidence). The audit and repin examples need the pinned clones; where they are
absent (CI has no network beyond the package registries) those two are skipped
with the reason. Refresh with `python docs/tour.py --write`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kb.config import load_config
from kb.pinned.clones import clone_paths
from kb.records.loader import load_corpus

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("tour", ROOT / "docs" / "tour.py")
tour = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tour)


def _shown(command: str) -> str:
    """The README's excerpt for one tour command: from its `$` line up to the next tour command."""
    block = tour.readme_block((ROOT / "README.md").read_text())
    starts = sorted(block.index(f"$ {c}") for c, _, _ in tour.TOUR)
    at = block.index(f"$ {command}")
    end = next((s for s in starts if s > at), len(block))
    return block[at:end].rstrip("\n")


def _have_clones() -> bool:
    cfg = load_config(ROOT)
    paths = clone_paths(cfg, load_corpus(cfg.root))
    return all(Path(paths.get(s, "/nonexistent")).exists() for s in ("flash-attention", "fa-notes"))


@pytest.mark.parametrize(("command", "keep", "needs_clones"), tour.TOUR, ids=[c.split()[1] + str(i) for i, (c, _, _)
                                                                                in enumerate(tour.TOUR)])
def test_readme_example_is_real_output(command: str, keep: int, needs_clones: bool) -> None:
    if needs_clones and not _have_clones():
        pytest.skip("needs the pinned clones (`kb sources fetch`)")
    assert tour.excerpt(command, tour.run(command), keep) == _shown(command), (
        "README tour drifted from real output: run `python docs/tour.py --write`")
