"""`kb audit --backend http`, arXiv and web checks against a loopback server (127.0.0.1 only).

The server plays GitHub's REST API from the local test repository (compare,
contents, default branch, branch head), arXiv's export API and one web page,
and injects faults per route: timeout, 404, 429 with Retry-After, an exhausted
rate limit, 5xx, malformed JSON, a truncated body. Each fault must end in a
clear outcome, and never in a claim reported unchanged that was not checked.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from kb.audit.run import AuditReport, audit, run_audit
from tests.test_audit_support import build_repos, claim, drift_claims, git, index, write_project

PAGE = b"<html><body>Hopper tuning guide, as pinned.</body></html>"


class FakeUpstream(ThreadingHTTPServer):
    """GitHub + arXiv + a web page, answered from a local git repository."""

    daemon_threads = True

    def __init__(self, code: Path) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.code = code
        self.faults: dict[str, list[str]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.arxiv_versions = {"2205.14135": 2}
        self.page = PAGE
        self.pad_compare_to = 0  # >0: pad compare listings to this many files (GitHub stops at 300)

    def fault(self, route: str) -> str:
        for key, plan in self.faults.items():
            if key in route:
                return plan.pop(0) if len(plan) > 1 else plan[0]
        return "ok"


class Handler(BaseHTTPRequestHandler):
    server: FakeUpstream

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path.removeprefix("/api"))  # the GitHub API lives under /api
        self.server.requests.append((self.path, dict(self.headers)))
        fault = self.server.fault(parts.path)
        if fault == "timeout":
            time.sleep(1.2)  # past the client's 0.3 s timeout, bounded so the server can stop
            return self._send(200, b"{}")
        if fault == "404":
            return self._send(404, b'{"message": "Not Found"}')
        if fault in ("500", "503"):
            return self._send(int(fault), b"upstream trouble")
        if fault.startswith("429:"):
            return self._send(429, b'{"message": "slow down"}', {"Retry-After": fault[4:]})
        if fault == "ratelimit":
            return self._send(403, b'{"message": "API rate limit exceeded"}',
                              {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 3600)})
        if fault == "malformed":
            return self._send(200, b'{"files": [ {"filename": ')
        body, status = self._route(parts.path, parse_qs(parts.query))
        if fault == "truncated":
            return self._send(status, body[: len(body) // 2], {"Content-Length": str(len(body))}, raw_length=True)
        return self._send(status, body)

    def _route(self, path: str, query: dict[str, list[str]]) -> tuple[bytes, int]:
        code = self.server.code
        if path == "/repos/acme/code":
            return json.dumps({"default_branch": "main"}).encode(), 200
        if path == "/repos/acme/code/commits/main":
            return git(code, "rev-parse", "main").strip().encode(), 200
        if path.startswith("/repos/acme/code/compare/"):
            pin, head = path.rsplit("/", 1)[1].split("...")
            files = []
            for row in git(code, "diff", "--name-status", "-M", pin, head).splitlines():
                st, *names = row.split("\t")
                kind = {"M": "modified", "D": "removed", "A": "added", "R": "renamed"}[st[0]]
                entry = {"filename": names[-1], "status": kind}
                if kind == "renamed":
                    entry["previous_filename"] = names[0]
                files.append(entry)
            while len(files) < self.server.pad_compare_to:
                files.append({"filename": f"generated/file{len(files)}.txt", "status": "modified"})
            return json.dumps({"status": "ahead", "files": files}).encode(), 200
        if path.startswith("/repos/acme/code/contents/"):
            rel, rev = unquote(path.split("/contents/", 1)[1]), query["ref"][0]
            try:
                return git(code, "show", f"{rev}:{rel}").encode(), 200
            except Exception:
                return b'{"message": "Not Found"}', 404
        if path == "/arxiv":
            ids = query["id_list"][0].split(",")
            entries = "".join(
                f"<entry><id>http://arxiv.org/abs/{i}v{self.server.arxiv_versions[i]}</id><title>t</title></entry>"
                for i in ids if i in self.server.arxiv_versions)
            return (f'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom">{entries}</feed>').encode(), 200
        if path == "/page":
            return self.server.page, 200
        return b"no route", 404

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, raw_length: bool = False) -> None:
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        if status == 200 and self.headers.get("If-None-Match") == etag:
            status, body = 304, b""
        try:
            self.send_response(status)
            if status in (200, 304):
                self.send_header("ETag", etag)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if not raw_length:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if raw_length:
            self.close_connection = True


@pytest.fixture()
def upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeUpstream]:
    repos = build_repos(tmp_path / "repos")
    server = FakeUpstream(repos.code)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    for key, val in {"KB_GITHUB_API": f"{base}/api", "KB_ARXIV_API": f"{base}/arxiv", "KB_HTTP_TIMEOUT": "0.3",
                     "KB_HTTP_RETRIES": "2", "KB_HTTP_BACKOFF": "0.01", "KB_HTTP_MAX_WAIT": "2"}.items():
        monkeypatch.setenv(key, val)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    server.repos = repos  # type: ignore[attr-defined]
    server.base = base  # type: ignore[attr-defined]
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _project(tmp_path: Path, server: FakeUpstream, claims: list[dict] | None = None, page_sha: str | None = None) -> Path:
    repos = server.repos  # type: ignore[attr-defined]
    extra = [
        {"id": "paper1", "kind": "paper", "arxiv": "2205.14135", "version": 2, "title": "FA1", "year": 2022},
        {"id": "page1", "kind": "web", "url": f"{server.base}/page",  # type: ignore[attr-defined]
         "content_sha256": page_sha or hashlib.sha256(PAGE).hexdigest()},
        {"id": "page2", "kind": "web", "url": f"{server.base}/page"},  # type: ignore[attr-defined]
    ]
    if claims is None:
        claims = [
            *drift_claims(repos),
            claim("t.paper", {"source": "paper1", "section": "3.1"}),
            claim("t.page", {"source": "page1"}),
            claim("t.page-unpinned", {"source": "page2"}),
        ]
    # The notes' upstream is a local path: online, the notes clone fetches from disk, not the network.
    return write_project(tmp_path / "proj", repos, claims, extra_sources=extra)


def _status(report: AuditReport, cid: str, source: str) -> tuple[str, str]:
    f = next(f for f in report.findings if f.claim_id == cid and f.source == source)
    return f.status, f.detail


def test_http_backend_agrees_with_git_backend(tmp_path: Path, upstream: FakeUpstream) -> None:
    cfg, db = index(_project(tmp_path, upstream))
    via_http = audit(cfg, db, backend="http")
    via_git = audit(cfg, db, backend="git", offline=True)
    http_code = {f.claim_id: f.status for f in via_http.findings if f.source == "code"}
    git_code = {f.claim_id: f.status for f in via_git.findings if f.source == "code"}
    # The API cannot search code: a symbol that moved files stays a plain deletion/edit there.
    assert git_code.pop("t.repo.symbol-moved") == "symbol-elsewhere"
    assert git_code.pop("t.repo.symbol-rewritten") == "symbol-elsewhere"
    assert http_code.pop("t.repo.symbol-moved") == "edited"
    assert http_code.pop("t.repo.symbol-rewritten") == "deleted"
    assert http_code == git_code
    assert _status(via_http, "t.paper", "paper1")[0] == "unchanged"
    assert _status(via_http, "t.page", "page1")[0] == "unchanged"
    status, detail = _status(via_http, "t.page-unpinned", "page2")
    assert status == "unpinned" and "content_sha256" in detail  # information, not a failure
    # One compare per pin; contents only for changed cited files (pin and head side).
    paths = [p for p, _ in upstream.requests]
    assert sum("/compare/" in p for p in paths) == 1
    contents = {unquote(p.split("/contents/")[1].split("?")[0]) for p in paths if "/contents/" in p}
    assert "src/untouched.cu" not in contents and "src/kernel.cu" in contents


def test_conditional_requests_and_token_never_stored(tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghp_secret_token_for_test_0123456789"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    root = _project(tmp_path, upstream)
    cfg, db = index(root)
    first = audit(cfg, db, backend="http")
    n_first = len(upstream.requests)
    second = audit(cfg, db, backend="http")
    later = upstream.requests[n_first:]
    # Immutable answers (compare/contents between SHAs) come from the cache; the rest are conditional.
    assert not any("/compare/" in p or "/contents/" in p for p, _ in later)
    assert all("If-None-Match" in h for p, h in later if p.startswith("/api/repos/"))
    assert second.http["not_modified"] >= 2
    assert [f.status for f in first.findings] == [f.status for f in second.findings]
    # The token goes to the GitHub API only, and is written nowhere.
    assert all(h.get("Authorization") == f"Bearer {secret}" for p, h in upstream.requests if p.startswith("/api/repos/"))
    assert not any("Authorization" in h for p, h in upstream.requests if not p.startswith("/api/repos/"))
    run_audit(cfg, db, backend="http", as_json=True)
    for f in (root / ".kb").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


FAULTS = {
    # fault plan on the compare route -> (final status of a changed-file anchor, words in the reason)
    "timeout": (["timeout"], "unchecked", "timed out"),
    "404": (["404"], "unchecked", "not found"),
    "429-then-ok": (["429:0", "ok"], "edited", ""),
    "429-long": (["429:999"], "unchecked", "rate limited"),
    "rate-limit-exhausted": (["ratelimit"], "unchecked", "rate limit"),
    "5xx-always": (["500"], "unchecked", "HTTP 500"),
    "5xx-then-ok": (["503", "ok"], "edited", ""),
    "malformed-json": (["malformed"], "unchecked", "malformed JSON"),
    "truncated": (["truncated"], "unchecked", "truncated"),
}


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_compare_faults_have_clear_outcomes(tmp_path: Path, upstream: FakeUpstream, case: str) -> None:
    plan, want, words = FAULTS[case]
    upstream.faults["/compare/"] = list(plan)
    root = _project(tmp_path, upstream)
    cfg, db = index(root)
    start = time.monotonic()
    code = run_audit(cfg, db, backend="http", as_json=True)
    assert time.monotonic() - start < 20  # bounded retries, bounded waits
    doc = json.loads((root / ".kb" / "audit-full.json").read_text())
    edited = next(f for f in doc["findings"] if f["claim_id"] == "t.repo.edited" and f["source"] == "code")
    assert edited["status"] == want
    assert words.lower() in edited["detail"].lower()
    if want == "unchecked":
        assert code == 3
        code_findings = [f for f in doc["findings"] if f["source"] == "code"]
        assert all(f["status"] == "unchecked" for f in code_findings)  # nothing on this pin called unchanged
        assert "t.repo.edited" not in doc["stale_claims"] and "t.repo.edited" not in doc["upstream_changed"]
    else:
        # The test repository's pin is fixed: the edit is information beside the status, not staleness.
        assert code == 1 and "t.repo.edited" in doc["upstream_changed"]


@pytest.mark.parametrize("fault", ["timeout", "404", "500", "truncated"])
def test_contents_faults_mark_only_that_anchor_unchecked(tmp_path: Path, upstream: FakeUpstream, fault: str) -> None:
    upstream.faults["/contents/src/kernel.cu"] = [fault]
    cfg, db = index(_project(tmp_path, upstream))
    report = audit(cfg, db, backend="http")
    status, detail = _status(report, "t.repo.edited", "code")
    if fault == "404":
        # A 404 for the pinned file means the anchor does not match its pin: reported, not hidden.
        assert status == "invalid"
    else:
        assert status == "unchecked" and "GitHub API" in detail
    assert _status(report, "t.repo.unchanged", "code")[0] != "unchanged"
    assert _status(report, "t.repo.deleted", "code")[0] == "deleted"  # other files unaffected


def test_arxiv_new_version_flags_citing_claims(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.arxiv_versions["2205.14135"] = 3
    root = _project(tmp_path, upstream)
    cfg, db = index(root)
    assert run_audit(cfg, db, backend="http") == 1
    doc = json.loads((root / ".kb" / "audit-full.json").read_text())
    # A paper version is fixed: v2 still says what it said; v3 is information for the reader.
    assert "t.paper" not in doc["stale_claims"]
    assert "new-version" in doc["upstream_changed"]["t.paper"]


@pytest.mark.parametrize("fault,words", [("malformed", "malformed Atom"), ("500", "HTTP 500"), ("timeout", "timed out"),
                                         ("truncated", "truncated")])
def test_arxiv_faults_leave_papers_unchecked(tmp_path: Path, upstream: FakeUpstream, fault: str, words: str) -> None:
    upstream.faults["/arxiv"] = [fault]
    cfg, db = index(_project(tmp_path, upstream))
    report = audit(cfg, db, backend="http")
    status, detail = _status(report, "t.paper", "paper1")
    assert status == "unchecked" and words in detail


def test_arxiv_without_entry_is_unchecked(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.arxiv_versions.clear()
    cfg, db = index(_project(tmp_path, upstream))
    status, detail = _status(audit(cfg, db, backend="http"), "t.paper", "paper1")
    assert status == "unchecked" and "no entry" in detail


def test_web_page_change_and_removal(tmp_path: Path, upstream: FakeUpstream) -> None:
    cfg, db = index(_project(tmp_path, upstream))
    upstream.page = b"<html>rewritten</html>"
    assert _status(audit(cfg, db, backend="http"), "t.page", "page1")[0] == "changed"
    upstream.faults["/page"] = ["404"]
    assert _status(audit(cfg, db, backend="http"), "t.page", "page1")[0] == "deleted"


def test_offline_http_backend_says_what_it_skipped(tmp_path: Path, upstream: FakeUpstream) -> None:
    cfg, db = index(_project(tmp_path, upstream))
    report = audit(cfg, db, backend="http", offline=True)
    assert upstream.requests == []
    status, detail = _status(report, "t.repo.unchanged", "code")
    assert status == "unchecked" and "offline" in detail
    assert _status(report, "t.paper", "paper1") == ("unchecked", "offline: arXiv not queried")
    # Notes still come from their local clone.
    assert _status(report, "t.notes.edited", "fa-notes")[0] == "edited"


def test_rate_limit_blocks_only_its_own_host(tmp_path: Path) -> None:
    """GitHub's exhausted quota must not stall requests to another host."""
    from kb.http import FetchError, HttpClient

    class Resp:
        def __init__(self, status: int, headers: dict[str, str]) -> None:
            self.status_code, self.headers, self.content = status, headers, b"{}"

    seen: list[str] = []

    def fake_get(url: str, headers: dict[str, str], timeout: float) -> Resp:
        seen.append(url)
        if "api.github.test" in url:
            return Resp(403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 3600)})
        return Resp(200, {})

    client = HttpClient(tmp_path / "cache", sleep=lambda s: None)
    client.max_wait = 5
    client.session.get = fake_get  # type: ignore[method-assign]
    with pytest.raises(FetchError, match="rate"):
        client.get("https://api.github.test/repos/a/b/compare/x...y")
    n = len(seen)
    with pytest.raises(FetchError, match="rate limit exhausted"):
        client.get("https://api.github.test/repos/a/b/contents/k.cu")  # fails fast: no request spent
    assert len(seen) == n
    assert client.get("https://export.arxiv.test/api/query?id_list=1").status == 200  # another host is not blocked


def test_request_budget_per_pin_as_documented(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Per pin: one compare, then contents (pin and head side) only for changed cited files; for every cited
    file when the listing hits GitHub's 300-file cap. A second audit costs no compare or contents request."""
    cfg, db = index(_project(tmp_path, upstream))
    cited = {"src/kernel.cu", "src/untouched.cu", "src/old_name.h", "src/gone.cu", "src/helper.cu", "src/sched.cu"}

    def spent() -> tuple[int, set[str], int]:
        paths = [p for p, _ in upstream.requests]
        files = [unquote(p.split("/contents/")[1].split("?")[0]) for p in paths if "/contents/" in p]
        return sum("/compare/" in p for p in paths), set(files), len(files)

    audit(cfg, db, backend="http")
    compares, files, n = spent()
    assert compares == 1 and "src/untouched.cu" not in files and n <= 2 * len(cited - {"src/untouched.cu"})
    upstream.requests.clear()
    audit(cfg, db, backend="http")
    assert spent()[0] == 0 and spent()[2] == 0  # SHAs on both ends: answered from the on-disk cache
    # Over the cap: the listing is incomplete, so every cited file is compared by content.
    upstream.requests.clear()
    upstream.pad_compare_to = 300
    cfg2, db2 = index(_project(tmp_path / "capped", upstream))
    report = audit(cfg2, db2, backend="http")
    compares, files, n = spent()
    assert compares == 1 and "src/untouched.cu" in files and n <= 2 * len(cited)
    assert any("GitHub's cap" in note for row in report.pins for note in row["notes"])
