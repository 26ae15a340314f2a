"""Papers: the newest arXiv version against the pinned one, one export-API request for all papers.

`GET {KB_ARXIV_API}?id_list=ID1,ID2,...&max_results=N` answers an Atom feed whose
entry ids read `http://arxiv.org/abs/<id>v<N>`; N is the newest version. One
batched request instead of one per paper keeps to arXiv's one-request-per-three-
seconds etiquette without sleeping.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import quote

from kb.http import FetchError, HttpClient

_ATOM = "{http://www.w3.org/2005/Atom}"
_ABS = re.compile(r"/abs/(.+)v(\d+)$")


def arxiv_api() -> str:
    """The arXiv export API root; KB_ARXIV_API points tests at a loopback server."""
    return os.environ.get("KB_ARXIV_API", "http://export.arxiv.org/api/query")


@dataclass
class PaperResult:
    """The outcome for one paper: newest version, or why it could not be known."""

    arxiv: str
    newest: int | None
    error: str | None = None


def newest_versions(ids: list[str], client: HttpClient) -> dict[str, PaperResult]:
    """arXiv id -> newest version (or the reason it is unknown), from one request."""
    if not ids:
        return {}
    url = f"{arxiv_api()}?id_list={quote(','.join(ids), safe=',')}&max_results={len(ids)}"
    try:
        body = client.get(url, "application/atom+xml").body
        root = ET.fromstring(body)
    except FetchError as exc:
        return {i: PaperResult(i, None, f"arXiv API: {exc}") for i in ids}
    except ET.ParseError as exc:
        return {i: PaperResult(i, None, f"arXiv API: malformed Atom feed ({exc})") for i in ids}
    found: dict[str, int] = {}
    for entry in root.iter(f"{_ATOM}entry"):
        m = _ABS.search((entry.findtext(f"{_ATOM}id") or "").strip())
        if m:
            found[m.group(1)] = max(found.get(m.group(1), 0), int(m.group(2)))
    return {i: PaperResult(i, found.get(i), None if i in found else f"arXiv returned no entry for {i}") for i in ids}
