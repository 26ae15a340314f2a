"""Classify repository and note anchors between a pin and a head.

Pure logic over a `PinDiff` (which files changed between pin and head, with
renames) and a `Reader` (file bytes at a revision, symbol search), so the git
and HTTP backends share one set of rules:

- repo anchors: unchanged, moved (same lines elsewhere in the file, new span
  proposed), renamed (file renamed; lines found there), edited (short unified
  diff, mapped span proposed), deleted, symbol-elsewhere (the anchor's symbol
  now lives in another file), invalid (the anchor does not match its own pin);
- note anchors: the section named by the heading slug is re-hashed at head.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kb.audit.model import AnchorRef, Finding, Unchecked, short_diff
from kb.pinned.notes import Section, sections


@dataclass(frozen=True)
class Change:
    """How one pinned path changed by head: git's M, D, R (renamed to new_path), T, A, C."""

    status: str
    new_path: str | None = None


@dataclass
class PinDiff:
    """What changed between one pin and the head, as one diff listing."""

    pin: str
    head: str
    changes: dict[str, Change] = field(default_factory=dict)
    # False when the listing may omit changed paths (truncated API listing,
    # pin not an ancestor of head): absent paths are then compared by content.
    complete: bool = True
    # Paths the clone lacks blobs for; they were left out of the diff, so
    # anchors on them cannot be judged.
    missing: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


class Reader(Protocol):
    """File access at a revision, shared by the backends.

    A reader may set `cheap_reads = False` (HTTP): files the diff lists as
    unchanged are then not read at all.
    """

    def read(self, rev: str, path: str) -> bytes | None:
        """Bytes of path at rev, None when absent."""
        ...

    def find_symbols(self, rev: str, symbols: set[str]) -> dict[str, list[tuple[str, int]]] | None:
        """symbol -> [(path, line)] at rev; None when this backend cannot search."""
        ...


def split_lines(blob: bytes) -> list[bytes]:
    """Lines as kb.notes.lines_sha256 counts them (a final newline ends the last line)."""
    lines = blob.split(b"\n")
    if blob.endswith(b"\n"):
        lines.pop()
    return lines


def span_sha256(lines: list[bytes]) -> str:
    """The hash a repository anchor records for these lines."""
    return hashlib.sha256(b"\n".join(lines) + b"\n").hexdigest()


def _text(lines: list[bytes]) -> list[str]:
    return [ln.decode("utf-8", "replace") for ln in lines]


def _udiff(old: list[bytes], new: list[bytes], old_name: str, new_name: str) -> str:
    return short_diff(list(difflib.unified_diff(_text(old), _text(new), old_name, new_name, n=1, lineterm="")))


def _occurrences(block: list[bytes], lines: list[bytes]) -> list[int]:
    """0-based starts where `block` appears verbatim in `lines`."""
    n = len(block)
    first = block[0]
    return [i for i in range(len(lines) - n + 1) if lines[i] == first and lines[i:i + n] == block]


Opcodes = list[tuple[str, int, int, int, int]]


def _map_span(ops: Opcodes, new: list[bytes], start: int, end: int) -> tuple[int, int]:
    """Map a 1-based inclusive span through a line diff's opcodes; end < start if it vanished."""

    def at(i: int, is_end: bool) -> int:
        for tag, i1, i2, j1, j2 in ops:
            if i1 <= i < i2:
                if tag == "equal":
                    return j1 + (i - i1)
                return (j2 - 1) if is_end else j1
        return len(new) - 1 if is_end else len(new)

    return at(start - 1, False) + 1, at(end - 1, True) + 1


def _tokens(line: bytes) -> frozenset[bytes]:
    return frozenset(re.findall(rb"\w+|[^\w\s]", line))


def _narrow(cited: list[bytes], lines: list[bytes], ns: int, ne: int, limit: int = 2000) -> tuple[int, int]:
    """Within a mapped block longer than the cited span, the window of the cited length most like it.

    A line diff maps a span inside a rewritten block to the whole block; the
    proposal should point at the closest lines, not at the block. Similarity
    is token-set overlap per line (cheap), summed over the window.
    """
    n = len(cited)
    if ne - ns + 1 <= n or ne - ns + 1 > limit:
        return ns, ne
    want = [_tokens(ln) for ln in cited]
    have = [_tokens(ln) for ln in lines[ns - 1:ne]]

    def sim(a: frozenset[bytes], b: frozenset[bytes]) -> float:
        return len(a & b) / len(a | b) if a or b else 1.0

    best_at = max(range(len(have) - n + 1), key=lambda i: sum(sim(w, have[i + k]) for k, w in enumerate(want)))
    return ns + best_at, ns + best_at + n - 1


_WORD = "(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"


def symbol_parts(symbol: str) -> list[str]:
    """`Class::method` / `Class.method` -> ['Class', 'method']: code rarely spells the qualified name out."""
    return [p for p in re.split(r"::|\.", symbol) if p]


def symbol_line(blob: bytes, symbol: str) -> int | None:
    """1-based line where the symbol's last part first occurs, when every part of it is in the file."""
    parts = symbol_parts(symbol)
    # A plain substring test first: most candidate files fail it, and it is far cheaper than the regex.
    if not parts or not all(p.encode() in blob for p in parts):
        return None
    if not all(re.search(_WORD.format(re.escape(p)).encode(), blob) for p in parts[:-1]):
        return None
    m = re.search(_WORD.format(re.escape(parts[-1])).encode(), blob)
    return None if m is None else blob.count(b"\n", 0, m.start()) + 1


def has_symbol(blob: bytes, symbol: str) -> bool:
    """Whether every part of `symbol` occurs as a whole word in the file."""
    return symbol_line(blob, symbol) is not None


@dataclass
class PendingSymbol:
    """A repo finding waiting for the symbol search that all pins compared with one head share."""

    finding: Finding
    symbol: str
    cited: list[bytes] | None
    exclude: set[str]


class _Lines:
    """Split-line cache: each (rev, path) is read and split once per audit."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self._cache: dict[tuple[str, str], list[bytes] | None] = {}
        self._stripped: dict[tuple[str, str], list[bytes]] = {}
        self._ops: dict[tuple[str, str, str, str], Opcodes] = {}

    def get(self, rev: str, path: str) -> list[bytes] | None:
        key = (rev, path)
        if key not in self._cache:
            blob = self.reader.read(rev, path)
            self._cache[key] = None if blob is None else split_lines(blob)
        return self._cache[key]

    def stripped(self, rev: str, path: str) -> list[bytes]:
        """The file's lines without leading/trailing whitespace (for re-indent detection)."""
        key = (rev, path)
        if key not in self._stripped:
            self._stripped[key] = [ln.strip() for ln in self.get(rev, path) or []]
        return self._stripped[key]

    def opcodes(self, pin: str, path: str, head: str, head_path: str) -> Opcodes:
        """Line-diff opcodes of a file from pin to head, computed once per file."""
        key = (pin, path, head, head_path)
        if key not in self._ops:
            old, new = self.get(pin, path) or [], self.get(head, head_path) or []
            self._ops[key] = difflib.SequenceMatcher(None, old, new).get_opcodes()
        return self._ops[key]


def classify_repo(refs: list[AnchorRef], diff: PinDiff, reader: Reader) -> list[Finding]:
    """Classify every repo anchor of one pin, with one symbol search for those that need it."""
    found, pending = classify_repo_deferred(refs, diff, reader)
    settle_symbols(pending, reader, diff.head)
    return found


def classify_repo_deferred(refs: list[AnchorRef], diff: PinDiff, reader: Reader) -> tuple[list[Finding], list[PendingSymbol]]:
    """Classify every repo anchor of one pin; deleted/edited anchors whose symbol left the file
    come back pending, so all pins compared with one head can share one symbol search."""
    cache = _Lines(reader)
    out: list[Finding] = []
    pending: list[PendingSymbol] = []
    for ref in refs:
        try:
            got = _classify_repo_anchor(ref, diff, reader, cache)
        except Unchecked as exc:  # a read failed (HTTP backend): this anchor only
            got = ref.finding("repo", "unchecked", exc.reason, pin=diff.pin, head=diff.head, offline=exc.offline)
        if isinstance(got, PendingSymbol):
            pending.append(got)
            out.append(got.finding)
        else:
            out.append(got)
    return out, pending


def settle_symbols(pending: list[PendingSymbol], reader: Reader, head: str) -> None:
    """One search for every pending symbol at head; updates the pending findings in place."""
    if not pending:
        return
    hits = reader.find_symbols(head, {p.symbol for p in pending})
    cache = _Lines(reader)
    for p in pending:
        _settle_symbol(p, hits, head, cache)


def _classify_repo_anchor(ref: AnchorRef, diff: PinDiff, reader: Reader, cache: _Lines) -> Finding | PendingSymbol:
    a = ref.anchor
    path = a.path or ""

    def mk(status: str, detail: str = "", **kw: object) -> Finding:
        return ref.finding("repo", status, detail, pin=diff.pin, head=diff.head, **kw)

    if not path:
        # A commit-level anchor (a pinned SHA, no file): commits are immutable, and the pin
        # was resolved to reach this point, so there is nothing that can have drifted.
        return mk("unchanged", "commit-level anchor: the pinned commit exists")
    if path in diff.missing:
        return mk("unchecked", f"{path}: its blob is missing from the clone, so its changes are unknown")
    change = diff.changes.get(path)
    if change is None and diff.complete and not getattr(reader, "cheap_reads", True):
        # Over HTTP every read is a request: an unchanged file is not fetched just to re-verify the anchor.
        return mk("unchanged", "file unchanged since the pin")
    pin_lines = cache.get(diff.pin, path)
    if pin_lines is None:
        return mk("invalid", f"{path} does not exist at the pin")
    cited: list[bytes] | None = None
    if a.lines:
        s, e = a.lines
        if e > len(pin_lines):
            return mk("invalid", f"lines {s}-{e} run past the end of {path} at the pin ({len(pin_lines)} lines)")
        cited = pin_lines[s - 1:e]
        if a.sha256 and span_sha256(cited) != a.sha256:
            return mk("invalid", "the recorded sha256 does not match the cited lines at the pin; re-hash the anchor")

    if change is None and diff.complete:
        return mk("unchanged", "file unchanged since the pin")
    head_path = change.new_path if change and change.status == "R" and change.new_path else path
    head_lines = None if change and change.status == "D" else cache.get(diff.head, head_path)
    if head_lines is None:
        if change is not None and change.status != "D":
            return mk("unchecked", f"{head_path} is listed as changed but could not be read at head")
        why = "file deleted at head" if change else "file absent at head (the change listing was partial: rename unknown)"
        f = mk("deleted", why)
        if a.symbol:
            return PendingSymbol(f, a.symbol, cited, set())
        return f
    renamed = head_path != path
    if cited is None:
        # The anchor cites the whole file (no span, no hash): any change to it is an edit.
        if head_lines == pin_lines:
            if renamed:
                return mk("renamed", f"file renamed to {head_path}, content identical", proposal={"path": head_path})
            return mk("unchanged", "file content identical at head")
        return mk("edited", "the anchor cites the whole file, and the file changed",
                  diff=_udiff(pin_lines, head_lines, f"{path}@{diff.pin[:12]}", f"{head_path}@{diff.head[:12]}"))

    s, e = a.lines  # type: ignore[misc]
    if head_lines[s - 1:e] == cited:
        if renamed:
            return mk("renamed", f"file renamed to {head_path}; cited lines at the same span",
                      proposal={"path": head_path, "lines": [s, e], "sha256": a.sha256})
        return mk("unchanged", "cited lines identical at head (the file changed elsewhere)")
    starts = _occurrences(cited, head_lines)
    if starts:
        if len(starts) > 1:
            anchor_at = _map_span(cache.opcodes(diff.pin, path, diff.head, head_path), head_lines, s, e)[0] - 1
        else:
            anchor_at = s - 1
        best = min(starts, key=lambda i: abs(i - anchor_at)) + 1
        span = [best, best + (e - s)]
        detail = f"cited lines now at {span[0]}-{span[1]}"
        if len(starts) > 1:
            detail += f" ({len(starts)} identical copies; nearest chosen)"
        if renamed:
            return mk("renamed", f"file renamed to {head_path}; {detail}",
                      proposal={"path": head_path, "lines": span, "sha256": a.sha256})
        return mk("moved", detail, proposal={"path": path, "lines": span, "sha256": a.sha256})

    stripped = [ln.strip() for ln in cited]
    loose = _occurrences(stripped, cache.stripped(diff.head, head_path))
    if loose:
        ns = min(loose, key=lambda i: abs(i - (s - 1))) + 1
        ne = ns + (e - s)
        detail = f"whitespace-only change (re-indented); now {ns}-{ne}"
    else:
        ns, ne = _map_span(cache.opcodes(diff.pin, path, diff.head, head_path), head_lines, s, e)
        ns, ne = _narrow(cited, head_lines, ns, ne)
        detail = f"cited lines changed at head (nearest now {ns}-{ne})" if ne >= ns else "cited lines removed at head"
    new = head_lines[ns - 1:ne] if ne >= ns else []
    if renamed:
        detail = f"file renamed to {head_path}; {detail}"
    f = mk("edited", detail,
           diff=_udiff(cited, new, f"{path}@{diff.pin[:12]}:{s}-{e}", f"{head_path}@{diff.head[:12]}:{ns}-{ne}"),
           proposal={"path": head_path, "lines": [ns, ne], "sha256": span_sha256(new)} if new else None)
    if a.symbol and not has_symbol(b"\n".join(head_lines), a.symbol):
        return PendingSymbol(f, a.symbol, cited, {head_path})
    return f


def _settle_symbol(p: PendingSymbol, hits: dict[str, list[tuple[str, int]]] | None, head: str, cache: _Lines) -> None:
    """Turn a deleted/edited finding into symbol-elsewhere when the symbol lives in another file."""
    f = p.finding
    if hits is None:
        f.detail += f"; symbol {p.symbol} not searched (this backend cannot search code)"
        return
    where = [(path, line) for path, line in hits.get(p.symbol, []) if path not in p.exclude and path != f.path]
    if not where:
        f.detail += f"; symbol {p.symbol} not found anywhere at head"
        return
    by_file: dict[str, list[int]] = {}
    for path, line in where:
        by_file.setdefault(path, []).append(line)
    files = sorted(by_file)
    f.status = "symbol-elsewhere"
    f.diff = None
    shown = [f"{path}:{by_file[path][0]}" + (f" (+{len(by_file[path]) - 1} lines)" if len(by_file[path]) > 1 else "")
             for path in files[:4]]
    f.detail = f"{f.detail}; symbol {p.symbol} found in " + ", ".join(shown)
    if len(files) > 4:
        f.detail += f" and {len(files) - 4} more files"
    f.proposal = None
    if p.cited:
        for path in files:
            lines = cache.get(head, path) or []
            starts = _occurrences(p.cited, lines)
            if starts:
                span = [starts[0] + 1, starts[0] + len(p.cited)]
                f.proposal = {"path": path, "lines": span, "sha256": span_sha256(p.cited)}
                f.detail += f"; cited lines found verbatim at {path}:{span[0]}-{span[1]}"
                break


def classify_notes(refs: list[AnchorRef], diff: PinDiff, reader: Reader) -> list[Finding]:
    """Re-hash each note anchor's section at head: unchanged, moved (slug changed), edited, deleted."""
    parsed: dict[tuple[str, str], dict[str, Section] | None] = {}

    def text(rev: str, path: str) -> dict[str, Section] | None:
        # Each note is parsed once per revision, however many anchors cite it.
        if (rev, path) not in parsed:
            blob = reader.read(rev, path)
            parsed[(rev, path)] = None if blob is None else (
                _deck_sections(blob.decode("utf-8", "replace")) if path.endswith(".html") else {
                    sec.slug: sec for sec in sections(blob.decode("utf-8", "replace"))})
        return parsed[(rev, path)]

    out = []
    for ref in refs:
        try:
            out.append(_classify_note_anchor(ref, diff, text))
        except Unchecked as exc:
            out.append(ref.finding("notes", "unchecked", exc.reason, pin=diff.pin, head=diff.head, offline=exc.offline))
    return out


def _classify_note_anchor(ref: AnchorRef, diff: PinDiff, text: Callable[[str, str], dict[str, Section] | None]) -> Finding:
    a = ref.anchor
    path, slug = a.path or "", a.heading or (f"slide-{a.slide}" if a.slide else "")

    def mk(status: str, detail: str = "", **kw: object) -> Finding:
        return ref.finding("notes", status, detail, pin=diff.pin, head=diff.head, **kw)

    if path in diff.missing:
        return mk("unchecked", f"{path}: its blob is missing from the clone")
    sec = (text(diff.pin, path) or {}).get(slug)
    if sec is None:
        return mk("invalid", f"no section #{slug} in {path} at the pinned commit")
    if a.sha256 and sec.sha256 != a.sha256:
        return mk("invalid", "the recorded sha256 does not match the section at the pinned commit")
    change = diff.changes.get(path)
    if change is None and diff.complete:
        return mk("unchanged", "note file unchanged since the pin")
    if change and change.status == "D":
        return mk("deleted", f"note {path} deleted at head")
    head_path = change.new_path if change and change.status == "R" and change.new_path else path
    head_secs = text(diff.head, head_path)
    if head_secs is None:
        if change is None:
            return mk("deleted", f"note {path} absent at head")
        return mk("unchecked", f"{head_path} is listed as changed but could not be read at head")
    hsec = head_secs.get(slug)
    renamed = f"note renamed to {head_path}; " if head_path != path else ""
    if hsec is not None and hsec.sha256 == sec.sha256:
        if renamed:
            return mk("renamed", renamed + "section unchanged", proposal={"path": head_path})
        return mk("unchanged", "section text identical at head")
    if a.slide and (hsec is None or hsec.sha256 != sec.sha256):
        # Slides are named by position: an inserted slide shifts the rest, so look for the text first.
        same = [s for s in head_secs.values() if s.sha256 == sec.sha256]
        if same:
            return mk("moved", f"{renamed}slide text unchanged, now at position {same[0].start}",
                      proposal={"path": head_path, "slide": same[0].start, "sha256": sec.sha256})
    if hsec is None:
        same = [s for s in head_secs.values() if s.sha256 == sec.sha256]
        if same:
            return mk("moved", f"{renamed}section text unchanged under slug #{same[0].slug}",
                      proposal={"path": head_path, "heading": same[0].slug, "sha256": sec.sha256})
        return mk("deleted", f"{renamed}section #{slug} no longer exists at head")
    old = [ln.encode() for ln in sec.text.splitlines()]
    new = [ln.encode() for ln in hsec.text.splitlines()]
    where = {"slide": a.slide} if a.slide else {"heading": slug}
    return mk("edited", f"{renamed}{'slide' if a.slide else 'section'} #{slug} changed"
              + ("" if a.slide else f" (now lines {hsec.start}-{hsec.end})"),
              diff=_udiff(old, new, f"{path}@{diff.pin[:12]}#{slug}", f"{head_path}@{diff.head[:12]}#{slug}"),
              proposal={"path": head_path, **where, "sha256": hsec.sha256})


@dataclass(frozen=True)
class _SlideSection:
    """A slide seen as a section: `slug` slide-N, `start` its position, `text` its words one per line for diffs."""

    slug: str
    sha256: str
    text: str
    start: int
    end: int


def _deck_sections(html: str) -> dict[str, _SlideSection]:
    from kb.pinned.slides import slides

    return {f"slide-{s.position}": _SlideSection(f"slide-{s.position}", s.sha256, s.text.replace(". ", ".\n"),
                                                  s.position, s.position) for s in slides(html)}
