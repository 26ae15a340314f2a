"""Evidence records: append-only, content-addressed JSON files under evidence/.

One file per `kb verify` batch, `evidence/<hardware-class>/<stamp>-<hash>.json`,
holding a list of runs. A run's id is the hash of its content, so records made
on different machines merge by union, and importing the same file twice adds
nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from kb.records.models import Run
from kb.records.yamlfile import Problem

FORMAT = 1
MAX_FILE_BYTES = 256 * 2**20
# CPU and source checks are hardware-independent: their runs share one class.
CPU_CLASS = "cpu"


def class_slug(hardware_class: str) -> str:
    """A folder name for a hardware class."""
    return re.sub(r"[^a-z0-9]+", "-", hardware_class.lower()).strip("-") or "unknown"


_STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-")


def _run_lines(text: str, n: int) -> list[int]:
    """The line on which each element of the top-level "runs" array starts (1 where it cannot be told)."""
    out = [1] * n
    m = re.search(r'"runs"\s*:\s*\[', text)
    if not m:
        return out
    dec = json.JSONDecoder()
    pos = m.end()
    line, counted = 1, 0  # newlines are counted once, from where the previous element started
    for i in range(n):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        line += text.count("\n", counted, pos)
        counted = pos
        out[i] = line
        try:
            _, pos = dec.raw_decode(text, pos)
        except (ValueError, RecursionError):
            break
    return out


def file_stamp(path: Path) -> str | None:
    """The recording time in an evidence file's name (`<stamp>-<hash>.json`), as ISO 8601."""
    m = _STAMP.match(path.name)
    return f"{m[1]}-{m[2]}-{m[3]}T{m[4]}:{m[5]}:{m[6]}+00:00" if m else None


def read_evidence_file(path: Path, display: str) -> tuple[list[Run], list[Problem]]:
    """Runs of one evidence file, with problems located by file; only regular files are read."""
    if path.is_symlink() or not path.is_file():
        return [], [Problem(display, 0, "is not a regular file (evidence files are plain JSON files, never links or devices)")]
    if path.stat().st_size > MAX_FILE_BYTES:
        return [], [Problem(display, 0, f"is larger than {MAX_FILE_BYTES // 2**20} MiB; not an evidence file kb wrote")]
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return [], [Problem(display, line, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})")]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [], [Problem(display, exc.lineno, f"is not a readable evidence file: {exc.msg}")]
    except (RecursionError, ValueError) as exc:  # absurd nesting, or a number Python will not convert
        return [], [Problem(display, 1, f"is not a readable evidence file: {str(exc)[:120]}")]
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("runs"), list):
        return [], [Problem(display, 1, f"is not an evidence file of format {FORMAT} (a mapping with 'format' and 'runs')")]
    runs, problems = [], []
    found: list[list[int]] = []

    def line_of(i: int) -> int:
        # Located only when a run has a problem: finding every run's line costs a second parse of the file.
        if not found:
            found.append(_run_lines(text, len(data["runs"])))
        return found[0][i]

    for i, item in enumerate(data["runs"]):
        try:
            run = Run.model_validate(item)
        except ValidationError as exc:
            err = exc.errors()[0]
            problems.append(Problem(display, line_of(i), f"run {i}: field {'.'.join(map(str, err['loc']))}: "
                                                       f"{err['msg'].removeprefix('Value error, ')}"))
            continue
        except (RecursionError, ValueError) as exc:
            problems.append(Problem(display, line_of(i), f"run {i}: {str(exc)[:120]}"))
            continue
        if run.run_id != run.compute_id():
            problems.append(Problem(display, line_of(i), f"run {i}: run_id {run.run_id} does not match its content "
                                                       "(edited by hand?)"))
            continue
        run._recorded = file_stamp(path)
        runs.append(run)
    return runs, problems


def load_evidence(root: Path) -> tuple[list[Run], list[Problem]]:
    """Every run under evidence/, de-duplicated by run id."""
    base = root / "evidence"
    seen: dict[str, Run] = {}
    problems: list[Problem] = []
    if base.is_dir():
        for path in sorted(base.rglob("*.json")):
            if path.parent.name == "audit":
                continue  # the audit summary lives beside the runs but is not a run record
            runs, probs = read_evidence_file(path, str(path.relative_to(root)))
            problems += probs
            for run in runs:
                seen.setdefault(run.run_id, run)
    return list(seen.values()), problems


def write_batch(root: Path, runs: list[Run]) -> Path | None:
    """Write new runs as one evidence file; returns its path (None if nothing new)."""
    if not runs:
        return None
    for run in runs:
        run.run_id = run.compute_id()
    body = {"format": FORMAT, "runs": [r.model_dump(mode="json") for r in runs]}
    text = json.dumps(body, indent=1, sort_keys=True) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = root / "evidence" / class_slug(runs[0].hardware_class)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stamp}-{digest}.json"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)  # atomic: a reader never sees half a file
    for run in runs:
        run._recorded = file_stamp(path)
    return path


# ------------------------------------------------------------------ the journal of a run in progress

JOURNAL_GLOB = ".inflight-*.jsonl"


class Journal:
    """Finished runs of one `kb verify`, appended and fsynced as each lands.

    A killed run (SIGKILL, power loss) leaves its journal behind; the next
    `kb verify` turns every orphan journal into an ordinary evidence file
    (`recover_journals`), so a finished run is never lost. A torn last line
    (killed mid-write) is dropped: that run had not finished being recorded.
    """

    def __init__(self, root: Path) -> None:
        folder = root / "evidence"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f".inflight-{os.getpid()}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")

    def append(self, run: Run) -> None:
        """Record one finished run durably."""
        run.run_id = run.compute_id()
        self._fh.write(json.dumps(run.model_dump(mode="json"), sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self, remove: bool) -> None:
        """Close; remove the journal once its runs are in evidence files."""
        self._fh.close()
        if remove:
            self.path.unlink(missing_ok=True)


def _read_journal(path: Path) -> list[Run]:
    runs = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            run = Run.model_validate_json(line)
        except ValidationError:
            continue  # the torn tail of a killed write
        if run.run_id == run.compute_id():
            runs.append(run)
    return runs


def recover_journals(root: Path) -> int:
    """Turn journals left by killed runs into evidence files; returns how many runs were recovered."""
    folder = root / "evidence"
    n = 0
    for path in sorted(folder.glob(JOURNAL_GLOB)) if folder.is_dir() else []:
        pid = path.name.split("-")[1]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # another kb verify is still writing it
        by_class: dict[str, list[Run]] = {}
        for run in _read_journal(path):
            by_class.setdefault(run.hardware_class, []).append(run)
        for runs in by_class.values():
            write_batch(root, runs)
            n += len(runs)
        path.unlink(missing_ok=True)
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def latest_runs(runs: Iterable[Run]) -> dict[tuple[str, int, str], Run]:
    """The newest non-error run per (claim, check, class); errors only when nothing else exists."""
    best: dict[tuple[str, int, str], Run] = {}
    for run in sorted(runs, key=lambda r: r.rank):
        key = (run.claim_id, run.check_index, run.hardware_class)
        prev = best.get(key)
        if prev is None or run.verdict != "error" or prev.verdict == "error":
            if run.verdict == "skipped":
                continue
            best[key] = run
    return best


def import_files(root: Path, files: list[Path], claim_ids: set[str] | None = None
                 ) -> tuple[int, int, list[Problem], list[str]]:
    """Merge evidence files made elsewhere; returns (new runs, already known, problems, unknown claim ids).

    Nothing is written when any file is bad. Runs for claims not in `claim_ids`
    are still kept (a claim may be added later) but reported, never dropped silently.
    """
    known = {r.run_id for r in load_evidence(root)[0]}
    fresh: dict[str, list[Run]] = {}
    dup = 0
    problems: list[Problem] = []
    for f in files:
        runs, probs = read_evidence_file(f, str(f))
        problems += probs
        for run in runs:
            if run.run_id in known:
                dup += 1
                continue
            known.add(run.run_id)
            fresh.setdefault(run.hardware_class, []).append(run)
    if problems:
        return 0, dup, problems, []
    unknown = sorted({r.claim_id for runs in fresh.values() for r in runs} - claim_ids) if claim_ids is not None else []
    new = 0
    for runs in fresh.values():
        # Keep the imported ids: re-writing must not change content, so ids stay equal.
        write_batch(root, runs)
        new += len(runs)
    return new, dup, [], unknown
