"""`kb audit --record-web`: pin web pages by recording their content hash in sources/.

A web source without `content_sha256` cannot be audited (nothing to compare
with). Recording fetches each such page once and writes the hash, and the
retrieval date, into the YAML item that defines the source — a targeted text
edit, so comments and formatting survive. The edited file is re-validated
before it replaces the original; on any failure the file is left as it was.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path

from kb.http import FetchError, HttpClient, cache_dir
from kb.records.loader import load_corpus
from kb.records.models import Source


def _set_field(block: list[str], key: str, value: str, indent: str) -> list[str]:
    """Replace `key:` in a YAML list item's lines, or append it to the item."""
    pat = re.compile(rf"^{indent}{key}:")
    for i, line in enumerate(block):
        if pat.match(line):
            block[i] = f"{indent}{key}: {value}\n"
            return block
    # Append after the last non-blank line of the item.
    end = len(block)
    while end > 1 and not block[end - 1].strip():
        end -= 1
    return [*block[:end], f"{indent}{key}: {value}\n", *block[end:]]


def _drop_field(block: list[str], key: str, indent: str) -> list[str]:
    """Remove `key:` and its continuation lines (indented deeper than the item's keys) from an item's lines."""
    out: list[str] = []
    dropping = False
    for line in block:
        if re.match(rf"^{indent}{key}:", line):
            dropping = True
            continue
        if dropping and line.strip() and line.startswith(indent + " "):
            continue
        dropping = False
        out.append(line)
    return out


def write_hash(path: Path, source_id: str, sha256: str, day: str) -> None:
    """Record content_sha256 and retrieved for one source item of a sources/*.yaml file."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(rf"^(\s*)- id: {re.escape(source_id)}\s*$", line)), None)
    if start is None:
        raise KeyError(f"{source_id} is not defined in {path}")
    dash = lines[start].index("-")
    indent = " " * (dash + 2)
    end = next((j for j in range(start + 1, len(lines))
                if re.match(rf"^\s{{0,{dash}}}\S", lines[j]) and not lines[j].startswith(indent)), len(lines))
    block = _set_field(lines[start:end], "content_sha256", sha256, indent)
    block = _set_field(block, "retrieved", day, indent)
    block = _drop_field(block, "why_unhashed", indent)  # the page has a hash now: the reason for none is void
    path.write_text("".join([*lines[:start], *block, *lines[end:]]), encoding="utf-8")


def record_web(root: Path, client: HttpClient | None = None, only_missing: bool = True,
               only: set[str] | None = None) -> list[tuple[str, str]]:
    """Fetch web sources (all, or the ids in `only`) and record their hashes; (source id, outcome) per page."""
    if client is None:
        from kb.audit.github import api_base

        client = HttpClient(cache_dir(root), auth_base=api_base())
    corpus = load_corpus(root)
    day = datetime.now(UTC).date().isoformat()
    out: list[tuple[str, str]] = []
    for sid, src in sorted(corpus.sources.items()):
        if src.kind != "web" or (only_missing and src.content_sha256) or (only and sid not in only):
            continue
        try:
            resp = client.get(src.url or "", "text/html,*/*;q=0.8")
        except FetchError as exc:
            out.append((sid, f"not recorded: {exc}"))
            continue
        digest = hashlib.sha256(resp.body).hexdigest()
        path = root / corpus.source_at[sid].path
        original = path.read_text(encoding="utf-8")
        try:
            write_hash(path, sid, digest, day)
            check = load_corpus(root)
            bad = [p for p in check.problems if p.path == corpus.source_at[sid].path]
            if bad or not isinstance(check.sources.get(sid), Source) or check.sources[sid].content_sha256 != digest:
                raise ValueError(f"edit did not validate: {bad[0] if bad else 'hash not read back'}")
        except (KeyError, ValueError) as exc:
            path.write_text(original, encoding="utf-8")
            out.append((sid, f"not recorded: {exc}"))
            continue
        out.append((sid, f"recorded {digest[:16]}…"))
    return out
