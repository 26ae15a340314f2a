"""A web source that could not be fetched says why it has no content hash (`why_unhashed`), and a hash voids it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kb.audit.record import write_hash
from kb.audit.web import check_page
from kb.export.site.data import anchor_view, source_links
from kb.records.loader import load_corpus
from kb.records.models import Source

WHY = "fetch tried 2026-12-02: connection failed"


def test_why_unhashed_only_on_a_web_source_without_a_hash() -> None:
    assert Source(id="p", kind="web", url="https://example.org/p", why_unhashed=WHY).why_unhashed == WHY
    with pytest.raises(ValidationError, match="why_unhashed"):
        Source(id="p", kind="web", url="https://example.org/p", why_unhashed=WHY, content_sha256="a" * 64)
    with pytest.raises(ValidationError, match="why_unhashed"):
        Source(id="r", kind="repo", url="https://github.com/a/b", why_unhashed=WHY)


def test_the_reason_shows_in_the_audit_and_on_the_site() -> None:
    src = Source(id="p", kind="web", url="https://example.org/p", why_unhashed=WHY)
    status, detail = check_page(src, None)  # unpinned is decided before any fetch
    assert status == "unpinned" and WHY in detail
    dumped = src.model_dump(mode="json")
    assert (f"no content hash: {WHY}", None) in source_links(dumped)
    assert f"no content hash: {WHY}" in anchor_view({"source": "p"}, {"p": dumped})["details"]


def test_recording_a_hash_drops_the_reason(tmp_path: Path) -> None:
    (tmp_path / "sources").mkdir()
    (tmp_path / "claims").mkdir()
    yml = tmp_path / "sources" / "web.yaml"
    yml.write_text("sources:\n  - id: page\n    kind: web\n    url: https://example.org/p\n"
                   f"    why_unhashed: >-\n      {WHY},\n      continued\n  - id: other\n    kind: web\n"
                   f"    url: https://example.org/o\n    why_unhashed: \"{WHY}\"\n")
    write_hash(yml, "page", "b" * 64, "2026-12-02")
    corpus = load_corpus(tmp_path)
    assert not [p for p in corpus.problems if "sources" in str(p.path)], corpus.problems
    page, other = corpus.sources["page"], corpus.sources["other"]
    assert page.content_sha256 == "b" * 64 and page.why_unhashed is None
    assert other.why_unhashed == WHY  # the neighbouring item keeps its reason
