"""Web pages: the page's content hash against the one recorded in sources/.

A page with no recorded `content_sha256` cannot be judged (there is nothing to
compare with): it is reported `unpinned`, information for the reader (record a
hash with `kb audit --record-web`), neither fresh nor a failure of the audit. Fetches go through the
audit's HttpClient, so a page that answers 304 to its cached ETag is compared
by its cached body.
"""

from __future__ import annotations

import hashlib

from kb.audit.model import Unchecked
from kb.http import FetchError, HttpClient, NotFound
from kb.records.models import Source


def check_page(source: Source, client: HttpClient | None) -> tuple[str, str]:
    """(status, detail) for one web source: unchanged, changed, deleted or unpinned; raises Unchecked."""
    if not source.content_sha256:
        why = f" ({source.why_unhashed})" if source.why_unhashed else ""
        return "unpinned", f"no content_sha256 recorded in sources/{why}: nothing to compare with (kb audit --record-web)"
    if client is None:
        raise Unchecked("offline: page not fetched", offline=True)
    try:
        resp = client.get(source.url or "", "text/html,*/*;q=0.8")
    except NotFound:
        return "deleted", f"{source.url} answers 404"
    except FetchError as exc:
        raise Unchecked(f"{source.url}: {exc}") from None
    got = hashlib.sha256(resp.body).hexdigest()
    if got == source.content_sha256:
        return "unchanged", "content hash matches" + (" (304 Not Modified: cached body)" if resp.cached else "")
    return "changed", f"content sha256 now {got[:16]}…, recorded {source.content_sha256[:16]}…"
