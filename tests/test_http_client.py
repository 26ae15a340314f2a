"""kb's one HTTP client (kb/http.py) on loopback: gzip and deflate bodies, truncation, and the reads that use it.

No test here reaches past 127.0.0.1; "unreachable" is a loopback port nothing listens on.
"""

from __future__ import annotations

import gzip
import http.server
import json
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb.http import FetchError, HttpClient
from kb.pinned.notes import lines_sha256
from tests.conftest import claim, kb_subprocess, write_claims


class Served:
    """A loopback server answering path -> (status, body bytes as sent, headers); counts requests per path."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self.hits: dict[str, int] = {}
        self.truncate: dict[str, int] = {}  # path -> bytes to leave out of the body while announcing them all
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.hits[self.path] = served.hits.get(self.path, 0) + 1
                status, body, headers = served.routes.get(self.path, (404, b"not found", {}))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut = served.truncate.get(self.path, 0)
                self.wfile.write(body[: len(body) - cut])
                if cut:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def served() -> Iterator[Served]:
    s = Served()
    try:
        yield s
    finally:
        s.server.shutdown()
        s.server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on: a connection there is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TEXT = b"line one\n" * 200


def test_gzip_and_deflate_bodies_are_decoded(served: Served, tmp_path: Path) -> None:
    # Content-Length counts the encoded bytes, much fewer than the decoded ones: no false "truncated".
    served.routes["/gz"] = (200, gzip.compress(TEXT), {"Content-Encoding": "gzip"})
    served.routes["/df"] = (200, zlib.compress(TEXT), {"Content-Encoding": "deflate"})
    client = HttpClient(tmp_path / "cache")
    assert client.get(f"{served.base}/gz", "*/*").body == TEXT
    assert client.get(f"{served.base}/df", "*/*").body == TEXT
    assert len(gzip.compress(TEXT)) < len(TEXT) / 10
    # What was cached is the decoded body.
    assert client.cached(f"{served.base}/gz", "*/*") == TEXT


def test_truncated_gzip_body_is_a_fetch_error(served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_HTTP_RETRIES", "1")
    served.routes["/gz"] = (200, gzip.compress(TEXT), {"Content-Encoding": "gzip"})
    served.truncate["/gz"] = 10
    client = HttpClient(tmp_path / "cache", sleep=lambda s: None)
    with pytest.raises(FetchError, match="truncated"):
        client.get(f"{served.base}/gz", "*/*")
    assert served.hits["/gz"] == 2  # retried once, as configured
    assert client.cached(f"{served.base}/gz", "*/*") is None  # nothing partial kept


def test_unreachable_host_is_a_fetch_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_HTTP_RETRIES", "0")
    with pytest.raises(FetchError, match="connection failed"):
        HttpClient(tmp_path / "cache").get(f"http://127.0.0.1:{closed_port()}/x")


def test_verify_online_reads_a_gzip_encoded_file(project: Path, tmp_path: Path, served: Served) -> None:
    """`kb verify --online`: the cited file, served gzip-encoded, is fetched by kb's client into the raw cache
    and the source check reads it (the verifier's own client rejected such a body as truncated)."""
    sha = "b" * 40
    body = b"int a;\natomicAdd(dq_accum, x);\nint b;\n" * 20
    served.routes[f"/owner/repo/{sha}/k.h"] = (200, gzip.compress(body), {"Content-Encoding": "gzip"})
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://github.com/owner/repo\n    pins:\n      main: {sha}\n")
    anchor = {"source": "testrepo", "sha": sha, "path": "k.h", "lines": [2, 2], "sha256": lines_sha256(body, 2, 2)[0]}
    base = claim("x.y")["anchors"][0]
    write_claims(project, "src", [claim("test.gz.ok", label="source-backed", anchors=[base, anchor],
                                        checks=[{"verifier": "source.lines",
                                                 "params": {"anchor": 1, "tokens": ["atomicAdd"]}}])])
    env = {"KB_RAW_BASE": served.base, "KB_HTTP_CACHE": str(tmp_path / "cache")}
    res = kb_subprocess(project, "verify", "--online", "--claim", "test.gz.ok", "--json", env=env)
    summary = json.loads(res.stdout)
    assert res.returncode == 0, res.stderr
    assert summary["verdicts"] == {"supports": 1} and not summary["errors"]
    assert (tmp_path / "cache" / "raw" / "owner" / "repo" / sha / "k.h").read_bytes() == body
    assert served.hits[f"/owner/repo/{sha}/k.h"] == 1  # fetched once, by kb (the worker found it on disk)
