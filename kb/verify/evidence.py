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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kb.fsutil import atomic_write_text
from kb.records.models import Run
from kb.records.yamlfile import Problem
from kb.verify.expect import non_finite_fields, rederive

FORMAT = 1
MAX_FILE_BYTES = 256 * 2**20
# CPU and source checks are hardware-independent: their runs share one class.
CPU_CLASS = "cpu"
# How far ahead of this machine's clock a time may lie before it counts as in the future (clock skew).
FUTURE_SKEW = timedelta(hours=1)
# How much later than its file's name a run may say it started (the name is stamped when the batch is
# written, after its runs started; an imported batch is stamped at import, long after).
STAMP_TOLERANCE = timedelta(days=1)
# Verdicts a null, NaN or infinite measurement may go with: a refutation may record that the quantity
# could not be computed (math.identity records max_abs_err = inf when the statement's formula does not
# evaluate), a harness error is no evidence; supporting or inconclusive evidence never rests on one.
NON_FINITE_OK = ("refutes", "error", "skipped")


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


def _when(text: Any) -> datetime | None:
    """An ISO 8601 time with a zone, as an aware datetime; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _ago(delta: timedelta) -> str:
    hours = abs(delta.total_seconds()) / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"


def _set_aside_why(path: Path, items: list[Any], now: datetime) -> tuple[int, str] | None:
    """Why a file's times cannot be right (the run it concerns, a sentence); None when they can.

    Its name's stamp may not lie in the future; no run may start in the future, nor later than
    the stamp (the batch is written after its runs started, or later still when imported).
    """
    stamp = _when(file_stamp(path) or "")
    if stamp is not None and stamp > now + FUTURE_SKEW:
        return 0, (f"is dated {stamp.isoformat()} by its name, {_ago(stamp - now)} after this machine's clock "
                   f"({now.isoformat(timespec='seconds')})")
    for i, item in enumerate(items):
        started = _when(item.get("started")) if isinstance(item, dict) else None
        if started is None:
            continue  # not a time at all: the record's own validation says so
        if started > now + FUTURE_SKEW:
            return i, (f"run {i} started {item['started']}, in the future: {_ago(started - now)} after this "
                       f"machine's clock ({now.isoformat(timespec='seconds')})")
        if stamp is not None and started > stamp + STAMP_TOLERANCE:
            return i, (f"run {i} started {item['started']}, {_ago(started - stamp)} after the time in the file's "
                       f"name ({stamp.isoformat()}); a batch is written after its runs start")
    return None


SET_ASIDE = "set aside: its runs do not count (is this machine's clock right? is the file's name its own?)"


def read_evidence_file(path: Path, display: str, now: datetime | None = None,
                       where: dict[str, tuple[str, int]] | None = None) -> tuple[list[Run], list[Problem]]:
    """Runs of one evidence file, with problems located by file; only regular files are read.

    A file whose times cannot be right (a name dated in the future, a run starting in the future or
    after the file was written) is set aside whole, with one non-blocking problem: its runs do not
    count, the rest of the corpus is unaffected. A run holding a null, NaN or infinite measurement
    where its verdict cannot rest on one is set aside likewise (one problem per file). `where`
    receives each run's (file, index in the file).
    """
    now = now or datetime.now(UTC)
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

    aside = _set_aside_why(path, data["runs"], now)
    if aside is not None:
        i, why = aside
        return [], [Problem(display, line_of(i) if data["runs"] else 1, f"{why}; {SET_ASIDE}", blocking=False)]
    odd: list[tuple[int, str]] = []
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
        if run.verdict not in NON_FINITE_OK and (bad := non_finite_fields(run.measurements)):
            odd.append((i, f"run {i} (claim {run.claim_id}, verdict {run.verdict}): field {bad[0]} is "
                           f"{_show(_at(item, bad[0]))}, not a finite number"))
            continue
        run._recorded = file_stamp(path)
        runs.append(run)
        if where is not None:
            where.setdefault(run.run_id, (display, i))
    if odd:
        more = f" (and {len(odd) - 1} more run(s) like it)" if len(odd) > 1 else ""
        problems.append(Problem(display, line_of(odd[0][0]), f"{odd[0][1]}{more}; such a run is not evidence "
                                "and is set aside", blocking=False))
    return runs, problems


def _at(item: dict[str, Any], field: str) -> Any:
    """The raw value at a `measurements.<name>.value[i]` path of a run record (for messages)."""
    try:
        name, rest = field.removeprefix("measurements.").split(".value", 1)
        value = item["measurements"][name]["value"]
        for part in re.findall(r"\[(\d+)\]|\.([^.\[]+)", rest):
            value = value[int(part[0])] if part[0] else value[part[1]]
        return value
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _show(value: Any) -> str:
    return "null" if value is None else json.dumps(value) if isinstance(value, float) else repr(value)


def line_of_run(path: Path, index: int) -> int:
    """The line on which run `index` of an evidence file starts (1 where it cannot be told)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return 1
    return _run_lines(text, index + 1)[index]


def load_evidence(root: Path, where: dict[str, tuple[str, int]] | None = None) -> tuple[list[Run], list[Problem]]:
    """Every run under evidence/, de-duplicated by run id; `where` receives each run's (file, index)."""
    base = root / "evidence"
    seen: dict[str, Run] = {}
    problems: list[Problem] = []
    now = datetime.now(UTC)
    if base.is_dir():
        for path in sorted(base.rglob("*.json")):
            if path.parent.name == "audit":
                continue  # the audit summary lives beside the runs but is not a run record
            runs, probs = read_evidence_file(path, str(path.relative_to(root)), now, where)
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
    path = folder / f"{stamp}-{digest}.json"
    # Atomic (a reader never sees half a file); a full or read-only folder is kb.fsutil.OutputError naming
    # the path: exit 3, and the journal keeps the finished runs for the next command.
    atomic_write_text(path, text)
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


_EPOCH = datetime(1, 1, 1, tzinfo=UTC)


def rank_key(run: Run) -> tuple[datetime, datetime]:
    """Order for "latest": when this machine recorded the run (its file's name), then when it started.

    Both as UTC times, so offsets and fractions of a second compare correctly. The name's time is
    bounded when the file is read (not in the future, not before its runs started), so a name dated
    2999 never outranks a later run: such a file is set aside.
    """
    started = _when(run.started) or _EPOCH
    recorded = _when(run._recorded) if run._recorded else None
    return (recorded or started, started)


def latest_runs(runs: Iterable[Run]) -> dict[tuple[str, int, str], Run]:
    """The newest non-error run per (claim, check, class); errors only when nothing else exists."""
    best: dict[tuple[str, int, str], Run] = {}
    for run in sorted(runs, key=rank_key):
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
        problems += [_refusal(p) for p in probs]
        for run in runs:
            if (why := rederive(run.verdict, run.measurements, run.expect, own_verdict=True)) is not None:
                problems.append(Problem(str(f), line_of_run(f, _index_in(f, run)),
                                        f"run of claim {run.claim_id} check {run.check_index}: {why}; refused"))
                continue
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


def _refusal(p: Problem) -> Problem:
    """At import nothing is set aside: whatever would be is refused (the whole import is)."""
    if p.blocking:
        return p
    return Problem(p.path, p.line, p.message.replace(SET_ASIDE, "refused: nothing was imported")
                   .replace("such a run is not evidence and is set aside",
                            "a measurement must be a finite number; refused: nothing was imported"))


def _index_in(path: Path, run: Run) -> int:
    """The position of a run in an evidence file (by its id), for locating a message."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))["runs"]
        return next(i for i, item in enumerate(items) if isinstance(item, dict) and item.get("run_id") == run.run_id)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return 0
