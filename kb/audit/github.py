"""The HTTP backend for repositories: GitHub's REST API instead of a clone.

Per repository: the head (`GET /repos/{o}/{r}` for the default branch, then
`GET /repos/{o}/{r}/commits/{branch}` as a bare SHA; with --ref only the
second), then one `GET /repos/{o}/{r}/compare/{pin}...{head}` per pin, and
`GET /repos/{o}/{r}/contents/{path}?ref={sha}` (raw) only for cited files the
comparison lists as changed. Both ends are SHAs, so compare and contents
answers are immutable and served from the on-disk cache on later audits.

The compare listing stops at 300 files, and for a pin that is not an ancestor
of head it lists merge-base..head; in both cases the listing is marked
incomplete and every cited file is compared by content instead.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

from kb.audit.classify import Change, PinDiff
from kb.audit.model import RepoSide, Unchecked
from kb.http import FetchError, HttpClient, NotFound, Response
from kb.records.models import Source

GITHUB_FILES_CAP = 300
_GITHUB = re.compile(r"^https?://(?:www\.)?github\.com/([^/]+)/([^/#?]+?)(?:\.git)?/?$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_STATUS = {"removed": "D", "renamed": "R", "modified": "M", "changed": "M", "added": "A", "copied": "C"}


def api_base() -> str:
    """The GitHub API root; KB_GITHUB_API points tests at a loopback server."""
    return os.environ.get("KB_GITHUB_API", "https://api.github.com").rstrip("/")


class GitHubSource(RepoSide):
    """A repository read through the GitHub REST API; same interface as audit_git.GitSource."""

    cheap_reads = False

    def __init__(self, source: Source, client: HttpClient, *, offline: bool, ref: str | None) -> None:
        super().__init__(source, offline=offline, ref=ref)
        self.client = client
        m = _GITHUB.match(source.url or "")
        self.slug = f"{m.group(1)}/{m.group(2)}" if m else None
        self.base = f"{api_base()}/repos/{self.slug}"

    def _get(self, url: str, accept: str = "application/vnd.github+json", immutable: bool = False) -> Response:
        try:
            return self.client.get(url, accept, immutable=immutable)
        except NotFound:
            raise
        except FetchError as exc:
            raise Unchecked(f"GitHub API: {exc}") from None

    def open(self) -> None:
        """Resolve the head SHA (default branch or --ref); raises Unchecked."""
        if self.offline:
            raise Unchecked("offline: the http backend needs the GitHub API", offline=True)
        if self.slug is None:
            raise Unchecked(f"the http backend reads GitHub repositories only; {self.source.url} is not one")
        branch = self.ref
        try:
            if branch is None:
                data = self._get(self.base).json()
                branch = data.get("default_branch") if isinstance(data, dict) else None
                if not isinstance(branch, str) or not branch:
                    raise Unchecked(f"GitHub API: no default_branch in the answer for {self.slug}")
            sha = self._get(f"{self.base}/commits/{quote(branch, safe='')}", "application/vnd.github.sha").body
        except NotFound as exc:
            raise Unchecked(f"GitHub API: {exc} (repository or ref {branch!r} not found)") from None
        except FetchError as exc:  # malformed JSON
            raise Unchecked(f"GitHub API: {exc}") from None
        text = sha.decode("ascii", "replace").strip()
        if not _SHA.match(text):
            raise Unchecked(f"GitHub API: {branch} did not resolve to a commit SHA (got {text[:60]!r})")
        self.head, self.head_ref = text, f"{branch} (GitHub)"

    def diff(self, pin: str) -> PinDiff:
        """One compare request for the pin; raises Unchecked."""
        out = PinDiff(pin=pin, head=self.head)
        if pin == self.head:
            return out
        try:
            data = self._get(f"{self.base}/compare/{pin}...{self.head}", immutable=True).json()
        except NotFound:
            raise Unchecked(f"GitHub API: compare {pin[:12]}...{self.head[:12]} not found (pin unknown to GitHub?)") from None
        except FetchError as exc:
            raise Unchecked(f"GitHub API: compare {pin[:12]}: {exc}") from None
        files = data.get("files") if isinstance(data, dict) else None
        status = data.get("status") if isinstance(data, dict) else None
        if not isinstance(files, list) or not isinstance(status, str):
            raise Unchecked(f"GitHub API: compare {pin[:12]}: answer lacks files/status")
        for f in files:
            if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
                raise Unchecked(f"GitHub API: compare {pin[:12]}: a file entry is malformed")
            letter = _STATUS.get(f.get("status", ""), "M")
            if letter == "R" and isinstance(f.get("previous_filename"), str):
                out.changes[f["previous_filename"]] = Change("R", f["filename"])
            elif letter not in ("A", "C"):
                out.changes[f["filename"]] = Change(letter)
        if status not in ("ahead", "identical"):
            out.complete = False
            out.notes.append(f"pin {pin[:12]} is not an ancestor of head ({status}): cited files compared by content")
        elif len(files) >= GITHUB_FILES_CAP or data.get("too_many_files"):
            out.complete = False
            out.notes.append(f"compare {pin[:12]} lists {len(files)} files (GitHub's cap): cited files compared by content")
        return out

    def read(self, rev: str, path: str) -> bytes | None:
        """Raw file at a commit SHA; None on 404; Unchecked on any fault."""
        url = f"{self.base}/contents/{quote(path)}?ref={rev}"
        try:
            return self._get(url, "application/vnd.github.raw", immutable=bool(_SHA.match(rev))).body
        except NotFound:
            return None

    def find_symbols(self, rev: str, symbols: set[str]) -> None:
        """Code search needs the git backend (GitHub searches only the default branch, with auth)."""
        return None

    def close(self) -> None:
        """Nothing to release."""
