"""`kb sources fetch` on a fresh project: real bare repositories over file:// and a loopback HTTP server."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import NOTE_ANCHOR, claim, commit_files, git, kb_subprocess, write_claims


def _bare(tmp_path: Path, name: str) -> tuple[Path, str, str]:
    work = tmp_path / f"{name}-work"
    first = commit_files(work, {"src/a.h": "int a = 1;\n"}, "one")
    second = commit_files(work, {"src/a.h": "int a = 2;\n"}, "two")
    bare = tmp_path / f"{name}.git"
    git(tmp_path, "clone", "--bare", "-q", str(work), str(bare))
    git(bare, "update-server-info")  # what the dumb HTTP protocol serves
    return bare, first, second


def _project_sources(project: Path, url: str, pins: dict[str, str], notes_url: str | None = None) -> None:
    srcs = [{"id": "up", "kind": "repo", "url": url, "pins": pins}]
    (project / "sources" / "up.yaml").write_text(yaml.safe_dump({"sources": srcs}, sort_keys=False))


def _fetch(project: Path, *args: str, env: dict[str, str] | None = None):
    return kb_subprocess(project, "sources", "fetch", *args, env={"KB_CLONE_CACHE": str(project / ".kb" / "clones"), **(env or {})})


def test_fetch_over_file_url_is_idempotent_and_serves_the_source_checks(project: Path, tmp_path: Path) -> None:
    bare, first, second = _bare(tmp_path, "up")
    _project_sources(project, f"file://{bare}", {"old": first, "new": second})
    res = _fetch(project, "up")
    assert res.returncode == 0, res.stderr
    assert "up: cloned" in res.stderr and "1 source(s) ready, 0 not" in res.stderr
    clone = project / ".kb" / "clones" / "up.git"
    for sha in (first, second):
        git(clone, "cat-file", "-e", f"{sha}^{{commit}}")
    again = _fetch(project, "up")
    assert again.returncode == 0 and "up: present" in again.stderr  # nothing re-cloned
    # The verifiers find the fetched clone without any configuration.
    digest = __import__("kb.pinned.notes", fromlist=["lines_sha256"]).lines_sha256(b"int a = 1;\n", 1, 1)[0]
    anchor = {"source": "up", "sha": first, "path": "src/a.h", "lines": [1, 1], "sha256": digest}
    write_claims(project, "src", [claim("test.fetch.src", label="source-backed", anchors=[dict(NOTE_ANCHOR), anchor],
                                        checks=[{"verifier": "source.lines", "params": {"anchor": 1, "tokens": ["a = 1"]}}])])
    plan = json.loads(kb_subprocess(project, "verify", "--plan", "--json", "--claim", "test.fetch.src",
                                    env={"KB_CLONE_CACHE": str(project / ".kb" / "clones")}).stdout)
    assert plan[0]["action"] == "run", plan


def test_fetch_over_loopback_http(project: Path, tmp_path: Path) -> None:
    _, first, _ = _bare(tmp_path, "web")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _project_sources(project, f"http://127.0.0.1:{server.server_address[1]}/web.git", {"v": first})
        res = _fetch(project, "up")
        assert res.returncode == 0, res.stderr
        git(project / ".kb" / "clones" / "up.git", "cat-file", "-e", f"{first}^{{commit}}")
    finally:
        server.shutdown()
        server.server_close()


def test_unreachable_and_missing_pins_exit_3_and_keep_going(project: Path, tmp_path: Path) -> None:
    bare, first, _ = _bare(tmp_path, "ok")
    srcs = [{"id": "gone", "kind": "repo", "url": "http://127.0.0.1:9/nothing.git", "pins": {"v": "1" * 40}},
            {"id": "ok", "kind": "repo", "url": f"file://{bare}", "pins": {"v": first, "ghost": "2" * 40}},
            {"id": "fine", "kind": "repo", "url": f"file://{bare}", "pins": {"v": first}}]
    (project / "sources" / "up.yaml").write_text(yaml.safe_dump({"sources": srcs}, sort_keys=False))
    res = _fetch(project, "gone", "ok", "fine")
    assert res.returncode == 3
    assert "could not fetch gone" in res.stderr and "could not fetch ok" in res.stderr and "missing 1 pin" in res.stderr
    assert "1 source(s) ready, 2 not (gone, ok)" in res.stderr
    # Each failure once, with its reason: the progress line is the only place it is told.
    assert res.stderr.count("could not fetch gone") == 1 and res.stderr.count("could not fetch ok") == 1
    assert res.stderr.count("127.0.0.1:9") == 1
    assert not (project / ".kb" / "clones" / "gone.git").exists()  # no half clone under the real name
    bad = _fetch(project, "nope")
    assert bad.returncode == 2 and "not registered" in bad.stderr


def test_configured_clone_is_the_override(project: Path, tmp_path: Path) -> None:
    bare, first, _ = _bare(tmp_path, "mine")
    _project_sources(project, "http://127.0.0.1:9/never-contacted.git", {"v": first})
    res = _fetch(project, "up", env={"KB_CLONE_UP": str(bare)})
    assert res.returncode == 0 and "up: configured" in res.stderr


@pytest.mark.parametrize("sid", ["A100"])
def test_non_repository_sources_are_skipped(project: Path, sid: str) -> None:
    res = _fetch(project, sid)
    assert res.returncode == 0 and f"{sid}: skipped" in res.stderr
