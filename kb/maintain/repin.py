"""`kb repin`: advance a tracking pin to a newer upstream ref, as `dvc update` does for data.

For every claim anchored at the pin, the audit compares the cited span with the
new ref. Unchanged, moved and renamed spans are re-anchored (new SHA, path,
lines and hash); the claim's checks then run at the new ref with the new
anchors. Claims whose checks all still hold advance to the new ref. Claims
whose cited text changed or vanished upstream, or whose checks fail (or cannot
run) at the new ref, stay at the old commit, which keeps its tracking role
under a dated name, so they read stale ("changed upstream") until someone
rewrites them. A notes source re-pins its `commit` the same way; a changed
section stales exactly the claims anchored to it.

Dry run by default: the plan and a unified diff of the YAML it would write.
`write_repin` applies targeted line edits (comments, order and formatting
untouched), validates the whole project, and restores every file if anything
does not validate. Fixed pins are never re-pinned: they describe a historical
revision.
"""

from __future__ import annotations

import difflib
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb.audit.run import audit
from kb.audit.state import RELOCATED, STALE
from kb.config import Config
from kb.pinned.clones import clone_paths
from kb.records.loader import Corpus, load_corpus
from kb.records.models import Anchor, Claim, Run
from kb.records.yamlfile import LineDict, LineList


class RepinError(ValueError):
    """The re-pin cannot be planned (unknown source or pin, a fixed pin, an unknown ref)."""


@dataclass
class ClaimOutcome:
    """What re-pinning does to one claim."""

    claim_id: str
    outcome: str  # advanced | changed upstream | checks fail at the new ref | not re-verified
    detail: str = ""
    anchors: dict[int, dict[str, Any]] = field(default_factory=dict)  # anchor index -> new field values
    runs: list[Run] = field(default_factory=list)
    diff: str = ""  # the cited span at the old pin against the new ref, for what changed upstream


@dataclass
class RepinPlan:
    """Everything `kb repin` would do."""

    source: str
    pin: str
    old_sha: str
    new_sha: str
    ref: str
    outcomes: list[ClaimOutcome]
    edits: dict[Path, tuple[str, str]]  # file -> (old text, new text)
    kept_as: str | None  # the name the old commit keeps when some claims stay behind

    @property
    def advanced(self) -> list[ClaimOutcome]:
        """Claims that move to the new ref."""
        return [o for o in self.outcomes if o.outcome == "advanced"]

    def diff(self, root: Path) -> str:
        """A unified diff of every file the re-pin would write."""
        out = []
        for path, (old, new) in sorted(self.edits.items()):
            rel = str(path.relative_to(root))
            out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{rel}", f"b/{rel}", n=1)
        return "".join(out)


def _resolve(clone: str, ref: str) -> str:
    gitdir = str(Path(clone) / ".git") if (Path(clone) / ".git").exists() else clone
    res = subprocess.run(["git", f"--git-dir={gitdir}", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise RepinError(f"{ref!r} is not a commit in the local clone {clone} (run `kb sources fetch`)")
    return res.stdout.strip()


def plan_repin(cfg: Config, index: Any, source_id: str, pin: str, ref: str, *, run_checks: bool = True,
               jobs: int = 2) -> RepinPlan:
    """Work out the re-pin of `source_id`'s `pin` (a pin name, or the notes commit) to `ref`; writes nothing."""
    corpus: Corpus = index.corpus()
    src = corpus.sources.get(source_id)
    if src is None:
        raise RepinError(f"source {source_id!r} is not registered")
    if src.kind == "notes":
        old_sha = src.commit or ""
    elif src.kind == "repo":
        if pin not in src.pins:
            raise RepinError(f"{source_id} has no pin {pin!r} (pins: {', '.join(src.pins)})")
        if pin not in src.tracking:
            raise RepinError(f"{source_id}@{pin} is a fixed pin (a historical revision the claims describe): "
                             "upstream change there is information, not something to follow")
        old_sha = src.pins[pin]
    else:
        raise RepinError(f"a {src.kind} source has no pins to advance")
    clone = clone_paths(cfg, corpus).get(source_id)
    if not clone:
        raise RepinError(f"no local clone of {source_id} (run `kb sources fetch {source_id}`)")
    new_sha = _resolve(clone, ref)
    report = audit(cfg, index.db, offline=True, refs={source_id: new_sha})
    per_claim: dict[str, list[Any]] = defaultdict(list)
    for f in report.findings:
        if f.source == source_id and f.claim_id and (f.pin or "") == old_sha:
            per_claim[f.claim_id].append(f)
    outcomes: list[ClaimOutcome] = []
    to_check: dict[str, Claim] = {}
    for cid, found in sorted(per_claim.items()):
        changed = [f for f in found if f.status in STALE]
        unchecked = [f for f in found if f.status not in STALE and f.status not in RELOCATED and f.status != "unchanged"]
        if changed:
            f = changed[0]
            outcomes.append(ClaimOutcome(cid, "changed upstream", f"{f.where()}: {f.status}: {f.detail}",
                                         diff=f.diff or ""))
            continue
        if unchecked:
            outcomes.append(ClaimOutcome(cid, "not re-verified", f"{unchecked[0].where()}: {unchecked[0].detail}"))
            continue
        new_fields: dict[int, dict[str, Any]] = {}
        for f in found:
            upd: dict[str, Any] = {"sha": new_sha} if src.kind == "repo" else {}
            if f.status in RELOCATED and f.proposal:
                upd.update({k: v for k, v in f.proposal.items() if k in ("path", "lines", "sha256", "heading")})
            if upd:
                new_fields[f.anchor] = upd  # type: ignore[index]
        outcome = ClaimOutcome(cid, "advanced", "", new_fields)
        outcomes.append(outcome)
        claim = corpus.claims[cid]
        anchors = [Anchor.model_validate({**a.model_dump(exclude_none=True), **new_fields.get(i, {})})
                   for i, a in enumerate(claim.anchors)]
        to_check[cid] = claim.model_copy(update={"anchors": anchors})
    if run_checks and to_check:
        _check_at_new_ref(cfg, corpus, src, old_sha, new_sha, to_check, outcomes, jobs)
    stay = [o for o in outcomes if o.outcome != "advanced"]
    kept_as = f"{pin}-{old_sha[:7]}" if stay and src.kind == "repo" else None
    # Line positions come from the YAML files themselves (the index keeps no line map of fields).
    edits = _edits(cfg, load_corpus(cfg.root), src, pin, old_sha, new_sha, outcomes, kept_as)
    return RepinPlan(source_id, pin, old_sha, new_sha, ref, outcomes, edits, kept_as)


def _check_at_new_ref(cfg: Config, corpus: Corpus, src: Any, old_sha: str, new_sha: str,
                      claims: dict[str, Claim], outcomes: list[ClaimOutcome], jobs: int) -> None:
    """Run every check of the re-anchored claims, reading the new ref; demote claims whose checks do not hold."""
    from kb.pinned.clones import clone_paths as _clones
    from kb.verify.plan import make_plan
    from kb.verify.registry import load_verifiers
    from kb.verify.runner import execute

    trial = Corpus()
    trial.sources = dict(corpus.sources)
    # The new commit is a pin for the trial, so anchors at it are valid while the checks run.
    if src.kind == "repo":
        trial.sources[src.id] = src.model_copy(update={"pins": {**src.pins, "_repin": new_sha}})
    trial.claims = {**corpus.claims, **claims}
    trial.claim_at = dict(corpus.claim_at)
    registry = load_verifiers(cfg.verifiers_dir)
    plan = make_plan(trial, sorted(claims), registry, {}, _clones(cfg, trial), force=True)
    runs: list[Run] = []
    execute(plan, trial, cfg, _clones(cfg, trial), jobs, None, None, runs=runs)
    by_claim: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_claim[r.claim_id].append(r)
    skipped = defaultdict(list)
    for cid, i, ver, why in plan.skipped:
        skipped[cid].append(f"check {i} ({ver}) skipped: {why}")
    for o in outcomes:
        if o.claim_id not in claims:
            continue
        o.runs = by_claim.get(o.claim_id, [])
        bad = [r for r in o.runs if r.verdict == "refutes"]
        broken = [r for r in o.runs if r.verdict not in ("supports", "refutes")]
        if bad:
            o.outcome, o.detail = "checks fail at the new ref", f"check {bad[0].check_index}: {bad[0].reason}"
        elif broken or skipped.get(o.claim_id):
            why = f"check {broken[0].check_index}: {broken[0].reason}" if broken else skipped[o.claim_id][0]
            o.outcome, o.detail = "not re-verified", why
        else:
            n = len(o.runs)
            o.detail = f"{n} check(s) hold at {new_sha[:12]}" if n else "no checks to run; cited text intact"


def _set_scalar(line: str, key: str, value: str) -> str:
    return re.sub(rf"^(\s*(?:-\s+)?{re.escape(key)}:\s*)\S.*?(\s*(?:#.*)?)$", lambda m: f"{m.group(1)}{value}{m.group(2)}",
                  line.rstrip("\n"), count=1) + "\n"


def _edits(cfg: Config, corpus: Corpus, src: Any, pin: str, old_sha: str, new_sha: str,
           outcomes: list[ClaimOutcome], kept_as: str | None) -> dict[Path, tuple[str, str]]:
    """Targeted line edits: anchor fields of advanced claims, and the source's pins (or notes commit)."""
    files: dict[Path, list[str]] = {}
    originals: dict[Path, str] = {}

    def lines_of(path: Path) -> list[str]:
        if path not in files:
            originals[path] = path.read_text(encoding="utf-8")
            files[path] = originals[path].splitlines(keepends=True)
        return files[path]

    for o in outcomes:
        if o.outcome != "advanced" or not o.anchors:
            continue
        at = corpus.claim_at[o.claim_id]
        path = cfg.root / at.path
        data = corpus.claim_data.get(o.claim_id)
        anchors = data.get("anchors") if isinstance(data, LineDict) else None
        if not isinstance(anchors, LineList):
            raise RepinError(f"{at.path}:{at.line}: cannot locate the anchors of {o.claim_id}")
        text = lines_of(path)
        for ix, upd in o.anchors.items():
            node = anchors[ix]
            for key, value in upd.items():
                if key == "lines":
                    cur = node.get("lines")
                    if isinstance(cur, LineList) and cur.item_lines and cur.item_lines[0] != node.key_lines["lines"]:
                        for item_line, v in zip(cur.item_lines, value, strict=True):
                            text[item_line - 1] = re.sub(r"-\s*\d+", f"- {v}", text[item_line - 1], count=1)
                    else:
                        text[node.key_lines["lines"] - 1] = _set_scalar(text[node.key_lines["lines"] - 1], "lines",
                                                                        f"[{value[0]}, {value[1]}]")
                elif key in node.key_lines:
                    text[node.key_lines[key] - 1] = _set_scalar(text[node.key_lines[key] - 1], key, str(value))
                else:
                    raise RepinError(f"{at.path}: anchor {ix} of {o.claim_id} has no {key!r} line to update")
    # The source: the pin advances; claims left behind keep the old commit under a dated name (still tracking).
    src_path, src_line = corpus.source_at[src.id].path, corpus.source_at[src.id].line
    path = cfg.root / src_path
    text = lines_of(path)
    start = src_line - 1
    end = next((j for j in range(start + 1, len(text)) if re.match(r"^\s*-\s+id:", text[j])), len(text))
    key = "commit" if src.kind == "notes" else pin
    for j in range(start, end):
        if re.match(rf"^\s*(?:-\s+)?{re.escape(key)}:\s*{old_sha}\b", text[j]):
            text[j] = _set_scalar(text[j], key, new_sha)
            if kept_as:
                indent = re.match(r"^(\s*)", text[j]).group(1)  # type: ignore[union-attr]
                text.insert(j + 1, f"{indent}{kept_as}: {old_sha}\n")
            break
    else:
        raise RepinError(f"{src_path}: no line `{key}: {old_sha}` in source {src.id}")
    if kept_as:
        _extend_tracking(text, start, end + 1, kept_as, src_path, src.id)
    return {p: (originals[p], "".join(files[p])) for p in files if "".join(files[p]) != originals[p]}


def _extend_tracking(text: list[str], start: int, end: int, name: str, path: str, sid: str) -> None:
    """Add `name` to the source's `tracking` list, in flow (`[a, b]`) or block (`- a`) style."""
    for j in range(start, min(end, len(text))):
        line = text[j].rstrip("\n")
        m = re.match(r"^(\s*tracking:\s*\[)(.*)\](.*)$", line)
        if m:
            text[j] = f"{m.group(1)}{m.group(2)}, {name}]{m.group(3)}\n"
            return
        if re.match(r"^\s*tracking:\s*(#.*)?$", line):
            k = j + 1
            item_indent = None
            while k < len(text) and (mi := re.match(r"^(\s*)-\s+\S", text[k])):
                item_indent = mi.group(1)
                k += 1
            if item_indent is not None:
                text.insert(k, f"{item_indent}- {name}\n")
                return
    raise RepinError(f"{path}: source {sid} has no `tracking` list to extend")


def write_repin(cfg: Config, plan: RepinPlan, check_files: Any) -> list[str]:
    """Apply the edits, validate everything, and restore every file on any problem; returns the problems."""
    written: list[Path] = []
    try:
        for path, (_, new) in plan.edits.items():
            tmp = path.with_suffix(path.suffix + ".repin")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(path)
            written.append(path)
        _, _, _, problems = check_files(cfg)
        # The re-anchored spans must hash as recorded at the new commit (the audit computed them there).
        if not problems:
            corpus = load_corpus(cfg.root)
            for o in plan.advanced:
                for ix in o.anchors:
                    a = corpus.claims[o.claim_id].anchors[ix]
                    if plan.new_sha not in (a.sha, corpus.sources[plan.source].commit):
                        problems.append(f"{o.claim_id}: anchor {ix} was not re-pinned")
    except Exception as exc:  # restore, then report
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        for path in written:
            path.write_text(plan.edits[path][0], encoding="utf-8")
    return [str(p) for p in problems]
