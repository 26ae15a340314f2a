"""The records kb keeps: sources, anchors, claims, checks, runs and statuses.

Each model forbids unknown fields so a typo in a YAML key is an error, not a
silently ignored value. Cross-record rules (unique ids, anchors pointing at
existing sources, relation cycles) live in `kb.integrity`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import date
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from kb.records.vocab import TOPICS, Generation, Label, Phase, SourceKind, StatusName, Verdict

SHA40 = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_LINE = 10_000_000
CLAIM_ID = re.compile(r"^[a-z0-9]+(\.[a-z0-9][a-z0-9-]*)+$")


class Strict(BaseModel):
    """Base: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Source(Strict):
    """A paper, repository, notes revision, web page, hardware sheet or private report."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    kind: SourceKind
    title: str | None = None
    # paper
    arxiv: str | None = None
    version: int | None = None
    year: int | None = None
    # repo
    url: str | None = None
    pins: dict[str, str] = Field(default_factory=dict)
    # Pins that stand for "the current implementation": upstream change makes their claims stale.
    # Every other pin is fixed, a historical revision: upstream change is information, never staleness.
    tracking: list[str] = Field(default_factory=list)
    # notes
    repo: str | None = None
    commit: str | None = None
    # notes: where the notes publish themselves (https root of notes.html and slides/), for reader links
    site: str | None = None
    # web
    retrieved: date | None = None
    content_sha256: str | None = None
    # web, without a content hash: why none is recorded (the page could not be fetched here, and when)
    why_unhashed: str | None = None
    # hardware
    spec_sources: list[str] = Field(default_factory=list)
    constants: dict[str, StrictFloat | StrictInt] = Field(default_factory=dict)
    # private
    why_uncheckable: str | None = None

    @model_validator(mode="after")
    def _per_kind(self) -> Source:
        need = {
            "paper": ["arxiv", "version"],
            "repo": ["url"],
            "notes": ["repo", "commit"],
            "web": ["url"],
            "hardware": ["constants"],
            "private": ["why_uncheckable"],
        }[self.kind]
        missing = [f for f in need if not getattr(self, f)]
        if missing:
            raise ValueError(f"a {self.kind} source needs {', '.join(missing)}")
        for name, sha in self.pins.items():
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
                raise ValueError(f"pin name {name!r} is not a name (letters, digits, . _ -)")
            if not SHA40.fullmatch(sha):
                raise ValueError(f"pin {name!r} is {sha!r}, not a full 40-hex commit SHA")
        unknown = [t for t in self.tracking if t not in self.pins]
        if unknown:
            raise ValueError(f"tracking names {', '.join(map(repr, unknown))}, which is not a pin of this source")
        bad = [k for k, v in self.constants.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"constant {bad[0]!r} is not a finite number")
        if self.commit is not None and not SHA40.fullmatch(self.commit):
            raise ValueError(f"commit {self.commit!r} is not a full 40-hex commit SHA")
        if self.why_unhashed is not None and (self.kind != "web" or self.content_sha256):
            raise ValueError("why_unhashed is for a web source without content_sha256 (say why no hash is recorded)")
        return self

    def role(self, sha: str | None = None) -> str:
        """'tracking' or 'fixed' for an anchor at `sha` of this source.

        Notes, web pages and hardware sheets track by nature (the notes' text is
        what the claims restate; a page is the current document); a paper version
        is fixed (a new version does not change what the cited one says); a
        repository pin is fixed unless named in `tracking`.
        """
        if self.kind in ("notes", "web", "hardware"):
            return "tracking"
        if self.kind == "repo":
            names = {v: k for k, v in self.pins.items()}
            return "tracking" if names.get(sha or "") in self.tracking else "fixed"
        return "fixed"

    def pinned_shas(self) -> set[str]:
        """Every commit SHA this source pins."""
        shas = set(self.pins.values())
        if self.commit:
            shas.add(self.commit)
        return shas


class Anchor(Strict):
    """A claim's reference into one source; which fields apply depends on its kind."""

    source: str
    # paper locators
    section: str | None = None
    figure: str | None = None
    table: str | None = None
    equation: str | None = None
    algorithm: str | None = None
    # repo / notes
    sha: str | None = None
    path: str | None = None
    lines: tuple[StrictInt, StrictInt] | None = None
    symbol: str | None = None
    heading: str | None = None
    slide: StrictInt | None = None  # slide decks (docs/slides/*.html): 1-based position of the slide
    sha256: str | None = None
    note: str | None = None

    @field_validator("slide")
    @classmethod
    def _slide(cls, v: int | None) -> int | None:
        if v is not None and not 1 <= v <= 10_000:
            raise ValueError(f"slide {v} is not a slide position (1-based)")
        return v

    @field_validator("sha")
    @classmethod
    def _full_sha(cls, v: str | None) -> str | None:
        if v is not None and not SHA40.fullmatch(v):
            raise ValueError(f"{v!r} is not a full 40-hex commit SHA")
        return v

    @field_validator("sha256")
    @classmethod
    def _hash(cls, v: str | None) -> str | None:
        if v is not None and not SHA256.match(v):
            raise ValueError(f"{v!r} is not a 64-hex sha256")
        return v

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str | None) -> str | None:
        # Anchor paths name a file inside the cited repository: never outside it, never on this machine.
        if v is not None:
            parts = v.replace("\\", "/").split("/")
            if not v or v.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", v) or ".." in parts or "\x00" in v:
                raise ValueError(f"{v!r} is not a repository-relative path (no leading /, no '..')")
        return v

    @field_validator("lines")
    @classmethod
    def _span(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None:
            start, end = v
            if start < 1:
                raise ValueError(f"line span starts at {start}; lines are numbered from 1")
            if end > MAX_LINE:
                raise ValueError(f"line {end} is beyond any source file (at most {MAX_LINE})")
            if end < start:
                raise ValueError(f"line span [{start}, {end}] ends before it starts")
        return v

    def paper_locator(self) -> str | None:
        """'section 3.1' style text for a paper anchor, or None."""
        for key in ("section", "figure", "table", "equation", "algorithm"):
            val = getattr(self, key)
            if val:
                return f"{key} {val}"
        return None


class Comparison(Strict):
    """How a measurement must compare for the claim to hold."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    equals: Any = None
    approx: float | None = None
    rel: float | None = None
    abs: float | None = None
    at_most: float | None = None
    at_least: float | None = None
    between: tuple[float, float] | None = None
    is_: bool | None = Field(default=None, alias="is")

    @model_validator(mode="after")
    def _one_rule(self) -> Comparison:
        rules = [
            self.equals is not None,
            self.approx is not None,
            self.at_most is not None,
            self.at_least is not None,
            self.between is not None,
            self.is_ is not None,
        ]
        if sum(rules) == 0:
            raise ValueError("an expectation needs one of equals, approx, at_most, at_least, between, is")
        numbers = [self.approx, self.rel, self.abs, self.at_most, self.at_least, *(self.between or ())]
        if isinstance(self.equals, float):
            numbers.append(self.equals)
        if any(x is not None and not math.isfinite(x) for x in numbers):
            raise ValueError("an expectation's numbers must be finite (no NaN or infinity)")
        if (self.rel is not None or self.abs is not None) and self.approx is None:
            raise ValueError("rel/abs only go with approx")
        return self


class Check(Strict):
    """A verifier bound to a claim, with parameters and the expectation that makes it true."""

    verifier: str
    params: dict[str, Any] = Field(default_factory=dict)
    expect: dict[str, Comparison] = Field(default_factory=dict)


class Experiment(Strict):
    """A GPU experiment that would decide the claim, not runnable with what kb has here.

    The claim is then `needs-hardware`: the hardware (and the implementation its
    scope names) is the blocker, not the lack of an executable idea.
    """

    hardware: str = Field(min_length=2)
    method: str = Field(min_length=10)


class Scope(Strict):
    """What the claim is about: implementation, revision, hardware, dtype, shape, mode."""

    implementation: str | None = None
    revision: str | None = None
    arch: str | None = None
    dtype: str | None = None
    shape: str | None = None
    mode: str | None = None
    # The hardware a reported figure is for (e.g. "H100" for an FA3-paper number): a run on other hardware
    # that falls short is `not-reproduced`, not a refutation of the source (kb.index.cause).
    reported_on: str | None = None


class Cause(Strict):
    """A reviewer's judgement of why the claim's checks refute it (or leave it inconclusive)."""

    # `source`: another listed source (a teaching repository's README or code) asserts what the evidence contradicts.
    # `hypothesis`: a claim of the KB's own (a measurement no source asserts) that the evidence refutes: a fact
    # about the measured stack, not a finding about anyone's writing.
    kind: Literal["note", "deck", "source", "hypothesis", "not-reproduced", "tie", "band-above", "band-below", "spread",
                  "unreached", "extraction"]
    why: str = Field(min_length=20)


_TOPIC_SET = frozenset(TOPICS)


class Claim(Strict):
    """One checkable statement, with provenance and the checks that decide it."""

    id: str
    statement: str = Field(min_length=10)
    generation: Generation
    phase: Phase
    topics: list[str] = Field(min_length=1)
    label: Label
    scope: Scope = Field(default_factory=Scope)
    anchors: list[Anchor] = Field(min_length=1)
    checks: list[Check] = Field(default_factory=list)
    review: str | None = None
    experiment: Experiment | None = None
    depends_on: list[str] = Field(default_factory=list)
    refines: list[str] = Field(default_factory=list)
    supersedes: list[str] = Field(default_factory=list)
    # The same fact stated differently elsewhere (a slide deck against its note): both are claims, each checked.
    disagrees_with: list[str] = Field(default_factory=list)
    # Why the checks refute this claim, where no rule of kb.index.cause decides it (a reviewer's judgement).
    cause: Cause | None = None
    # Conditions the statement names (a shape, a configuration) that checks consume as "$name" (kb.records.binding).
    givens: dict[str, Any] = Field(default_factory=dict)
    # Numbers in the statement that name rather than measure (a section, a step, a year), exactly as written.
    labels: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not CLAIM_ID.fullmatch(v):  # fullmatch: `$` would let a trailing newline through
            raise ValueError(f"{v!r} is not a claim id like 'fa2.bwd.dq-atomic-accumulation'")
        return v

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str]) -> list[str]:
        unknown = [t for t in v if t not in _TOPIC_SET]
        if unknown:
            raise ValueError(f"unknown topic {unknown[0]!r} (see kb.vocab.TOPICS)")
        dup = sorted({t for t in v if v.count(t) > 1})
        if dup:
            raise ValueError(f"topic {dup[0]!r} is listed twice")
        return v

    @model_validator(mode="after")
    def _review_or_check(self) -> Claim:
        if not self.checks and not (self.review and self.review.strip()) and self.experiment is None:
            raise ValueError("a claim with no checks needs a review reason or a pending experiment")
        return self

    def check_anchor(self, index: int) -> dict[str, Any] | None:
        """The anchor check `index` reads (its `anchor` parameter), as recorded with its runs; None if it reads none.

        The claim's content hash leaves anchors out (drift is the audit's business), but a check
        that reads cited lines depends on exactly which lines: its runs record the anchor, and a
        run made for other lines is neither reused nor current.
        """
        if not 0 <= index < len(self.checks):
            return None
        ix = self.checks[index].params.get("anchor")
        if not isinstance(ix, int) or not 0 <= ix < len(self.anchors):
            return None
        return self.anchors[ix].model_dump(mode="json", exclude_none=True)

    def content_hash(self) -> str:
        """Hash of what a check's verdict depends on: statement, scope and checks.

        Evidence recorded under another hash is stale. Anchors are left out on
        purpose: their drift is the audit's business, not a change of claim.
        """
        # Givens feed the checks, so they are part of what a verdict depends on (left out when empty, so
        # claims without givens keep the hash their evidence was recorded under).
        fields = {"statement", "scope", "checks"} | ({"givens"} if self.givens else set())
        body = self.model_dump(include=fields, by_alias=True, mode="json")
        # Scope fields added later enter the hash only when set, so existing evidence keeps its hash.
        for late in ("reported_on",):
            if body.get("scope", {}).get(late) is None:
                body.get("scope", {}).pop(late, None)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


class Measurement(Strict):
    """One measured value with its unit."""

    value: Any
    unit: str = ""


class Run(Strict):
    """One execution of one check on one machine: an evidence record."""

    run_id: str = ""
    claim_id: str
    claim_hash: str
    check_index: int = Field(ge=0, le=10_000)
    verifier: str
    verifier_hash: str
    params: dict[str, Any]
    expect: dict[str, Any]
    verdict: Verdict
    reason: str
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    hardware_class: str
    environment: dict[str, Any] = Field(default_factory=dict)
    started: str
    duration_s: float
    log: str = ""
    # When this machine recorded the run (its evidence file's stamp); not part of the content address,
    # so an imported run cannot choose its own rank: the latest run is decided by (recorded, started).
    _recorded: str | None = PrivateAttr(default=None)

    @property
    def rank(self) -> tuple[str, str]:
        """Order key for "latest": the local recording time first, the claimed start time second."""
        return (self._recorded or self.started, self.started)

    @field_validator("duration_s")
    @classmethod
    def _finite_duration(cls, v: float) -> float:
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"duration {v} is not a finite, non-negative number of seconds")
        return v

    @field_validator("started")
    @classmethod
    def _sane_time(cls, v: str) -> str:
        from datetime import UTC, datetime, timedelta

        try:
            when = datetime.fromisoformat(v)
        except ValueError:
            raise ValueError(f"started {v!r} is not an ISO 8601 time") from None
        if when.tzinfo is None:
            raise ValueError(f"started {v!r} has no time zone")
        if when > datetime.now(UTC) + timedelta(days=1):
            raise ValueError(f"started {v!r} is in the future")
        return v

    def compute_id(self) -> str:
        """Content address of the record (everything but the id itself)."""
        body = self.model_dump(exclude={"run_id"}, mode="json")
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]


class Status(Strict):
    """A claim's derived status on one hardware class (or overall, class '*')."""

    claim_id: str
    hardware_class: str
    status: StatusName
    reason: str
    run_ids: list[str] = Field(default_factory=list)
    # How strongly the deciding runs could have disagreed (kb.index.strength); None when nothing decides.
    strength: Literal["measured", "derived", "cited", "restated"] | None = None
    # Upstream change since a fixed pin: information shown beside the status, never the status itself.
    upstream: str | None = None
    # Why it is refuted or inconclusive (kb.index.cause): cause, a plain reason, "rule" or "judgement".
    cause: str | None = None
    cause_why: str | None = None
    cause_by: str | None = None
