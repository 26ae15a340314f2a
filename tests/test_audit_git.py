"""`kb audit` with the git backend, against real repositories built in tmp_path (no network)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kb.audit import git as audit_git
from kb.audit.model import Finding
from kb.audit.run import audit, run_audit
from kb.audit.state import load_drift
from kb.cli import cli
from tests.test_audit_support import (
    KERNEL_PIN,
    Repos,
    build_repos,
    claim,
    commit_tree,
    drift_claims,
    git,
    index,
    repo_anchor,
    write_project,
)


@pytest.fixture()
def repos(tmp_path: Path) -> Repos:
    return build_repos(tmp_path / "repos")


def _by_claim(findings: list[Finding], source: str) -> dict[str | None, Finding]:
    return {f.claim_id: f for f in findings if f.source == source}


def test_each_kind_of_drift_is_classified(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos))
    cfg, db = index(root)
    report = audit(cfg, db, offline=True)
    code = _by_claim(report.findings, "code")

    assert code["t.repo.unchanged"].status == "unchanged"
    assert "identical at head" in code["t.repo.unchanged"].detail
    assert code["t.repo.untouched-file"].status == "unchanged"
    assert code["t.repo.untouched-file"].detail == "file unchanged since the pin"

    moved = code["t.repo.moved"]
    assert moved.status == "moved" and not moved.stale and moved.drifted
    assert moved.proposal == {"path": "src/kernel.cu", "lines": [12, 14], "sha256": moved.proposal["sha256"]}

    edited = code["t.repo.edited"]
    assert edited.status == "edited" and edited.stale
    assert "-    atomicAdd(&dq_accum[i], dq);" in edited.diff
    assert "+    dq_accum_split[blockIdx.y][i] = dq;" in edited.diff
    assert edited.proposal["lines"] == [22, 23]

    renamed = code["t.repo.renamed"]
    assert renamed.status == "renamed" and not renamed.stale
    assert renamed.proposal["path"] == "src/new_name.h" and renamed.proposal["lines"] == [2, 5]

    assert code["t.repo.deleted"].status == "deleted"
    assert "file deleted at head" in code["t.repo.deleted"].detail

    sym = code["t.repo.symbol-moved"]
    assert sym.status == "symbol-elsewhere" and sym.stale
    assert "src/util/reduce.cu:2" in sym.detail
    assert sym.proposal == {"path": "src/util/reduce.cu", "lines": [2, 4], "sha256": sym.proposal["sha256"]}

    rewritten = code["t.repo.symbol-rewritten"]
    assert rewritten.status == "symbol-elsewhere"
    assert "src/scheduler/v2.cu:2" in rewritten.detail and rewritten.proposal is None

    assert code["t.repo.bad-hash"].status == "invalid"

    notes = {(f.claim_id, f.heading): f for f in report.findings if f.source == "fa-notes"}
    assert notes[("t.notes.edited", "beta")].status == "edited"
    assert "+Beta now says dQ goes to per-split buffers." in notes[("t.notes.edited", "beta")].diff
    assert notes[("t.notes.gone", "gamma")].status == "deleted"
    assert notes[("t.repo.unchanged", "alpha")].status == "unchanged"


def test_one_diff_per_pin_and_one_batch_reader(tmp_path: Path, repos: Repos, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many anchors on two pins cost one `git diff` per pin, not one per anchor."""
    mid_kernel = git(repos.code, "show", f"{repos.mid}:src/kernel.cu")
    claims = drift_claims(repos) + [
        claim(f"t.repo.extra-{i}", repo_anchor(mid_kernel, "src/kernel.cu", repos.mid, 1 + i % 5, 12)) for i in range(20)]
    root = write_project(tmp_path / "proj", repos, claims, pins={"v1": repos.pin, "mid": repos.mid})
    cfg, db = index(root)
    calls: list[tuple[str, ...]] = []
    real = audit_git._git

    def spy(path: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        calls.append(args)
        return real(path, *args, timeout=timeout)

    monkeypatch.setattr(audit_git, "_git", spy)
    before = audit_git.SPAWNED["count"]
    report = audit(cfg, db, offline=True)
    diffs = [c for c in calls if c[0] == "diff"]
    greps = [c for c in calls if c[0] == "grep"]
    assert len(diffs) == 3  # code: v1 and mid; notes: one pin
    assert len(greps) == 1  # one symbol search for the whole repository
    # 2 batch readers (code, notes) + 3 diffs + 1 grep
    assert audit_git.SPAWNED["count"] - before == 6 == report.git_processes
    assert sum(1 for f in report.findings if f.source == "code") == len(claims) - 2


def _kb(root: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--root", str(root), "--db", str(root / "kb.db"), *args], catch_exceptions=False)


STALE_AT_TRACKING = {"t.repo.edited", "t.repo.deleted", "t.repo.symbol-moved", "t.repo.symbol-rewritten",
                     "t.repo.bad-hash", "t.notes.edited", "t.notes.gone"}


def test_cli_json_exit_code_and_stale_claims(tmp_path: Path, repos: Repos) -> None:
    """A tracking pin: changed cited content stales the claim; moved lines do not."""
    root = write_project(tmp_path / "proj", repos, drift_claims(repos), tracking=["v1"])
    res = _kb(root, "audit", "--offline", "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 1
    stale = doc["stale_claims"]
    assert set(stale) == STALE_AT_TRACKING
    assert doc["upstream_changed"] == {}
    assert "edited" in stale["t.repo.edited"]
    assert doc["claims"]["t.repo.moved"]["state"] == "drifted"
    assert doc["claims"]["t.repo.unchanged"]["state"] == "unchanged"
    # What the status derivation reads back (the committed record), and what users then see.
    drift = load_drift(root)
    assert set(drift) == STALE_AT_TRACKING | {"t.repo.moved", "t.repo.renamed"} & set(doc["claims"])
    rows = {r["id"]: r for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert {cid for cid, r in rows.items() if r["status"] == "stale"} == STALE_AT_TRACKING
    assert "source drift" in rows["t.repo.edited"]["status_reason"]
    assert rows["t.repo.moved"]["status"] != "stale"
    assert rows["t.repo.unchanged"]["status"] != "stale"


def test_fixed_pin_drift_is_information_not_staleness(tmp_path: Path, repos: Repos) -> None:
    """A fixed (historical) pin: upstream change is shown beside the status; only the notes stale claims."""
    root = write_project(tmp_path / "proj", repos, drift_claims(repos))  # no tracking pins
    res = _kb(root, "audit", "--offline", "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert set(doc["stale_claims"]) == {"t.notes.edited", "t.notes.gone"}
    assert set(doc["upstream_changed"]) == STALE_AT_TRACKING - {"t.notes.edited", "t.notes.gone"}
    rows = {r["id"]: r for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert rows["t.repo.edited"]["status"] != "stale"
    assert rows["t.notes.edited"]["status"] == "stale"
    shown = json.loads(_kb(root, "show", "t.repo.edited", "--json").stdout)
    overall = next(s for s in shown["status"] if s["hardware_class"] == "*")
    assert overall["upstream"].startswith("upstream changed since the pin: code@") and "edited" in overall["upstream"]
    assert "upstream changed since the pin" in _kb(root, "show", "t.repo.edited").stdout
    # Flipping the pin's role in sources/ re-derives: the same record now stales the repository claims.
    write_project(root, repos, drift_claims(repos), tracking=["v1"])
    rows = {r["id"]: r for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert {cid for cid, r in rows.items() if r["status"] == "stale"} == STALE_AT_TRACKING


def test_table_output_names_pins_and_diffs(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos))
    res = _kb(root, "audit", "--offline")
    assert res.exit_code == 1
    assert "code" in res.stdout and "v1" in res.stdout and repos.head[:12] in res.stdout
    assert "-    atomicAdd(&dq_accum[i], dq);" in res.stdout
    assert "claims stale" in res.stderr


def test_clean_project_exits_zero(tmp_path: Path, repos: Repos) -> None:
    claims = [claim("t.clean.one", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 1, 3))]
    root = write_project(tmp_path / "proj", repos, claims)
    res = _kb(root, "audit", "--offline", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["stale_claims"] == {}
    assert json.loads((root / "evidence" / "audit" / "latest.json").read_text())["drift"] == {}


def test_offline_without_clone_is_unchecked_never_fresh(tmp_path: Path, repos: Repos) -> None:
    claims = [claim("t.clean.one", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 1, 3))]
    root = write_project(tmp_path / "proj", repos, claims, clones={"fa-notes": str(repos.notes)})
    for args in (["audit", "--json"], ["audit", "--offline", "--json"]):  # offline is the default
        res = _kb(root, *args)
        doc = json.loads(res.stdout)
        # Offline by choice: not a failure (exit 0, nothing drifted), but the claim is not called unchanged.
        assert res.exit_code == 0, res.output
        assert doc["claims"]["t.clean.one"]["state"] == "unchecked"
        [u] = [u for u in doc["unchecked"] if u["source"] == "code"]
        assert "no local clone" in u["reason"] and "offline" in u["reason"]
        assert "could not check 1 anchor(s) of code" in res.stderr and "kb audit --online" in res.stderr


def test_pin_missing_from_clone_is_exit_3_even_offline(tmp_path: Path, repos: Repos) -> None:
    ghost = "1" * 40
    claims = [claim("t.ghost", {**repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 1, 3), "sha": ghost})]
    root = write_project(tmp_path / "proj", repos, claims, pins={"v1": repos.pin, "ghost": ghost})
    res = _kb(root, "audit", "--offline", "--json")
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    f = next(f for f in doc["findings"] if f["claim_id"] == "t.ghost" and f["source"] == "code")
    assert f["status"] == "unchecked" and "not in the clone" in f["detail"]


def test_fresh_clone_offline_without_clones_keeps_every_earlier_verdict(tmp_path: Path, repos: Repos) -> None:
    """The committed record is the carried state: no .kb/, no clones, offline -> nothing gets fresher."""
    root = write_project(tmp_path / "proj", repos, drift_claims(repos), tracking=["v1"])
    cfg, db = index(root)
    assert run_audit(cfg, db, offline=True) == 1
    before = {r["id"]: r["status"] for r in json.loads(_kb(root, "claims", "--json").stdout)}
    first = json.loads((root / "evidence" / "audit" / "latest.json").read_text())
    # A fresh clone: the ignored .kb/ (index, full findings, clone cache) is gone and nothing is configured.
    shutil.rmtree(root / ".kb", ignore_errors=True)
    (root / "kb.db").unlink()
    write_project(root, repos, drift_claims(repos), clones={}, tracking=["v1"])
    cfg, db = index(root)
    assert run_audit(cfg, db, offline=True) == 1  # the carried drift; offline gaps are listed, not exit 3
    second = json.loads((root / "evidence" / "audit" / "latest.json").read_text())
    assert set(second["drift"]) == set(first["drift"])
    for cid, entries in second["drift"].items():
        assert all(e["carried_from"] == first["checked_at"] and e["not_rechecked"].startswith("no local clone")
                   for e in entries), cid
    assert second["sources"]["code"]["unchecked"]["why"].startswith("no local clone")
    assert second["sources"]["code"]["head"] == first["sources"]["code"]["head"]  # last known head kept
    after = {r["id"]: r for r in json.loads(_kb(root, "claims", "--json").stdout)}
    assert {k: v["status"] for k, v in after.items()} == before
    assert "not re-checked" in after["t.repo.edited"]["status_reason"]
    # A third run later still carries the original date, not the date of the run that could not check.
    cfg, db = index(root)
    assert run_audit(cfg, db, offline=True) == 1
    third = json.loads((root / "evidence" / "audit" / "latest.json").read_text())
    assert third["drift"]["t.repo.edited"][0]["carried_from"] == first["checked_at"]


def test_what_if_ref_leaves_the_committed_record_unless_write(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos), tracking=["v1"])
    record = root / "evidence" / "audit" / "latest.json"
    res = _kb(root, "audit", "--offline", "--ref", f"code={repos.mid}")
    assert res.exit_code in (0, 1) and not record.exists()
    assert "what-if audit" in res.stderr
    res = _kb(root, "audit", "--offline", "--ref", f"code={repos.mid}", "--write")
    assert record.exists() and json.loads(record.read_text())["refs"] == {"code": repos.mid}


def test_ref_compares_against_another_commit(tmp_path: Path, repos: Repos) -> None:
    root = write_project(tmp_path / "proj", repos, drift_claims(repos))
    cfg, db = index(root)
    report = audit(cfg, db, offline=True, refs={"*": repos.mid})
    code = _by_claim(report.findings, "code")
    assert code["t.repo.moved"].status == "moved" and code["t.repo.moved"].head == repos.mid
    assert code["t.repo.deleted"].status == "unchanged"  # gone.cu still exists at the middle commit
    assert code["t.repo.renamed"].status == "unchanged"


def test_online_git_clones_and_fetches_into_the_cache(tmp_path: Path, repos: Repos, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online, with no configured clone: clone --bare into the cache, later fetch; local paths only, no network."""
    claims = [claim("t.k", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 20, 21))]
    root = write_project(tmp_path / "proj", repos, claims, clones={"fa-notes": str(repos.notes)},
                         code_url=str(repos.code))
    monkeypatch.setenv("KB_CLONE_CACHE", str(tmp_path / "cache"))
    cfg, db = index(root)
    # Put the head back to the pin upstream, so the first audit sees no drift.
    git(repos.code, "branch", "old", repos.pin)
    git(repos.code, "symbolic-ref", "HEAD", "refs/heads/old")  # the work tree is left alone
    report = audit(cfg, db, offline=False)
    f = _by_claim(report.findings, "code")["t.k"]
    assert (tmp_path / "cache" / "code.git").is_dir()
    assert f.status == "unchanged" and f.head == repos.pin
    # Upstream moves on: the next online audit fetches it.
    git(repos.code, "symbolic-ref", "HEAD", "refs/heads/main")
    commit_tree(repos.code, {"README": "new\n"}, "upstream moves on")
    report = audit(cfg, db, offline=False)
    f = _by_claim(report.findings, "code")["t.k"]
    assert f.status == "edited" and f.head == git(repos.code, "rev-parse", "main").strip()


def test_failed_fetch_never_reports_unchanged(tmp_path: Path, repos: Repos) -> None:
    claims = [claim("t.k", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 1, 3))]
    root = write_project(tmp_path / "proj", repos, claims, code_url=str(tmp_path / "no-such-upstream"))
    cfg, db = index(root)
    report = audit(cfg, db, offline=False)
    f = _by_claim(report.findings, "code")["t.k"]
    assert f.status == "unchecked" and "git fetch" in f.detail and "local head" in f.detail


def test_commit_level_anchor_is_not_invalid(tmp_path: Path, repos: Repos) -> None:
    claims = [claim("t.commit.level", {"source": "code", "sha": repos.pin})]
    root = write_project(tmp_path / "proj", repos, claims)
    res = _kb(root, "audit", "--offline", "--json")
    doc = json.loads(res.stdout)
    found = [f for f in doc["findings"] if f.get("claim_id") == "t.commit.level" and f.get("source") == "code"]
    assert found and found[0]["status"] == "unchanged", found


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): a connection there is refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_online_audit_that_cannot_reach_upstream_exits_3_offline_does_not(tmp_path: Path, repos: Repos) -> None:
    """No network in the test: upstream is a closed loopback port. Offline (the default) the configured clone
    is audited and the audit succeeds; asked to check online, the failed fetch makes it partial (exit 3)."""
    claims = [claim("t.k", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 1, 3))]
    root = write_project(tmp_path / "proj", repos, claims, code_url=f"http://127.0.0.1:{_closed_port()}/acme/code")
    offline = _kb(root, "audit", "--json")
    assert offline.exit_code == 0, offline.output
    assert json.loads(offline.stdout)["offline"] is True
    online = _kb(root, "audit", "--online", "--json")
    assert online.exit_code == 3, online.output
    f = next(f for f in json.loads(online.stdout)["findings"] if f["claim_id"] == "t.k" and f["source"] == "code")
    assert f["status"] == "unchecked" and "git fetch" in f["detail"]


def _refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def test_online_audit_never_writes_into_the_users_clone(tmp_path: Path, repos: Repos) -> None:
    """A real upstream repository and a real clone of it named in kb.local.toml: the online audit fetches
    upstream's new head into kb's own repository under .kb/audit-git/, and the user's clone keeps every ref,
    its objects and its config as they were."""
    user = tmp_path / "user-clone"
    subprocess.run(["git", "clone", "--quiet", str(repos.code), str(user)], check=True, capture_output=True)
    before = (_refs(user), sorted(p.name for p in (user / ".git" / "objects").rglob("*")),
              (user / ".git" / "config").read_text())
    upstream_head = commit_tree(repos.code, {"README": "upstream moves on\n"}, "upstream moves on")
    claims = [claim("t.k", repo_anchor(KERNEL_PIN, "src/kernel.cu", repos.pin, 20, 21))]
    root = write_project(tmp_path / "proj", repos, claims, clones={"fa-notes": str(repos.notes), "code": str(user)},
                         code_url=str(repos.code))
    cfg, db = index(root)
    report = audit(cfg, db, offline=False)
    f = _by_claim(report.findings, "code")["t.k"]
    assert f.head == upstream_head  # the head came from upstream, which the user's clone has not seen
    own = root / ".kb" / "audit-git" / "code.git"
    assert git(own, "rev-parse", audit_git.UPSTREAM_HEAD).strip() == upstream_head
    after = (_refs(user), sorted(p.name for p in (user / ".git" / "objects").rglob("*")),
             (user / ".git" / "config").read_text())
    assert after == before
    assert upstream_head not in _refs(user)
    # Offline afterwards: the head fetched last time is read from kb's repository, still without touching the clone.
    report = audit(cfg, db, offline=True)
    assert _by_claim(report.findings, "code")["t.k"].head == upstream_head
    assert (_refs(user), (user / ".git" / "config").read_text()) == (before[0], before[2])
