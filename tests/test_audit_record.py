"""Recording web-page hashes, then auditing them: unchanged, then changed makes the citing claim stale."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

from kb.audit.record import record_web
from kb.http import HttpClient
from kb.records.loader import load_corpus
from tests.conftest import claim, kb_subprocess, write_claims


def test_record_then_audit_detects_change(project: Path) -> None:
    page = {"body": b"<html>Hopper has 132 SMs</html>"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(page["body"])))
            self.end_headers()
            self.wfile.write(page["body"])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/page"
    try:
        src = project / "sources" / "test-web.yaml"
        src.write_text(f"# a comment that must survive\nsources:\n  - id: test-page\n    kind: web\n    url: {url}\n"
                       f"    title: A test page\n")
        write_claims(project, "web", [claim("test.web.cites-page", label="paper-reported", checks=[],
                                            review="vendor page", anchors=[claim("x.y")["anchors"][0],
                                                                           {"source": "test-page"}])])
        client = HttpClient(project / ".kb" / "http-cache")
        assert record_web(project, client, only={"test-page"})[0][1].startswith("recorded")
        text = src.read_text()
        assert text.startswith("# a comment that must survive") and "content_sha256:" in text
        assert load_corpus(project).sources["test-page"].content_sha256

        def page_finding() -> dict:
            res = kb_subprocess(project, "audit", "--online", "--json", env={"KB_HTTP_TIMEOUT": "2", "KB_HTTP_RETRIES": "0"})
            doc = json.loads(res.stdout)
            return next(f for f in doc["findings"] if f.get("source") == "test-page")

        assert page_finding()["status"] == "unchanged"
        page["body"] = b"<html>Hopper has 144 SMs</html>"
        assert page_finding()["status"] == "changed"
        rows = {r["id"]: r for r in json.loads(kb_subprocess(project, "claims", "--json").stdout)}
        assert rows["test.web.cites-page"]["status"] == "stale"
    finally:
        server.shutdown()
