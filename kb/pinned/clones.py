"""Where the pinned repositories live on this machine: configured clones, else the clone cache."""

from __future__ import annotations

from kb.config import Config
from kb.records.loader import Corpus


def clone_paths(cfg: Config, corpus: Corpus) -> dict[str, str]:
    """Local git directories per repository source: configured, else the clone cache."""
    out = dict(cfg.clones)
    for sid, src in corpus.sources.items():
        if sid in out or src.kind not in ("repo", "notes"):
            continue
        for cand in (cfg.clone_cache / sid, cfg.clone_cache / f"{sid}.git"):
            if cand.exists():
                out[sid] = str(cand)
                break
    return out
