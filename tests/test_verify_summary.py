"""`kb verify`'s summary says what was checked here, what was reused (class, dates), what was skipped (every
reason, with counts) and the command that re-runs the reused checks here; and the README's kb.local.toml
example names every clone the checks read."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import yaml

from kb.pinned.notes import lines_sha256
from tests.conftest import REPO, claim, kb_subprocess, write_claims

SHA = "c" * 40
NO_GPU = {"KB_FAKE_NO_GPU": "1"}


def _first_run_project(project: Path) -> None:
    """Two CPU checks this machine runs, one GPU check with results from the H200 on record, and six source
    checks of six repositories without a clone here: seven distinct reasons to skip, more than the five the
    summary used to show."""
    repos = [{"id": f"r{i}", "kind": "repo", "url": f"https://example.org/r{i}.git", "pins": {"main": SHA}}
             for i in range(6)]
    (project / "sources" / "test-repos.yaml").write_text(yaml.safe_dump({"sources": repos}, sort_keys=False))
    digest = lines_sha256(b"atomicAdd(x);\n", 1, 1)[0]
    base = claim("x.y")["anchors"][0]
    write_claims(project, "src", [
        claim(f"test.src.r{i}", label="source-backed",
              anchors=[base, {"source": f"r{i}", "sha": SHA, "path": "k.h", "lines": [1, 1], "sha256": digest}],
              checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["atomicAdd"]}}])
        for i in range(6)])
    gpu = next(c for c in yaml.safe_load((REPO / "claims" / "gpu-h200.yaml").read_text())["claims"]
               if c["id"] == "h200.fa2.fwd.bitwise-repeatable")
    for rel in ("depends_on", "refines", "supersedes"):  # the claims it relates to are not in this project
        gpu.pop(rel, None)
    write_claims(project, "gpu", [gpu])
    batch = next(p for p in sorted((REPO / "evidence" / "nvidia-h200-sm-90").glob("*.json"))
                 if any(r["claim_id"] == gpu["id"] for r in json.loads(p.read_text())["runs"]))
    (project / "evidence" / "nvidia-h200-sm-90").mkdir(parents=True)
    shutil.copy(batch, project / "evidence" / "nvidia-h200-sm-90" / batch.name)


def test_first_run_then_reuse_explain_themselves(project: Path) -> None:
    _first_run_project(project)
    first = kb_subprocess(project, "verify", env=NO_GPU)
    assert first.returncode == 1, first.stderr  # test.arith.wrong is refuted by design
    err = first.stderr
    assert "checked here: 2 check(s) ran on this machine (cpu): refutes 1, supports 1" in err
    assert "reused" not in err  # nothing was on record for the CPU checks
    assert "skipped: 7 check(s) this machine cannot run now, for 7 reason(s):" in err
    for i in range(6):
        assert re.search(rf"^  1  needs a local clone of r{i} \(set \[clones\] in kb.local.toml or KB_CLONE_R{i}\)$",
                         err, re.M), err
    assert re.search(r"^  1  needs CUDA sm_\S+; this machine has no GPU$", err, re.M), err
    assert re.search(r"results on record for skipped checks, made elsewhere: \d+ on NVIDIA H200 sm_90 \(2026-", err)
    assert "the status table counts every claim, from all evidence on record" in err

    again = kb_subprocess(project, "verify", "--json", env=NO_GPU)
    summary = json.loads(again.stdout)
    assert summary["ran"] == 0 and summary["cached"] == 2
    assert sum(r["checks"] for r in summary["skipped_by_reason"]) == summary["skipped"] == 7
    assert summary["cached_from"][0]["hardware_class"] == "cpu" and summary["cached_from"][0]["runs"] == 2
    assert summary["rerun_command"] == "kb verify --force"

    text = kb_subprocess(project, "verify", "-g", "cross", env=NO_GPU).stderr
    assert "checked here: nothing - no check ran on this machine" in text
    day = summary["cached_from"][0]["first"]
    assert f"reused, not re-run: 2 result(s) recorded earlier (committed or imported evidence): 2 on cpu ({day}); " \
           "refutes 1, supports 1" in text
    rerun = re.search(r"to check the 2 reused result\(s\) on this machine: (.+)$", text, re.M)
    assert rerun and rerun.group(1) == "kb verify --force -g cross"
    # The command it names does what it says: the reused checks run here.
    args = shlex.split(rerun.group(1))[2:]
    redo = json.loads(kb_subprocess(project, "verify", *args, "--json", env=NO_GPU).stdout)
    assert redo["ran"] == 2 and redo["cached"] == 0


def _clone_keys_the_checks_read() -> Counter[str]:
    """Source ids whose local clone some check reads: the anchor of a check needing a git source, and the
    submodules (by folder name) the pinned-code checks put beside the pinned tree."""
    from kb.config import load_config
    from kb.records.loader import load_corpus
    from kb.verify.registry import load_verifiers, requirements_for

    cfg = load_config(REPO)
    corpus, registry = load_corpus(cfg.root), load_verifiers(cfg.verifiers_dir)
    keys: Counter[str] = Counter()
    for c in corpus.claims.values():
        for ch in c.checks:
            if requirements_for(registry[ch.verifier], ch.params).git_source:
                ix = ch.params.get("anchor", 0)
                keys[c.anchors[ix].source if isinstance(ix, int) and ix < len(c.anchors) else "?"] += 1
            if isinstance(ch.params.get("source"), str) and ch.params["source"] in corpus.sources:
                keys[ch.params["source"]] += 1
            keys.update(Path(s).name for s in ch.params.get("submodules") or {})
    return keys


def test_readme_clone_example_names_every_clone_the_checks_read() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index("```toml\n[clones]"):]
    block = block[: block.index("```", 3)]
    named = set(re.findall(r"^([a-z0-9-]+)\s*=", block, re.M))
    keys = _clone_keys_the_checks_read()
    assert {"flash-attention", "fa-notes-repo", "cutlass"} <= set(keys)  # what the corpus reads today
    assert set(keys) <= named, f"kb.local.toml example lacks {set(keys) - named}"
    assert "fa-notes" in named  # the notes themselves: kb audit and kb coverage read them
