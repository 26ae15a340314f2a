"""kb's one HTTP client: ETag cache on disk, rate limits, bounded retries, compressed bodies.

Every network read kb makes goes through `HttpClient`: the audit (GitHub, arXiv, web pages),
`kb coverage --online` (the notes at their pin), `kb verify --online` (cited files at a SHA, fetched
before the workers start) and `kb export site --previous URL`.

- Bodies sent with `Content-Encoding: gzip` or `deflate` are decoded; Content-Length counts the
  encoded bytes, so a body is truncated only when fewer encoded bytes arrive than it announced.

- Conditional requests: a cached ETag / Last-Modified is sent back, and a 304
  reuses the cached body (GitHub does not count 304s against the rate limit).
  Responses for immutable URLs (a content address: both commit SHAs fixed) are
  served from the cache without asking again.
- The GitHub token is sent only to the GitHub API host, only as a request
  header; it is never written to the cache, to errors or to logs.
- 429/403 with Retry-After, and an exhausted X-RateLimit-Remaining, are waited
  out when the wait is short (KB_HTTP_MAX_WAIT seconds), else reported; 5xx,
  timeouts, dropped connections and truncated bodies are retried a bounded
  number of times (KB_HTTP_RETRIES) with exponential backoff (KB_HTTP_BACKOFF).
Every failure ends as a FetchError with a one-line reason, never as data.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import requests

# What the client asks for and decodes (urllib3 decodes both; brotli only if its optional module is present,
# so it is not offered).
ACCEPT_ENCODING = "gzip, deflate"


def cache_dir(root: Path) -> Path:
    """The client's cache folder for a project: $KB_HTTP_CACHE (relative to the project), else .kb/http-cache."""
    return root / os.environ.get("KB_HTTP_CACHE", str(Path(".kb") / "http-cache"))


class FetchError(Exception):
    """The resource could not be fetched; the message says why, in one line."""


class NotFound(FetchError):
    """HTTP 404: the resource does not exist (a meaningful answer, not a fault)."""


@dataclass
class Response:
    """A fetched (or cache-served) body."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    cached: bool = False

    def text(self) -> str:
        """The body as UTF-8 text; FetchError when it is not."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FetchError(f"body is not UTF-8 ({len(self.body)} bytes): {exc}") from None

    def json(self) -> object:
        """The body as JSON; FetchError when it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FetchError(f"malformed JSON ({len(self.body)} bytes): {exc}") from None


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class HttpClient:
    """GET with an on-disk ETag cache, rate-limit handling and bounded retries."""

    def __init__(self, cache_dir: Path | None, *, auth_base: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cache_dir = cache_dir
        self.auth_base = auth_base.rstrip("/") if auth_base else None
        self.timeout = _env_float("KB_HTTP_TIMEOUT", 20.0)
        self.retries = int(_env_float("KB_HTTP_RETRIES", 3))
        self.backoff = _env_float("KB_HTTP_BACKOFF", 1.0)
        self.max_wait = _env_float("KB_HTTP_MAX_WAIT", 60.0)
        self.sleep = sleep
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "kb (FlashAttention claims knowledge base)"
        self.session.headers["Accept-Encoding"] = ACCEPT_ENCODING
        self.stats = {"requests": 0, "not_modified": 0, "cache_hits": 0, "retries": 0}
        # An exhausted quota blocks only its own host: GitHub's limit must not stall arXiv or a vendor page.
        self._blocked_until: dict[str, float] = {}

    # -- cache ----------------------------------------------------------------
    def _key(self, url: str, accept: str) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / (hashlib.sha256(f"{url}\n{accept}".encode()).hexdigest() + ".json")

    def _load(self, url: str, accept: str) -> dict | None:
        path = self._key(url, accept)
        try:
            data = json.loads(path.read_text())
            data["body"] = base64.b64decode(data["body_b64"])
            return data
        except (OSError, ValueError, KeyError):
            return None

    def _store(self, url: str, accept: str, resp: requests.Response, body: bytes) -> None:
        # Only what identifies the response: never request headers (the token lives there).
        rec = {"url": url, "accept": accept, "etag": resp.headers.get("ETag"),
               "last_modified": resp.headers.get("Last-Modified"), "stored_at": time.time(),
               "body_b64": base64.b64encode(body).decode()}
        path = self._key(url, accept)
        path.parent.mkdir(parents=True, exist_ok=True)
        path = self._key(url, accept)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(path)

    def cached(self, url: str, accept: str = "application/json") -> bytes | None:
        """The body an earlier GET of url stored, without any request (offline reads); None if none."""
        if self.cache_dir is None:
            return None
        hit = self._load(url, accept)
        return hit["body"] if hit is not None else None

    # -- request ----------------------------------------------------------------
    def _headers(self, url: str, accept: str, cached: dict | None) -> dict[str, str]:
        headers = {"Accept": accept}
        if cached:
            if cached.get("etag"):
                headers["If-None-Match"] = cached["etag"]
            if cached.get("last_modified"):
                headers["If-Modified-Since"] = cached["last_modified"]
        token = os.environ.get("GITHUB_TOKEN")
        if token and self.auth_base and url.startswith(self.auth_base + "/"):
            headers["Authorization"] = f"Bearer {token}"
            headers["X-GitHub-Api-Version"] = "2022-11-28"
        return headers

    def _wait(self, seconds: float, why: str, url: str) -> None:
        if seconds > self.max_wait:
            raise FetchError(f"{why}: would have to wait {seconds:.0f} s "
                             f"(over KB_HTTP_MAX_WAIT={self.max_wait:.0f}) for {_short(url)}")
        self.sleep(max(0.0, seconds))

    def get(self, url: str, accept: str = "application/json", *, immutable: bool = False,
            keep: bool = True) -> Response:
        """GET url; raises NotFound on 404 and FetchError on anything else that is not a body.

        `keep=False`: neither read nor write the ETag cache (the caller keeps the body itself).
        """
        keep = keep and self.cache_dir is not None  # a client made without a cache folder keeps nothing
        cached = self._load(url, accept) if keep else None
        if cached is not None and immutable:
            self.stats["cache_hits"] += 1
            return Response(200, cached["body"], cached=True)
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                self.stats["retries"] += 1
            until = self._blocked_until.get(urlsplit(url).netloc, 0.0)
            if until > time.time():
                self._wait(until - time.time(), "rate limit exhausted", url)
            try:
                self.stats["requests"] += 1
                resp = self.session.get(url, headers=self._headers(url, accept, cached), timeout=self.timeout)
                # Decoded per Content-Encoding; raises when fewer (encoded) bytes arrive than Content-Length says.
                body = resp.content
            except requests.Timeout:
                last = f"timed out after {self.timeout:g} s"
            except requests.exceptions.ContentDecodingError:
                last = "body truncated or not valid for its Content-Encoding"
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                last = "connection dropped or body truncated" if "IncompleteRead" in str(exc) or isinstance(
                    exc, requests.exceptions.ChunkedEncodingError) else f"connection failed ({type(exc).__name__})"
            else:
                self._note_limits(url, resp)
                if resp.status_code == 304 and cached is not None:
                    self.stats["not_modified"] += 1
                    return Response(200, cached["body"], dict(resp.headers), cached=True)
                if resp.status_code == 200:
                    if keep:
                        self._store(url, accept, resp, body)
                    return Response(200, body, dict(resp.headers))
                if resp.status_code == 404:
                    raise NotFound(f"HTTP 404 for {_short(url)}")
                wait = self._retry_after(resp)
                if wait is not None:
                    last = f"HTTP {resp.status_code}: rate limited"
                    if attempt < self.retries:
                        self._wait(wait, last, url)
                        continue
                elif resp.status_code >= 500:
                    last = f"HTTP {resp.status_code} (server error)"
                else:
                    raise FetchError(f"HTTP {resp.status_code} for {_short(url)}: {_snippet(body)}")
            if attempt < self.retries:
                self.sleep(self.backoff * (2 ** attempt))
        raise FetchError(f"{last} for {_short(url)} ({self.retries + 1} attempts)")

    def _retry_after(self, resp: requests.Response) -> float | None:
        """Seconds to wait before retrying a 429/403 rate-limit answer, else None."""
        if resp.status_code not in (403, 429):
            return None
        ra = resp.headers.get("Retry-After")
        if ra is not None:
            try:
                return float(ra)
            except ValueError:
                return self.max_wait + 1  # an HTTP date: treat as "long"; reported, not slept
        if resp.headers.get("X-RateLimit-Remaining") == "0":
            reset = resp.headers.get("X-RateLimit-Reset")
            return max(0.0, float(reset) - time.time()) if reset and reset.isdigit() else self.max_wait + 1
        return 1.0 if resp.status_code == 429 else None

    def _note_limits(self, url: str, resp: requests.Response) -> None:
        # Remember an exhausted quota so the next request to that host waits (or fails fast)
        # instead of spending a request that is sure to be refused.
        if resp.headers.get("X-RateLimit-Remaining") == "0":
            reset = resp.headers.get("X-RateLimit-Reset", "")
            self._blocked_until[urlsplit(url).netloc] = float(reset) if reset.isdigit() else time.time() + self.max_wait + 1


def _short(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.netloc}{parts.path}"


def _snippet(body: bytes) -> str:
    return body[:160].decode("utf-8", "replace").replace("\n", " ")
