"""Seeded fuzz suite: bad input is refused cleanly or handled, never a crash, a hang or a changed store.

Every case starts from a copy of one small good project (claims, sources, an
evidence file, the audit record, kb.local.toml and an index built from them),
breaks one thing, runs kb on it and checks kb's contract:

- no traceback ("Traceback" never in stderr, no exception escaping the command),
  exit code never 4 (internal error) and never 1 (a finding) for bad input;
- every command finishes within TIME_LIMIT_S (a hang is a failure);
- a file at fault (claims, sources, evidence, audit record, kb.local.toml) gives
  exit 2 and stderr names the file with a line, `path:N`;
- nothing stored changes: the index tables and every file under evidence/ are
  the same after a refused command as before it;
- whatever `kb validate` accepts, `kb claims --json`, `kb show ID`,
  `kb export status -o FILE` and `kb verify --plan --json` handle too.

Cases are generated from `random.Random(SEED + family number)`, so a run is
reproducible and the families are independent of one another. Each case has a
verdict: `refuse` (the input is wrong by docs/CLAIM_FORMAT.md or plainly
corrupt: exit 2 naming the file), `either` (odd but arguably acceptable: exit 0,
or exit 2 naming the file) or `usage` (a bad command line: the listed exit
codes). Most cases run in-process through click's CliRunner; those that could
block (FIFOs), exhaust memory (/dev/zero, alias bombs) or overflow the C stack
(deep nesting) run `python -m kb` in a child with a memory cap and a timeout,
in its own process group so a hang is killed whole.

All failures of a family are collected and reported together at the end;
`pytest -s` prints the figures.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import tomllib
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kb.cli import cli
from tests.conftest import NOTE_ANCHOR, REPO, claim

SEED = 0x6B62F0
TIME_LIMIT_S = 20.0
CHILD_MEMORY_BYTES = 3 * 2**30
CHILD_WORKERS = 3

BAD_CLAIMS = "claims/zz-bad.yaml"
BAD_SOURCES = "sources/zz-bad.yaml"
BAD_RUNS = "evidence/cpu/zz-bad.json"
BASE_RUNS = "evidence/cpu/20260102T030405Z-000000000000.json"
AUDIT = "evidence/audit/latest.json"
LOCAL = "kb.local.toml"
DB = ".kb/kb.db"
INDEX_TABLES = ("claims", "claim_topics", "anchors", "checks", "runs", "status", "sources", "claim_edges")

REPO_SHA = "4f285b354796fb17df8636485b9a04df3ebbb7dc"  # flash-attention v2.0.0, a pin in sources/repos.yaml
NOTES_COMMIT = "5cd99800d4cc22da918f8e4609a6fc3a454fca82"
REPO_ANCHOR = {"source": "flash-attention", "sha": REPO_SHA, "path": "csrc/flash_attn/flash_api.cpp",
               "lines": [10, 12], "sha256": "0" * 64}
REVIEW = "Design rationale; nothing executable decides it."
NAN, INF = float("nan"), float("inf")

FILE_GATE = (("validate",), ("claims", "--json"))
# The audit record is read when the index is built, not by `kb validate`: the index commands are its gate.
AUDIT_GATE = (("claims", "--json"), ("verify", "--plan", "--json"))


# --------------------------------------------------------------------------- the good project

def _base_claims() -> list[dict]:
    return [
        claim("test.arith.four"),
        claim("test.arith.wrong", statement="Two plus two equals five, stated by a note.",
              checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": 5}}}]),
        claim("test.review.only", checks=[], review=REVIEW, depends_on=["test.arith.four"]),
    ]


BASE_IDS = tuple(c["id"] for c in _base_claims())


def _fuzz_claim(cid: str = "test.fuzz.case", **over: Any) -> dict:
    """The claim a claims case breaks: valid as it stands (a note anchor, one arith check)."""
    return claim(cid, **over)


def _run_id(run: dict) -> str:
    """The run's content address, as kb computes it (falling back to the same recipe for invalid runs)."""
    try:
        from kb.records.models import Run

        return Run.model_validate(run).compute_id()
    except Exception:
        body = {k: v for k, v in run.items() if k != "run_id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _run(cid: str = "test.arith.four", rehash: bool = True, **over: Any) -> dict:
    """A valid evidence run for a base claim, with overrides; its run_id matches its content unless told."""
    from kb.records.models import Claim

    claims = {c["id"]: c for c in _base_claims()}
    c = claims.get(cid, claims["test.arith.four"])
    check = c["checks"][0]
    run = {"claim_id": cid, "claim_hash": Claim.model_validate(c).content_hash(), "check_index": 0,
           "verifier": check["verifier"], "verifier_hash": "0123456789abcdef", "params": check["params"],
           "expect": check["expect"], "verdict": "supports", "reason": "2 + 2 evaluates to 4",
           "measurements": {"value": {"value": 4, "unit": ""}}, "hardware_class": "cpu",
           "environment": {"host": "fuzz"}, "started": "2026-01-02T03:04:05+00:00", "duration_s": 0.01, "log": ""}
    if cid == "test.arith.wrong":
        run.update(verdict="refutes", reason="2 + 2 evaluates to 4, not 5")
    run.update(over)
    run["run_id"] = _run_id(run) if rehash else run.get("run_id", "")
    return run


def _runs_file(runs: list[dict]) -> str:
    return json.dumps({"format": 1, "runs": runs}, indent=1, sort_keys=True) + "\n"


def _drift_entry(**over: Any) -> dict:
    e = {"anchor": 0, "source": "fa-notes", "kind": "notes", "pin": NOTES_COMMIT, "path": NOTE_ANCHOR["path"],
         "heading": NOTE_ANCHOR["heading"], "status": "edited", "head": "f" * 40,
         "found_at": "2026-01-02T03:04:05+00:00", "detail": "the section's text changed"}
    e.update(over)
    return e


def _audit(**over: Any) -> dict:
    rec = {"format": 2, "backend": "git", "checked_at": "2026-01-02T03:04:05+00:00", "offline": True, "refs": None,
           "counts": {"fa-notes@5cd99800d4cc": {"edited": 1}}, "sources": {},
           "drift": {"test.review.only": [_drift_entry()]}}
    rec.update(over)
    return rec


GOOD_LOCAL = '[clones]\nflash-attention = "/nonexistent/fuzz/flash-attention"\n'

# Extra sources of every kind, valid as they stand: the sources family breaks them one at a time.
GOOD_EXTRA_SOURCES = [
    {"id": "zz-paper", "kind": "paper", "title": "A paper", "arxiv": "2205.14135", "version": 2, "year": 2022},
    {"id": "zz-repo", "kind": "repo", "url": "https://github.com/example/repo", "pins": {"main": "a" * 40},
     "tracking": ["main"]},
    {"id": "zz-notes", "kind": "notes", "repo": "https://github.com/example/notes", "commit": "b" * 40},
    {"id": "zz-web", "kind": "web", "title": "A page", "url": "https://example.com/page", "retrieved": "2026-01-01",
     "content_sha256": "c" * 64},
    {"id": "zz-gpu", "kind": "hardware", "title": "A GPU", "spec_sources": ["zz-web"], "constants": {"sm_count": 108}},
    {"id": "zz-private", "kind": "private", "title": "A report", "why_uncheckable": "never published"},
]


def _yaml(doc: Any, values: dict[str, str] | None = None, lines: dict[str, list[str]] | None = None) -> str:
    """Dump `doc`, then splice raw YAML in: a placeholder scalar value, or a placeholder `KEY: 0` line."""
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 20)
    for token, raw in (values or {}).items():
        assert text.count(token) == 1, (token, text)
        text = text.replace(token, raw)
    for token, raw_lines in (lines or {}).items():
        out = []
        for line in text.splitlines(keepends=True):
            if line.strip() in (f"{token}: 0", f"- {token}: 0"):
                indent = line[: len(line) - len(line.lstrip())]
                out += [indent + raw + "\n" for raw in raw_lines]
            else:
                out.append(line)
        text = "".join(out)
    return text


def _claims_doc(*claims: dict) -> dict:
    return {"claims": list(claims)}


# --------------------------------------------------------------------------- running kb

@dataclass
class Outcome:
    """One command's result."""

    args: tuple[str, ...]
    code: int | None  # None: still running after TIME_LIMIT_S (killed)
    stdout: str
    stderr: str
    crash: str | None  # traceback text, when there was one
    seconds: float

    def first_line(self) -> str:
        if self.code is None:
            return f"(no exit within {TIME_LIMIT_S:g} s)"
        if self.crash:
            return _crash_summary(self.crash)
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[0][:160] if lines else "(empty stderr)"


def _crash_summary(tb: str) -> str:
    """`ExcType: message @ file:line` from a traceback."""
    lines = [ln for ln in tb.strip().splitlines() if ln.strip()]
    exc_line = re.compile(r"^([A-Za-z_][\w]*\.)*[A-Za-z_]\w*(Error|Exception|Exit|Interrupt|Iteration|Warning)\b(:.*)?$")
    frames = re.findall(r'File "([^"]+)", line (\d+)', tb)
    where = ""
    for path, line in reversed(frames):
        if "/kb/" in path or "/verifiers/" in path:
            where = f" @ {path.removeprefix(str(REPO) + '/')}:{line}"
            break
    last = next((ln for ln in reversed(lines) if exc_line.match(ln)), lines[-1] if lines else "?")
    return f"{last.strip()[:140]}{where}"


class _Hang(BaseException):
    """Raised by the alarm when an in-process command runs past TIME_LIMIT_S."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _invoke(root: Path, args: tuple[str, ...]) -> Outcome:
    """Run one kb command in-process against `root`, with an alarm for hangs."""
    runner = CliRunner()
    full = ["--root", str(root), "--db", str(root / DB), *args]
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    start = time.monotonic()
    try:
        res = runner.invoke(cli, full, catch_exceptions=True)
    except _Hang:
        return Outcome(args, None, "", "", None, time.monotonic() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.monotonic() - start
    stderr = res.stderr
    crash = None
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        crash = "".join(traceback.format_exception(res.exception))
    elif "Traceback" in stderr:
        crash = stderr[stderr.index("Traceback"):]
    return Outcome(args, res.exit_code, res.stdout, stderr, crash, seconds)


_CHILD_BOOT = ("import resource, runpy, sys; lim = int(sys.argv.pop(1)); "
               "resource.setrlimit(resource.RLIMIT_AS, (lim, lim)); "
               "runpy.run_module('kb', run_name='__main__', alter_sys=True)")


def _child(root: Path, args: tuple[str, ...]) -> Outcome:
    """Run `python -m kb` in a child process (the environment of conftest.kb_subprocess), capped and killable.

    kb_subprocess itself has no memory cap and kills only the direct child on a
    timeout; a case that reads /dev/zero or expands an alias bomb must not take
    the test machine down with it, and a hung command's workers must die too.
    """
    env = {**os.environ, "KB_ROOT": str(root), "KB_DB": str(root / DB),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", _CHILD_BOOT, str(CHILD_MEMORY_BYTES), "--root", str(root), "--db", str(root / DB),
           *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=root, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIME_LIMIT_S)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        code = None
    seconds = time.monotonic() - start
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    crash = None
    if "Traceback" in stderr:
        crash = stderr[stderr.index("Traceback"):]
    elif code is not None and code < 0:
        crash = f"killed by signal {-code}\n"
    return Outcome(args, code, stdout, stderr, crash, seconds)


# --------------------------------------------------------------------------- stored state

def _db_state(db: Path) -> str:
    """Digest of the index tables' rows (the meta row and full-text shadow tables left out)."""
    if not db.exists():
        return "missing"
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            prefixes = tuple(f'INSERT INTO "{t}" ' for t in INDEX_TABLES)
            rows = sorted(line for line in con.iterdump() if line.startswith(prefixes))
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"unreadable: {exc}"
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _tree_state(base: Path) -> dict[str, str]:
    """Every entry under `base` (not following links, never opening FIFOs or devices)."""
    out: dict[str, str] = {}
    if not base.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(base))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link -> {os.readlink(p)}"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = "file " + hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = f"special {stat.S_IFMT(st.st_mode):o}"
    return out


# --------------------------------------------------------------------------- cases

Setup = Callable[[Path], None]


def _nothing(root: Path) -> None:
    return None


def _write(rel: str, data: str | bytes) -> Setup:
    def go(root: Path) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.is_file():
            p.unlink()
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data, encoding="utf-8")
    return go


def _fifo(rel: str) -> Setup:
    def go(root: Path) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists() or p.is_symlink():
            p.unlink()
        os.mkfifo(p)
    return go


def _symlink(rel: str, target: str) -> Setup:
    def go(root: Path) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(target.replace("{root}", str(root)))
    return go


def _mkdir(rel: str) -> Setup:
    def go(root: Path) -> None:
        p = root / rel
        if p.is_file() or p.is_symlink():
            p.unlink()
        p.mkdir(parents=True, exist_ok=True)
        (p / "inside.txt").write_text("a folder where a file belongs\n")
    return go


def _both(*setups: Setup) -> Setup:
    def go(root: Path) -> None:
        for s in setups:
            s(root)
    return go


@dataclass
class Case:
    """One bad input and what kb must do with it."""

    family: str
    name: str
    setup: Setup = _nothing
    fault: tuple[str, ...] = ()  # files at fault (relative to the root; any one named with a line will do)
    verdict: str = "refuse"  # refuse | either | usage
    commands: tuple[tuple[str, ...], ...] = ()  # the gate; default FILE_GATE (usage: the commands to run)
    exits: tuple[int, ...] = (2,)  # usage: allowed exit codes
    child: bool = False  # run in a child process
    key: str = ""  # what makes the case distinct from the others
    needs_fifo: bool = False
    text: bool = True  # the fault is a text file (a line is wanted), not a folder, link, FIFO or device


class _Family:
    """Collects a family's cases, de-duplicated by key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases: dict[str, Case] = {}

    def add(self, case: Case) -> None:
        case.family = self.name
        key = case.key or case.name
        if key not in self.cases:
            self.cases[key] = case


def _content_key(rel: str, data: str | bytes) -> str:
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    return f"{rel}:{hashlib.sha256(raw).hexdigest()}"


def _file_case(fam: _Family, name: str, rel: str, data: str | bytes, verdict: str = "refuse", *,
               fault: tuple[str, ...] | None = None, child: bool = False,
               commands: tuple[tuple[str, ...], ...] = ()) -> None:
    fam.add(Case(fam.name, name, _write(rel, data), fault or (rel,), verdict, commands, child=child,
                 key=_content_key(rel, data)))


def _bomb(levels: int, width: int, leaf: str = "lol") -> str:
    """A flow-style alias bomb: `width ** levels` leaves from a few hundred bytes."""
    expr = "&b0 [" + ", ".join([leaf] * width) + "]"
    for k in range(1, levels):
        expr = f"&b{k} [{expr}, " + ", ".join([f"*b{k - 1}"] * (width - 1)) + "]"
    return expr


def _nest(depth: int, mapping: bool = False) -> str:
    return ("{a: " * depth + "1" + "}" * depth) if mapping else ("[" * depth + "1" + "]" * depth)


# ---- family 1: claim files

CLAIM_FIELDS = ("id", "statement", "generation", "phase", "topics", "label", "scope", "anchors", "checks", "review",
                "experiment", "depends_on", "refines", "supersedes")
WRONG_VALUES: tuple[Any, ...] = (5, -1, 3.25, True, None, [], {}, ["a"], {"k": "v"}, "x", 2**63, NAN)


def _valid_wrong(fieldname: str, value: Any) -> bool:
    """Whether `value` happens to be valid for the field (then it is no wrong-type case)."""
    if fieldname in ("review", "experiment") and value is None:
        return True
    if fieldname == "review" and isinstance(value, str):
        return True
    if fieldname == "scope" and value == {}:
        return True
    if fieldname in ("depends_on", "refines", "supersedes") and value == []:
        return True
    return False


def _claims_family(rng: random.Random) -> _Family:
    fam = _Family("claims")

    def add(name: str, data: str | bytes, verdict: str = "refuse", child: bool = False,
            fault: tuple[str, ...] | None = None) -> None:
        _file_case(fam, name, BAD_CLAIMS, data, verdict, child=child, fault=fault)

    def doc(*claims: dict) -> str:
        return _yaml(_claims_doc(*claims))

    # wrong types at the claim level
    pairs = [(f, v) for f in CLAIM_FIELDS for v in WRONG_VALUES if not _valid_wrong(f, v)]
    for f, v in rng.sample(pairs, 26):
        add(f"wrong-type {f}={v!r}", doc(_fuzz_claim(**{f: v})))
    # wrong types deeper down
    nested = {
        "anchor.section=5": {"anchors": [dict(NOTE_ANCHOR), {"source": "fa2-paper", "section": 5}]},
        "anchor.lines='10-12'": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": "10-12"}]},
        "anchor.lines=[10]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [10]}]},
        "anchor.lines=[1,2,3]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [1, 2, 3]}]},
        "anchor.lines=[1.5,2]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [1.5, 2]}]},
        "anchor.lines=[true,2]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [True, 2]}]},
        "anchor.lines=[0,0]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [0, 0]}]},
        "anchor=string": {"anchors": [dict(NOTE_ANCHOR), "fa2-paper section 3"]},
        "anchor.source=list": {"anchors": [dict(NOTE_ANCHOR), {"source": ["fa2-paper"], "section": "3"}]},
        "check=string": {"checks": ["arith.eval 2 + 2"]},
        "check.verifier=5": {"checks": [{"verifier": 5, "params": {"expr": "2 + 2"}, "expect": {}}]},
        "check.params=list": {"checks": [{"verifier": "arith.eval", "params": ["2 + 2"], "expect": {}}]},
        "check.expect=list": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": [4]}]},
        "check.expect.value=4": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                             "expect": {"value": 4}}]},
        "check.expect.value.equals=null": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                                       "expect": {"value": {"equals": None}}}]},
        "check.expect.approx='x'": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                                "expect": {"value": {"approx": "four"}}}]},
        "check.params.expr=4": {"checks": [{"verifier": "arith.eval", "params": {"expr": 4},
                                            "expect": {"value": {"equals": 4}}}]},
        "check.params.vars=list": {"checks": [{"verifier": "arith.eval", "params": {"expr": "x", "vars": ["x"]},
                                               "expect": {"value": {"equals": 4}}}]},
        "experiment.method=short": {"checks": [], "experiment": {"hardware": "sm_80", "method": "run"}},
        "scope.arch=90": {"scope": {"arch": 90}},
        "check.verifier=unknown": {"checks": [{"verifier": "arith.evil", "params": {}, "expect": {}}]},
        "check.params.anchor=99": {"anchors": [dict(NOTE_ANCHOR), dict(REPO_ANCHOR)],
                                   "checks": [{"verifier": "source.lines", "params": {"anchor": 99, "tokens": ["x"]},
                                               "expect": {"hash_ok": {"is": True}}}]},
        "check.params.anchor=-1": {"anchors": [dict(NOTE_ANCHOR), dict(REPO_ANCHOR)],
                                   "checks": [{"verifier": "source.lines", "params": {"anchor": -1, "tokens": ["x"]},
                                               "expect": {"hash_ok": {"is": True}}}]},
    }
    for name, over in nested.items():
        add(f"wrong-type {name}", doc(_fuzz_claim(**over)))
    # code in claims data (docs/SECURITY.md): every one of these once validated and then ran
    code_anchor = {"source": "flash-attention", "sha": "6d48e14a6c2f551db96f0badc658a6279a929df3",
                   "path": "csrc/flash_attn/src/fmha_fwd_launch_template.h"}
    host = {"anchor": 1, "functions": ["f"], "call": "f(x)", "grid": {"x": [1]}}
    hostile = {
        "py-exec call reads a file": ("code.py-exec", {**host, "call": "open('/etc/hostname').read()"}),
        "py-exec call imports": ("code.py-exec", {**host, "call": "__import__('os').system('true')"}),
        "py-exec prelude text": ("code.py-exec", {**host, "prelude": "import os\nos.system('true')"}),
        "host-exec -wrapper": ("code.host-exec", {**host, "flags": ["-wrapper", "/bin/sh,-c,true"]}),
        "host-exec @file": ("code.host-exec", {**host, "flags": ["@/etc/passwd"]}),
        "host-exec -save-temps": ("code.host-exec", {**host, "flags": ["-save-temps", "-dumpbase", "/tmp/x"]}),
        "host-exec prelude system()": ("code.host-exec", {**host, "prelude": 'int x = system("true");'}),
        "constexpr dirs --output": ("code.constexpr", {"anchor": 1, "values": {"v": "1"}, "dirs": ["--output=/tmp/x.tar"]}),
        "constexpr dirs --remote": ("code.constexpr", {"anchor": 1, "values": {"v": "1"}, "dirs": ["--remote=x", "--exec=true"]}),
        "constexpr value lambda": ("code.constexpr", {"anchor": 1, "values": {"v": "[]{ return 1; }()"}}),
        "toolchain inline code": ("toolchain.compile", {"code": "__global__ void k() {}"}),
    }
    for name, (verifier, params) in hostile.items():
        add(f"hostile {name}", doc(_fuzz_claim(anchors=[dict(NOTE_ANCHOR), dict(code_anchor)],
                                               checks=[{"verifier": verifier, "params": params,
                                                        "expect": {"value": {"equals": 1}}}])))
    add("hostile code at an untrusted revision", doc(_fuzz_claim(
        anchors=[dict(NOTE_ANCHOR), {**code_anchor, "sha": "a581db4a92051a52e98912e0d6cdcc1923864b8c"}],  # pinned, not trusted
        checks=[{"verifier": "code.host-exec", "params": host, "expect": {"value": {"equals": 1}}}])))
    # missing fields
    for f in ("id", "statement", "generation", "phase", "topics", "label", "anchors"):
        c = _fuzz_claim()
        del c[f]
        add(f"missing {f}", doc(c))
    c = _fuzz_claim()
    add("only an id", doc({"id": c["id"]}))
    add("missing note anchor sha256", doc(_fuzz_claim(anchors=[{k: v for k, v in NOTE_ANCHOR.items() if k != "sha256"}])))
    add("missing note anchor heading", doc(_fuzz_claim(anchors=[{k: v for k, v in NOTE_ANCHOR.items() if k != "heading"}])))
    add("missing check verifier", doc(_fuzz_claim(checks=[{"params": {"expr": "2 + 2"}, "expect": {}}])))
    add("no checks and no review", doc(_fuzz_claim(checks=[])))
    add("review of spaces", doc(_fuzz_claim(checks=[], review="   ")))
    # unknown keys, at several levels
    keys = ["colour", "Statement", "depends-on", "ｉｄ", "id ", "", "123", "__class__", "statement\u200b", "null",
            "checks ", "anchor"]
    levels = ["claim", "scope", "anchor", "check", "comparison", "top"]
    for k, lvl in rng.sample([(k, lvl) for k in keys for lvl in levels], 14):
        c = _fuzz_claim(scope={"arch": "sm_80"})
        top = _claims_doc(c)
        target = {"claim": c, "scope": c["scope"], "anchor": c["anchors"][0], "check": c["checks"][0],
                  "comparison": c["checks"][0]["expect"]["value"], "top": top}[lvl]
        target[k] = "fuzz"
        add(f"unknown key {k!r} in {lvl}", _yaml(top))
    # huge numbers (either: a kb that stores them is fine, one that cannot must say so)
    huge = {
        "lines [1, 2**63]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [1, 2**63]}]},
        "lines [2**63-1, 2**63-1]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [2**63 - 1, 2**63 - 1]}]},
        "lines [1, 2**64]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [1, 2**64]}]},
        "lines [2**100, 2**100+1]": {"anchors": [dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [2**100, 2**100 + 1]}]},
        "equals 2**63": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                      "expect": {"value": {"equals": 2**63}}}]},
        "equals -2**64": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                       "expect": {"value": {"equals": -(2**64)}}}]},
        "at_most 2**1000": {"checks": [{"verifier": "arith.eval", "params": {"expr": "2 + 2"},
                                         "expect": {"value": {"at_most": 2**1000}}}]},
        "vars x=2**70": {"checks": [{"verifier": "arith.eval", "params": {"expr": "x", "vars": {"x": 2**70}},
                                     "expect": {"value": {"equals": 2**70}}}]},
        "expr of 5000 digits": {"checks": [{"verifier": "arith.eval", "params": {"expr": "9" * 5000},
                                            "expect": {"value": {"at_least": 1}}}]},
    }
    for name, over in huge.items():
        add(f"huge {name}", doc(_fuzz_claim(**over)), "either")
    big_int = "1" + "0" * 5000
    add("huge equals: an integer of 5001 digits", _yaml(_claims_doc(_fuzz_claim(
        checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {"value": {"equals": "FUZZV0"}}}])),
        values={"FUZZV0": big_int}), "either")
    add("huge lines: 400-digit line number", _yaml(_claims_doc(_fuzz_claim(
        anchors=[dict(NOTE_ANCHOR), {**REPO_ANCHOR, "lines": [1, "FUZZV0"]}])), values={"FUZZV0": "9" * 400}), "either")
    # NaN / inf in expectations (refuse: no measurement can be compared with them meaningfully)
    comps = [{"equals": "N"}, {"equals": "I"}, {"equals": "-I"}, {"approx": "N"}, {"approx": "I"},
             {"approx": 4, "rel": "N"}, {"approx": 4, "rel": "I"}, {"approx": 4, "abs": "-I"}, {"at_most": "N"},
             {"at_least": "I"}, {"at_most": "-I"}, {"between": ["N", 1]}, {"between": ["-I", "I"]},
             {"between": [1, "N"]}, {"is": "N"}]
    spellings = {"N": [".nan", ".NaN", ".NAN"], "I": [".inf", ".Inf", "+.INF"], "-I": ["-.inf", "-.Inf", "-.INF"]}
    def spell(x: Any) -> str:
        return rng.choice(spellings[x]) if isinstance(x, str) else str(x)

    for comp in comps:
        c = _fuzz_claim(checks=[{"verifier": "arith.eval", "params": {"expr": "2 + 2"}, "expect": {}}])
        raw_parts = []
        for k, v in comp.items():
            raw_parts.append(f"{k}: " + (f"[{spell(v[0])}, {spell(v[1])}]" if isinstance(v, list) else spell(v)))
        c["checks"][0]["expect"]["value"] = "FUZZV0"  # the comparison, spliced in as one flow mapping
        text = _yaml(_claims_doc(c), values={"FUZZV0": "{" + ", ".join(raw_parts) + "}"})
        add(f"non-finite expectation {{{', '.join(raw_parts)}}}", text)
    add("NaN in params vars", _yaml(_claims_doc(_fuzz_claim(checks=[{
        "verifier": "arith.eval", "params": {"expr": "x", "vars": {"x": "FUZZV0"}},
        "expect": {"value": {"at_least": 0}}}])), values={"FUZZV0": ".nan"}), "either")
    # topics
    add("duplicated topic", doc(_fuzz_claim(topics=["numerics", "numerics"])))
    add("duplicated topic among others", doc(_fuzz_claim(topics=["numerics", "tiling", "numerics"])))
    add("topic repeated ten times", doc(_fuzz_claim(topics=["numerics"] * 10)))
    add("topic with a Cyrillic i", doc(_fuzz_claim(topics=["numer\u0456cs"])))
    add("topic with a trailing space", doc(_fuzz_claim(topics=["numerics "])))
    add("topic in upper case", doc(_fuzz_claim(topics=["NUMERICS"])))
    add("six topics", doc(_fuzz_claim(topics=["numerics", "tiling", "memory", "atomics", "gqa", "varlen"])), "either")
    # ids
    for bad_id in ["test.fuzz.id\n", "test.fuzz.id ", " test.fuzz.id", "test.fuzz.id\t", "test.fuzz.id\r",
                   "tëst.fuzz.id", "test.fuzz.\u0456d", "test.fuzz.id\u200b", "test.fuzz.id\u2028", "TEST.fuzz.id",
                   "test..id", "test.fuzz.", "test", "", "test.fuzz.\uff11", "test.fuzz.id\x00", "test.fuzz.id\n\n",
                   "test.fuzz.id\x85", "test.fuzz/id", "test.fuzz.id#x"]:
        add(f"id {bad_id!r}", doc(_fuzz_claim(bad_id)))
    add("id duplicated within the file", doc(_fuzz_claim("test.fuzz.twice"), _fuzz_claim("test.fuzz.twice")))
    add("id of a claim in good.yaml", doc(_fuzz_claim("test.arith.four")))
    add("id of good.yaml in upper case", doc(_fuzz_claim("TEST.ARITH.FOUR")))
    # lists and mappings as mapping keys
    complex_keys = {
        "list key in claim": ("claim", ["? [a, b]", ": 1"]),
        "mapping key in claim": ("claim", ["? {a: 1}", ": 1"]),
        "flow list key in claim": ("claim", ["[a, b]: 1"]),
        "list key in scope": ("scope", ["? [arch, dtype]", ": sm_80"]),
        "mapping key in check params": ("params", ["? {expr: 1}", ": 2"]),
        "list key in comparison": ("comparison", ["[equals]: 4"]),
        "list key at top level": ("top", ["? [claims]", ": []"]),
        "null key in claim": ("claim", ["? null", ": 1"]),
        "nested list key in anchor": ("anchor", ["? [[a], [b]]", ": x"]),
    }
    for name, (lvl, raw) in complex_keys.items():
        c = _fuzz_claim(scope={"arch": "sm_80"})
        top = _claims_doc(c)
        target = {"claim": c, "scope": c["scope"], "anchor": c["anchors"][0], "params": c["checks"][0]["params"],
                  "comparison": c["checks"][0]["expect"]["value"], "top": top}[lvl]
        target["FUZZK0"] = 0
        add(name, _yaml(top, lines={"FUZZK0": raw}))
    # alias bombs: big ones in a child (they may exhaust memory), small ones in-process
    bombs = [("equals", 4, 6, False, "either"), ("statement", 5, 9, False, "refuse"), ("scope.mode", 4, 9, False, "refuse"),
             ("equals", 7, 9, True, "refuse"), ("equals", 9, 10, True, "refuse"), ("review", 9, 10, True, "refuse"),
             ("topics", 8, 9, True, "refuse"), ("depends_on", 8, 9, True, "refuse"), ("vars", 8, 9, True, "refuse"),
             ("anchor note", 9, 10, True, "refuse"), ("unknown key", 9, 10, True, "refuse")]
    for where, lv, width, child, verdict in bombs:
        c = _fuzz_claim(scope={"arch": "sm_80"})
        if where == "equals":
            c["checks"][0]["expect"]["value"]["equals"] = "FUZZV0"
        elif where == "statement":
            c["statement"] = "FUZZV0"
        elif where == "scope.mode":
            c["scope"]["mode"] = "FUZZV0"
        elif where == "review":
            c.update(checks=[], review="FUZZV0")
        elif where == "topics":
            c["topics"] = "FUZZV0"
        elif where == "depends_on":
            c["depends_on"] = "FUZZV0"
        elif where == "vars":
            c["checks"][0]["params"]["vars"] = {"x": "FUZZV0"}
        elif where == "anchor note":
            c["anchors"][0]["note"] = "FUZZV0"
        else:
            c["laughs"] = "FUZZV0"
        add(f"alias bomb {width}**{lv} in {where}", _yaml(_claims_doc(c), values={"FUZZV0": _bomb(lv, width)}),
            verdict, child=child)
    # deep nesting
    for where, depth, mapping, child, verdict in [("equals", 50, False, False, "either"),
                                                  ("equals", 200, True, False, "either"),
                                                  ("statement", 150, False, False, "refuse"),
                                                  ("equals", 1000, False, True, "either"),
                                                  ("equals", 5000, True, True, "either"),
                                                  ("equals", 100_000, False, True, "either"),
                                                  ("topics", 20_000, False, True, "refuse"),
                                                  ("scope", 50_000, True, True, "refuse")]:
        c = _fuzz_claim()
        if where == "equals":
            c["checks"][0]["expect"]["value"]["equals"] = "FUZZV0"
        elif where == "statement":
            c["statement"] = "FUZZV0"
        elif where == "topics":
            c["topics"] = "FUZZV0"
        else:
            c["scope"] = "FUZZV0"
        add(f"{'mappings' if mapping else 'lists'} nested {depth} deep in {where}",
            _yaml(_claims_doc(c), values={"FUZZV0": _nest(depth, mapping)}), verdict, child=child)
    # binary garbage and encodings
    good_text = doc(_fuzz_claim())
    for n in (1, 16, 256, 4096, 65536):
        add(f"{n} random bytes", rng.randbytes(n))
    for _i in range(4):
        pos = rng.randrange(len(good_text))
        add(f"NUL byte at offset {pos}", (good_text[:pos] + "\x00" + good_text[pos:]).encode())
        pos = rng.randrange(len(good_text))
        add(f"invalid UTF-8 byte at offset {pos}", good_text[:pos].encode() + b"\xff" + good_text[pos:].encode())
    add("ESC control character", good_text.replace("Two plus", "Two\x1b[31m plus").encode())
    add("UTF-16 with BOM", good_text.encode("utf-16"))
    add("UTF-8 BOM", good_text.encode("utf-8-sig"), "either")
    add("latin-1 accent", good_text.replace("Two plus", "Deux plus égale").encode("latin-1"))
    # empty and near-empty
    for text in ["", " ", "\n\n\n", "# only a comment\n", "---\n", "...\n", "~\n", "null\n", "---\n...\n", "\t\n",
                 "claims:\n", "claims: ~\n", "claims: ''\n"]:
        add(f"near-empty {text!r}", text)
    add("an empty claims list", "claims: []\n", "either")
    # the wrong shape
    c = _fuzz_claim()
    for name, d in {"claims is a mapping": {"claims": c}, "top level is a list": [c], "top level is a string": "hello",
                    "top level is a number": 42, "claims is a string": {"claims": "test.fuzz.case"},
                    "claims is a number": {"claims": 5}, "claims holds strings": {"claims": ["test.fuzz.case"]},
                    "claims holds lists": {"claims": [[c]]}, "claims holds null": {"claims": [None]},
                    "an extra top-level key": {"claims": [c], "sources": []}, "Claims capitalised": {"Claims": [c]},
                    "claims holds numbers": {"claims": [1, 2, 3]}}.items():
        add(name, _yaml(d))
    add("two YAML documents", "---\n" + doc(c) + "---\n" + doc(_fuzz_claim("test.fuzz.other")))
    # tabs
    tabbed = good_text.replace("\n  ", "\n\t", 3)
    add("tab-indented keys", tabbed)
    add("tab after the list dash", good_text.replace("- id:", "-\tid:", 1), "either")
    add("tab before a colon", good_text.replace("statement:", "statement\t:", 1), "either")
    add("tab-indented list item", good_text.replace("\n- ", "\n\t- ", 1))
    add("tab inside a quoted statement", doc(_fuzz_claim(statement="Two plus\ttwo equals four, with a tab.")), "either")
    add("tabs everywhere as indentation", good_text.replace("  ", "\t"))
    # duplicate keys
    for name, (lvl, raw) in {
        "duplicate id key": ("claim", ["id: test.fuzz.other"]),
        "duplicate statement key": ("claim", ["statement: Another statement of ten characters."]),
        "duplicate topics key": ("claim", ["topics: [tiling]"]),
        "duplicate scope key": ("scope", ["arch: sm_90"]),
        "duplicate anchor key": ("anchor", ["source: fa2-paper"]),
        "duplicate params key": ("params", ["expr: 3 + 3"]),
        "duplicate comparison key": ("comparison", ["equals: 5"]),
        "duplicate top-level claims key": ("top", ["claims: []"]),
        "duplicate key with the same value": ("claim", ["generation: cross"]),
    }.items():
        c = _fuzz_claim(scope={"arch": "sm_80"})
        top = _claims_doc(c)
        target = {"claim": c, "scope": c["scope"], "anchor": c["anchors"][0], "params": c["checks"][0]["params"],
                  "comparison": c["checks"][0]["expect"]["value"], "top": top}[lvl]
        target["FUZZK0"] = 0
        add(name, _yaml(top, lines={"FUZZK0": raw}))
    # relations
    add("depends on itself", doc(_fuzz_claim("test.rel.self", depends_on=["test.rel.self"])))
    add("supersedes itself", doc(_fuzz_claim("test.rel.self", supersedes=["test.rel.self"])))
    add("two-claim cycle", doc(_fuzz_claim("test.rel.a", depends_on=["test.rel.b"]),
                               _fuzz_claim("test.rel.b", depends_on=["test.rel.a"])))
    add("refines cycle", doc(_fuzz_claim("test.rel.a", refines=["test.rel.b"]),
                             _fuzz_claim("test.rel.b", refines=["test.rel.a"])))
    add("mixed three-claim cycle", doc(_fuzz_claim("test.rel.a", depends_on=["test.rel.b"]),
                                       _fuzz_claim("test.rel.b", refines=["test.rel.c"]),
                                       _fuzz_claim("test.rel.c", supersedes=["test.rel.a"])))
    n = 40
    add(f"{n}-claim cycle", doc(*[_fuzz_claim(f"test.ring.c{i}", depends_on=[f"test.ring.c{(i + 1) % n}"])
                                  for i in range(n)]))
    add("cycle through good.yaml", doc(_fuzz_claim("test.rel.a", depends_on=["test.review.only"], supersedes=["test.rel.a"])))
    for target in ["test.no.such", "Not An Id", "", "test.arith.four ", "test.arith.four\n", "test.arith.fou"]:
        add(f"dangling relation {target!r}", doc(_fuzz_claim(depends_on=[target])))
    add("relation list holds a number", doc(_fuzz_claim(depends_on=[5])))
    add("relation list holds a mapping", doc(_fuzz_claim(refines=[{"id": "test.arith.four"}])))
    add("duplicate relation entries", doc(_fuzz_claim(depends_on=["test.arith.four", "test.arith.four"])), "either")
    # anchor paths
    for path, verdict in [("/etc/passwd", "refuse"), ("/docs/notes/current-implementation-and-determinism.md", "refuse"),
                          ("../docs/notes/x.md", "refuse"), ("docs/notes/../../../../etc/passwd", "refuse"),
                          ("docs/notes/..", "refuse"), ("..", "refuse"), ("docs/notes/x.md\x00", "refuse"),
                          ("", "refuse"), ("docs/notes/./x.md", "either"), ("~/notes.md", "either"),
                          ("C:\\notes\\x.md", "either"), ("docs//notes//x.md", "either")]:
        add(f"note anchor path {path!r}", doc(_fuzz_claim(anchors=[{**NOTE_ANCHOR, "path": path}])), verdict)
    for path in ["/etc/passwd", "../../etc/passwd", "csrc/../../../../etc/shadow"]:
        add(f"repo anchor path {path!r}", doc(_fuzz_claim(anchors=[dict(NOTE_ANCHOR), {**REPO_ANCHOR, "path": path}])))
    return fam


# ---- family 2: source files

def _sources_family(rng: random.Random) -> _Family:
    fam = _Family("sources")
    by_kind = {s["kind"]: s for s in GOOD_EXTRA_SOURCES}

    def entries(which: str | None = None, **over: Any) -> list[dict]:
        """Every good extra source, the one of kind `which` with `over` applied (`_DROP` removes a key)."""
        out = [dict(s) for s in GOOD_EXTRA_SOURCES]
        if which:
            for s in out:
                if s["kind"] == which:
                    s.update(over)
                    for k in [k for k, v in over.items() if v is _DROP]:
                        del s[k]
        return out

    def add(name: str, data: str | bytes, verdict: str = "refuse", child: bool = False,
            fault: tuple[str, ...] | None = None) -> None:
        _file_case(fam, name, BAD_SOURCES, data, verdict, child=child, fault=fault)

    def doc(items: list[dict]) -> str:
        return _yaml({"sources": items})

    str_fields = {"paper": ["title", "arxiv"], "repo": ["url", "title"], "notes": ["repo", "commit"],
                  "web": ["url", "content_sha256"], "hardware": ["title"], "private": ["why_uncheckable", "title"]}
    int_fields = {"paper": ["version", "year"]}
    dict_fields = {"repo": ["pins"], "hardware": ["constants"]}
    list_fields = {"repo": ["tracking"], "hardware": ["spec_sources"]}
    pools = [(str_fields, [5, 3.25, True, [], {}, ["a"], {"k": "v"}]), (int_fields, ["x", 3.25, [], {}, "two", [1]]),
             (dict_fields, [[], "x", 5, ["a"], True]), (list_fields, ["x", 5, {}, {"k": 1}, True])]
    triples = [(k, f, v) for table, pool in pools for k, fs in table.items() for f in fs for v in pool]
    for kind, f, v in rng.sample(triples, 24):
        add(f"wrong-type {kind}.{f}={v!r}", doc(entries(kind, **{f: v})))
    for kind in ("paper", "repo", "notes", "web", "hardware", "private"):
        add(f"wrong-type {kind}.id=5", doc(entries(kind, id=5)))
    for v in [5, "book", "Paper", "", None, ["paper"]]:
        add(f"kind {v!r}", doc(entries("paper", kind=v)))
    # missing per kind
    for kind, f in [("paper", "arxiv"), ("paper", "version"), ("repo", "url"), ("notes", "repo"), ("notes", "commit"),
                    ("web", "url"), ("hardware", "constants"), ("private", "why_uncheckable"), ("paper", "id"),
                    ("repo", "kind")]:
        add(f"missing {kind}.{f}", doc(entries(kind, **{f: _DROP})))
    add("hardware with empty constants", doc(entries("hardware", constants={})))
    # ids
    for bad in ["", "has space", "ünï", "zz-x\n", "-leading", "a/b", "zz-x ", ".hidden"]:
        add(f"source id {bad!r}", doc(entries("paper", id=bad)))
    add("source id duplicated within the file", doc([*entries(), dict(by_kind["paper"])]))
    add("source id of sources/notes.yaml", doc([*entries(), {**by_kind["notes"], "id": "fa-notes"}]))
    # pins and commits
    for name, pins in {"short pin": {"main": "a" * 8}, "upper-case pin": {"main": "A" * 40},
                       "41-hex pin": {"main": "a" * 41}, "pin with a trailing newline": {"main": "a" * 40 + "\n"},
                       "pin with a trailing space": {"main": "a" * 40 + " "}, "empty pin name": {"": "a" * 40},
                       "pin is a number": {"main": 1234567890123456789012345678901234567890},
                       "pin is null": {"main": None}, "pin is a list": {"main": ["a" * 40]}}.items():
        tracking = [k for k in pins if k == "main"]
        add(name, doc(entries("repo", pins=pins, tracking=tracking)))
    add("tracking an unknown pin", doc(entries("repo", tracking=["nosuch"])))
    add("tracking a number", doc(entries("repo", tracking=[5])))
    add("tracking the same pin twice", doc(entries("repo", tracking=["main", "main"])), "either")
    for bad in ["b" * 39, "b" * 40 + "\n", "B" * 40, "", "main"]:
        add(f"notes commit {bad!r}", doc(entries("notes", commit=bad)))
    # hardware constants
    for name, v, verdict in [("NaN", NAN, "refuse"), ("inf", INF, "refuse"), ("-inf", -INF, "refuse"),
                             ("a string", "108", "refuse"), ("a mapping", {"v": 1}, "refuse"),
                             ("2**70", 2**70, "either"), ("negative", -1, "either"), ("true", True, "either")]:
        add(f"hardware constant {name}", doc(entries("hardware", constants={"sm_count": v})), verdict)
    add("hardware spec source unknown", doc(entries("hardware", spec_sources=["nosuch"])))
    # web
    for v, verdict in [("2026-13-45", "refuse"), ("yesterday", "refuse"), (20260101, "refuse"), ("2099-01-01", "either"),
                       ("", "refuse")]:
        add(f"retrieved {v!r}", doc(entries("web", retrieved=v)), verdict)
    for v in ["xyz", "C" * 64, "c" * 63]:
        add(f"content_sha256 {v!r}", doc(entries("web", content_sha256=v)), "either")
    add("paper year 2**63", doc(entries("paper", year=2**63)), "either")
    add("paper version -1", doc(entries("paper", version=-1)), "either")
    add("arxiv as a float (unquoted)", _yaml({"sources": entries("paper", arxiv="FUZZV0")}, values={"FUZZV0": "2205.14135"}))
    # unknown keys
    for k in rng.sample(["colour", "Title", "pin", "commits", "ｕｒｌ", "", "123", "id "], 5):
        add(f"unknown key {k!r}", doc(entries("repo", **{k: "fuzz"})))
    # a source the claims rely on disappears or changes
    fam.add(Case("sources", "notes source removed", _write("sources/notes.yaml", "sources: []\n"),
                 ("claims/good.yaml", "sources/notes.yaml"), key=_content_key("sources/notes.yaml", "sources: []\n")))
    changed = _yaml({"sources": [{"id": "fa-notes", "kind": "notes", "repo": "https://github.com/zyeric/fa-notes",
                                  "commit": "c" * 40}]})
    fam.add(Case("sources", "notes commit moved to another valid SHA", _write("sources/notes.yaml", changed),
                 ("sources/notes.yaml", "claims/good.yaml"), "either", key=_content_key("sources/notes.yaml", changed)))
    # text-level damage
    good = doc(entries())
    for text in ["", "\n", "# nothing\n", "sources:\n", "sources: {}\n", "sources: 5\n", "- id: x\n", "hello\n",
                 "sources: [[]]\n", "sources: [null]\n", "source: []\n"]:
        add(f"shape {text!r}", text)
    add("random bytes", rng.randbytes(512))
    add("invalid UTF-8", good.encode()[:100] + b"\xc3\x28" + good.encode()[100:])
    add("tab indentation", good.replace("\n  ", "\n\t", 2))
    add("duplicate key", _yaml({"sources": [{**by_kind["paper"], "FUZZK0": 0}]}, lines={"FUZZK0": ["arxiv: '1234.5678'"]}))
    add("list as a key", _yaml({"sources": [{**by_kind["paper"], "FUZZK0": 0}]}, lines={"FUZZK0": ["? [a, b]", ": 1"]}))
    add("alias bomb 10**9 in title", _yaml({"sources": [{**by_kind["paper"], "title": "FUZZV0"}]},
                                           values={"FUZZV0": _bomb(9, 10)}), child=True)
    add("alias bomb 9**8 in pins", _yaml({"sources": [{**by_kind["repo"], "pins": {"main": "FUZZV0"}}]},
                                         values={"FUZZV0": _bomb(8, 9)}), child=True)
    add("lists nested 30000 deep in constants", _yaml({"sources": [{**by_kind["hardware"], "constants": "FUZZV0"}]},
                                                      values={"FUZZV0": _nest(30000)}), child=True)
    add("mappings nested 100 deep in constants", _yaml({"sources": [{**by_kind["hardware"], "constants": "FUZZV0"}]},
                                                       values={"FUZZV0": _nest(100, True)}))
    return fam


class _Drop:
    def __repr__(self) -> str:
        return "<drop>"


_DROP = _Drop()


# ---- family 3: evidence files

RUN_FIELDS_POOLS: dict[str, list[Any]] = {
    "claim_id": [5, 3.25, True, None, [], {}], "claim_hash": [5, None, []], "verifier": [5, None, {}],
    "verifier_hash": [5, None], "reason": [5, None, []], "hardware_class": [5, None, []], "started": [5, None, [], {}],
    "log": [5, None], "check_index": ["x", 3.25, None, [], {}], "duration_s": ["x", None, [], {}],
    "params": ["x", 5, [], None], "expect": ["x", 5, [], None], "measurements": ["x", 5, [], None, {"value": 4}],
    "environment": ["x", 5, []], "verdict": ["maybe", 5, None, "", "SUPPORTS"],
}


def _evidence_family(rng: random.Random) -> _Family:
    fam = _Family("evidence")

    def add(name: str, data: str | bytes, verdict: str = "refuse", child: bool = False, rel: str = BAD_RUNS) -> None:
        _file_case(fam, name, rel, data, verdict, child=child)

    good = _runs_file([_run("test.arith.four", started="2026-01-03T00:00:00+00:00"),
                       _run("test.arith.wrong", started="2026-01-03T00:00:00+00:00")])
    cuts = sorted(rng.sample(range(1, len(good) - 2), 14))
    for cut in cuts:
        add(f"truncated at {cut}/{len(good)}", good[:cut])
    for text in ["", " \n", "[]", '"runs"', "1", "null", "true", "[{}]", "{}"]:
        add(f"not an evidence file: {text!r}", text)
    for fmt, verdict in [(0, "refuse"), (2, "refuse"), (-1, "refuse"), ("1", "refuse"), (1.5, "refuse"),
                         (None, "refuse"), (10**30, "refuse"), (True, "either"), (1.0, "either")]:
        add(f"format {fmt!r}", json.dumps({"format": fmt, "runs": [_run()]}), verdict)
    add("format missing", json.dumps({"runs": [_run()]}))
    for runs in [None, {}, "x", 5, [1], [None], [[]], ["run"], [{}]]:
        add(f"runs {runs!r}", json.dumps({"format": 1, "runs": runs}))
    add("runs missing", json.dumps({"format": 1}))
    add("an extra top-level key", json.dumps({"format": 1, "runs": [_run()], "colour": "blue"}), "either")
    pairs = [(f, v) for f, pool in RUN_FIELDS_POOLS.items() for v in pool]
    for f, v in rng.sample(pairs, 22):
        add(f"run field {f}={v!r}", _runs_file([_run(**{f: v})]))
    for f in ("claim_id", "verdict", "started", "duration_s", "hardware_class", "check_index"):
        r = _run()
        del r[f]
        r["run_id"] = _run_id(r)
        add(f"run without {f}", _runs_file([r]))
    add("run with an unknown field", _runs_file([_run(colour="blue")]))
    # durations
    for name, value in [("NaN", NAN), ("Infinity", INF), ("-Infinity", -INF), ("1e400", INF), ("-1", -1),
                        ("-1e-300", -1e-300)]:
        text = _runs_file([_run(duration_s=value)])
        add(f"duration {name}", text.replace("Infinity", "1e400") if name == "1e400" else text)
    add("duration of 5000 digits", _runs_file([_run(duration_s=12345.5)]).replace("12345.5", "9" * 5000))
    # ids
    for name, rid in [("deadbeef", "deadbeef"), ("empty", ""), ("another run's", _run(reason="other")["run_id"])]:
        add(f"run_id {name}", _runs_file([_run(rehash=False, run_id=rid)]))
    r = _run()
    del r["run_id"]
    add("run without run_id", _runs_file([r]))
    # what the run says
    for cid in ["test.no.such", "NOT AN ID", "", "test.arith.four\n"]:
        add(f"run for unknown claim {cid!r}", _runs_file([_run(cid)]), "either")
    # A file from the future is set aside with a warning (kb validate still names it), not fatal to the corpus.
    for started, verdict in [("2099-01-01T00:00:00+00:00", "either"), ("9999-12-31T23:59:59+00:00", "either"),
                             ("yesterday", "refuse"), ("", "refuse"), ("2026-13-45T00:00:00+00:00", "refuse"),
                             ("2026-01-02T03:04:05", "either"), ("2026-01-02", "either")]:
        add(f"started {started!r}", _runs_file([_run(started=started)]), verdict)
    for idx, verdict in [(-1, "either"), (99, "either"), (2**63, "either"), (2**64, "either"), ("0", "either")]:
        add(f"check_index {idx!r}", _runs_file([_run(check_index=idx)]), verdict)
    for hc in ["", "../../etc", "cpu\n", "ｃｐｕ"]:
        add(f"hardware_class {hc!r}", _runs_file([_run(hardware_class=hc)]), "either")
    add("measurement value NaN", _runs_file([_run(measurements={"value": {"value": NAN, "unit": ""}})]), "either")
    add("verdict supports with no measurement", _runs_file([_run(measurements={})]), "either")
    # size and structure
    add("5000 runs", _runs_file([_run(started=f"2025-06-{1 + i % 28:02d}T00:00:{i % 60:02d}+00:00", reason=f"r{i}")
                                 for i in range(5000)]), "either")
    add("a 16 MB log", _runs_file([_run(log="x" * (16 << 20))]), "either")
    add("30 MB of whitespace", " " * (30 << 20) + good, "either")
    add("arrays nested 100000 deep", '{"format": 1, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}", child=True)
    add("objects nested 50000 deep in params", _runs_file([_run(params={"expr": "FUZZV0"})]).replace(
        '"FUZZV0"', '{"a": ' * 50_000 + "1" + "}" * 50_000), child=True)
    add("duplicate keys", '{"format": 2, "format": 1, "runs": []}', "either")
    add("UTF-8 BOM", good.encode("utf-8-sig"), "either")
    add("invalid UTF-8", good.encode()[:50] + b"\xff\xfe" + good.encode()[50:])
    add("NUL bytes", good.replace('"reason"', '"rea\x00son"'))
    add("bad file in a nested folder", "{", rel="evidence/cpu/deep/er/zz-bad.json")
    add("bad file at the top of evidence/", "[1, 2", rel="evidence/zz-bad.json")
    # not a regular file
    fam.add(Case("evidence", "a folder named *.json", _mkdir("evidence/cpu/zz-folder.json"),
                 ("evidence/cpu/zz-folder.json",), "either", key="dir:evidence/cpu/zz-folder.json", text=False))
    fam.add(Case("evidence", "dangling symlink *.json", _symlink("evidence/cpu/zz-dangling.json", "/nonexistent/x.json"),
                 ("evidence/cpu/zz-dangling.json",), "either", key="dangling:evidence", text=False))
    fam.add(Case("evidence", "symlink to a text file", _symlink("evidence/cpu/zz-passwd.json", "/etc/hostname"),
                 ("evidence/cpu/zz-passwd.json",), "either", key="link:/etc/hostname", text=False))
    loop = _both(_symlink("evidence/cpu/zz-loop-a.json", "{root}/evidence/cpu/zz-loop-b.json"),
                 _symlink("evidence/cpu/zz-loop-b.json", "{root}/evidence/cpu/zz-loop-a.json"))
    fam.add(Case("evidence", "symlink loop *.json", loop,
                 ("evidence/cpu/zz-loop-a.json", "evidence/cpu/zz-loop-b.json"), "either", key="loop:evidence", text=False))
    fam.add(Case("evidence", "FIFO named *.json", _fifo("evidence/cpu/zz-fifo.json"), ("evidence/cpu/zz-fifo.json",),
                 "either", child=True, key="fifo:evidence", needs_fifo=True, text=False))
    fam.add(Case("evidence", "symlink to /dev/zero named *.json", _symlink("evidence/cpu/zz-zero.json", "/dev/zero"),
                 ("evidence/cpu/zz-zero.json",), "either", child=True, key="zero:evidence", text=False))
    fam.add(Case("evidence", "symlink to /dev/urandom named *.json", _symlink("evidence/zz-random.json", "/dev/urandom"),
                 ("evidence/zz-random.json",), "either", child=True, key="urandom:evidence", text=False))
    fam.add(Case("evidence", "FIFO named *.yaml in claims/", _fifo("claims/zz-fifo.yaml"), ("claims/zz-fifo.yaml",),
                 "either", child=True, key="fifo:claims", needs_fifo=True, text=False))
    fam.add(Case("evidence", "symlink to /dev/zero named *.yaml in sources/", _symlink("sources/zz-zero.yaml", "/dev/zero"),
                 ("sources/zz-zero.yaml",), "either", child=True, key="zero:sources", text=False))
    fam.add(Case("evidence", "the base evidence file replaced by a FIFO", _fifo(BASE_RUNS), (BASE_RUNS,),
                 "either", child=True, key="fifo:base-evidence", needs_fifo=True, text=False))
    return fam


# ---- family 4: the audit record

def _audit_family(rng: random.Random) -> _Family:
    fam = _Family("audit")

    def add(name: str, data: str | bytes, verdict: str = "refuse", child: bool = False) -> None:
        _file_case(fam, name, AUDIT, data, verdict, child=child, commands=AUDIT_GATE)

    def rec(**over: Any) -> str:
        return json.dumps(_audit(**over), indent=1, sort_keys=True) + "\n"

    good = rec()
    for cut in sorted(rng.sample(range(1, len(good) - 2), 10)):
        add(f"truncated at {cut}/{len(good)}", good[:cut])
    for text in ["", "\n", "[]", '"drift"', "1", "null", "true", "[{}]"]:
        add(f"not an audit record: {text!r}", text)
    add("invalid UTF-8", good.encode()[:40] + b"\xff" + good.encode()[40:])
    add("UTF-8 BOM", good.encode("utf-8-sig"), "either")
    add("NUL byte", good.replace('"backend"', '"back\x00end"'), "either")
    for fmt, verdict in [(3, "refuse"), ("2", "refuse"), (None, "either"), (2.0, "either"), (0, "refuse"),
                         (-2, "refuse"), (10**30, "refuse")]:
        add(f"format {fmt!r}", rec(format=fmt), verdict)
    # legacy format 1
    add("format 1 with stale_claims", json.dumps({"format": 1, "stale_claims": {"test.arith.four": "moved"}}), "either")
    for sc in [[], "x", 5, [["test.arith.four", "moved"]]]:
        add(f"format 1 stale_claims {sc!r}", json.dumps({"format": 1, "stale_claims": sc}))
    add("format 1 stale reason a number", json.dumps({"format": 1, "stale_claims": {"test.arith.four": 5}}), "either")
    add("format 1 stale reason a list", json.dumps({"format": 1, "stale_claims": {"test.arith.four": [1, 2]}}), "either")
    # the drift mapping
    for drift, verdict in [([], "refuse"), ("x", "refuse"), (5, "refuse"), (None, "either"), ({}, "either"),
                           ([["test.arith.four", []]], "refuse"), (True, "refuse")]:
        add(f"drift {drift!r}", rec(drift=drift), verdict)
    for entries, verdict in [(5, "refuse"), ("edited", "refuse"), ({"status": "edited"}, "refuse"), (None, "refuse"),
                             ([5], "refuse"), ([None], "refuse"), ([[]], "refuse"), (["edited"], "refuse"),
                             ([{}], "either"), ([], "either")]:
        add(f"drift entries {entries!r}", rec(drift={"test.review.only": entries}), verdict)
    entry_mutations = [("status", 5, "either"), ("status", "bogus", "either"), ("status", None, "either"),
                       ("status", ["edited"], "refuse"), ("lines", [1], "refuse"), ("lines", "abc", "refuse"),
                       ("lines", 5, "refuse"), ("lines", [], "either"), ("lines", {"a": 1}, "refuse"),
                       ("pin", 5, "either"), ("pin", ["x"], "refuse"), ("pin", {"a": 1}, "refuse"),
                       ("source", None, "either"), ("source", ["fa-notes"], "refuse"), ("source", {"a": 1}, "refuse"),
                       ("source", "nosuch", "either"), ("heading", 5, "either"), ("head", [], "either"),
                       ("path", 5, "either"), ("carried_from", 5, "either"), ("legacy_reason", None, "either"),
                       ("legacy_reason", 5, "either"), ("anchor", "x", "either"), ("kind", 5, "either")]
    for f, v, verdict in entry_mutations:
        add(f"drift entry {f}={v!r}", rec(drift={"test.review.only": [_drift_entry(**{f: v})]}), verdict)
    add("drift entry status NaN", rec(drift={"test.review.only": [_drift_entry(status=NAN)]}), "either")
    add("drift for an unknown claim", rec(drift={"test.no.such": [_drift_entry()]}), "either")
    add("drift keyed by an empty id", rec(drift={"": [_drift_entry()]}), "either")
    add("drift on a fixed repo pin", rec(drift={"test.arith.four": [_drift_entry(source="flash-attention", kind="repo",
                                                                                 pin=REPO_SHA, lines=[10, 12])]}),
        "either")
    add("10000 drift entries", rec(drift={"test.review.only": [_drift_entry(detail=f"d{i}") for i in range(10_000)]}),
        "either")
    for f, v in [("checked_at", 5), ("checked_at", None), ("sources", []), ("sources", "x"), ("counts", []),
                 ("counts", {"x": 5}), ("backend", 5), ("offline", "yes"), ("refs", 5)]:
        add(f"record {f}={v!r}", rec(**{f: v}), "either")
    add("an integer of 5000 digits", good.replace('"format": 2', '"format": ' + "2" * 5000))
    add("arrays nested 100000 deep", '{"format": 2, "drift": ' + "[" * 100_000 + "]" * 100_000 + "}", child=True)
    add("duplicate keys", '{"format": 2, "drift": 5, "drift": {}}', "either")
    fam.add(Case("audit", "latest.json is a folder", _mkdir(AUDIT), (AUDIT,), "refuse", AUDIT_GATE, key="dir:audit", text=False))
    fam.add(Case("audit", "latest.json is a dangling symlink", _symlink(AUDIT, "/nonexistent/latest.json"), (AUDIT,),
                 "either", AUDIT_GATE, key="dangling:audit", text=False))
    fam.add(Case("audit", "latest.json is a FIFO", _fifo(AUDIT), (AUDIT,), "refuse", AUDIT_GATE, child=True,
                 key="fifo:audit", needs_fifo=True, text=False))
    fam.add(Case("audit", "latest.json links to /dev/zero", _symlink(AUDIT, "/dev/zero"), (AUDIT,), "refuse",
                 AUDIT_GATE, child=True, key="zero:audit", text=False))
    return fam


# ---- family 5: kb.local.toml

def _local_family(rng: random.Random) -> _Family:
    fam = _Family("local")

    def add(name: str, data: str | bytes, verdict: str = "refuse", child: bool = False) -> None:
        _file_case(fam, name, LOCAL, data, verdict, child=child)

    syntax = [
        '[clones\nflash-attention = "x"\n', '[clones]\nflash-attention = "x\n', "[clones]\nflash-attention = x\n",
        '[clones]\nflash-attention "x"\n', '[clones]\n= "x"\n', "[clones]\n[clones]\n", '[clones]\na = "x"\na = "y"\n',
        "clones = 5\n[clones]\n", '[clones]\nflash-attention = "\\q"\n', "[clones]\nflash-attention = '''x\n",
        '[clones]\nflash attention = "x"\n', "[clones]\nx = [1, 2\n", "x = 1979-13-27\n", '[clones]\nx = "a"\x00\n',
        '[clones]\nflash-attention = "x" # ok\n]]]\n', "x = {a = 1,}\n", "x = 0x\n", "x = 1__0\n", "x = 07\n",
        "x = 1.\n", "x = .5\n", "x = 'a\nb'\n", "[a.]\n", "[[clones]]\n[clones]\n", "clone_cache = \n",
        '[clones]\nflash-attention = """\n', "x = tru\n", "x = 1979-05-27T25:00:00\n", '"unterminated = 1\n',
        "[clones]\r\nx = 1\r", "x = [1,,2]\n",
    ]
    for _i, text in enumerate(syntax):
        add(f"syntax: {text!r}", text)
    # random one-character damage to a valid file, kept when tomllib rejects the result
    base_text = GOOD_LOCAL + 'clone_cache = "/nonexistent/fuzz/cache"\n'
    tries = 0
    made = 0
    while made < 14 and tries < 500:
        tries += 1
        pos = rng.randrange(len(base_text))
        if rng.random() < 0.5:
            text = base_text[:pos] + rng.choice('"[]=\\#\n{},\'') + base_text[pos:]
        else:
            text = base_text[:pos] + base_text[pos + 1:]
        try:
            tomllib.loads(text)
            continue
        except tomllib.TOMLDecodeError:
            pass
        if _content_key(LOCAL, text) in fam.cases:
            continue
        add(f"damaged at offset {pos}: {text!r}", text)
        made += 1
    add("random bytes", rng.randbytes(300))
    add("invalid UTF-8", GOOD_LOCAL.encode()[:10] + b"\xff" + GOOD_LOCAL.encode()[10:])
    add("UTF-8 BOM", GOOD_LOCAL.encode("utf-8-sig"), "either")
    # wrong types
    for text in ["clones = 5\n", 'clones = "x"\n', "clones = [1, 2]\n", "clones = []\n", "clones = true\n",
                 "clones = 1979-05-27\n", "[clones]\nflash-attention = 5\n", "[clones]\nflash-attention = true\n",
                 "[clones]\nflash-attention = []\n", "[clones]\nflash-attention = [\"a\", \"b\"]\n",
                 "[clones]\nflash-attention = {a = 1}\n", "[clones]\nflash-attention = 1979-05-27\n",
                 '[clones.flash-attention]\npath = "x"\n', "[clones]\nflash-attention = nan\n",
                 "clone_cache = 5\n", "clone_cache = []\n", "clone_cache = {}\n", "clone_cache = true\n",
                 "clone_cache = 1979-05-27\n", "clone_cache = inf\n", "[clone_cache]\npath = \"x\"\n",
                 "[[clones]]\nflash-attention = \"x\"\n"]:
        add(f"wrong type: {text!r}", text)
    # odd but maybe fine
    for text in ["", "\n", "# only a comment\n", 'clone = {}\n', 'clone_cache = ""\n', '[clones]\nnosuch-source = "/x"\n',
                 '[clones]\nflash-attention = ""\n', '[clones]\nflash-attention = "relative/path"\n',
                 '[clones]\nflash-attention = "a\\u0000b"\n', 'clone_cache = "a\\u0000b"\n', "[clones]\n",
                 "x = " + "[" * 100 + "]" * 100 + "\n", "x = " + "[" * 5000 + "]" * 5000 + "\n",
                 "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "# " + "x" * (4 << 20) + "\n",
                 '[clones]\n"flash-attention" = "/x"\nflash-attention = "/y"\n']:
        add(f"odd: {text[:40]!r} ({len(text)} chars)", text, "either")
    fam.add(Case("local", "kb.local.toml is a folder", _mkdir(LOCAL), (LOCAL,), "refuse", key="dir:local", text=False))
    fam.add(Case("local", "kb.local.toml is a dangling symlink", _symlink(LOCAL, "/nonexistent/kb.local.toml"), (LOCAL,),
                 "either", key="dangling:local", text=False))
    fam.add(Case("local", "kb.local.toml is a FIFO", _fifo(LOCAL), (LOCAL,), "refuse", child=True, key="fifo:local",
                 needs_fifo=True, text=False))
    fam.add(Case("local", "kb.local.toml links to /dev/zero", _symlink(LOCAL, "/dev/zero"), (LOCAL,), "refuse",
                 child=True, key="zero:local", text=False))
    return fam


# ---- family 6: the command line

def _cli_family(rng: random.Random) -> _Family:
    fam = _Family("cli")

    def add(name: str, *commands: tuple[str, ...], exits: tuple[int, ...] = (2,), setup: Setup = _nothing,
            child: bool = False, fault: tuple[str, ...] = (), key: str = "", needs_fifo: bool = False,
            text: bool = True) -> None:
        fam.add(Case("cli", name, setup, fault, "usage", tuple(commands), exits, child,
                     key=key or repr(commands), needs_fifo=needs_fifo, text=text))

    plan = ("verify", "--plan", "--claim", "test.arith.four")
    for v in ["-1", "inf", "nan", "0", "-inf", "1e309", "abc", "", "-0", "NaN", "+inf", "-1e-300"]:
        add(f"verify --plan --timeout {v!r}", (*plan, "--timeout", v))
    add("verify --plan --timeout 1e-320 (positive, absurd)", (*plan, "--timeout", "1e-320"), exits=(0, 2))
    for v in ["-1", "0", "nan", "inf"]:
        add(f"verify --timeout {v} (runs for real)", ("verify", "--claim", "test.arith.four", "--force", "--timeout", v),
            child=True)
    for v in ["0", "-3", "-1", "x", "1.5", "", str(10**30)]:
        add(f"verify --plan --jobs {v!r}", (*plan, "--jobs", v))
    for v in ["0", "-3"]:
        add(f"verify --jobs {v} (runs for real)", ("verify", "--claim", "test.arith.four", "--force", "--jobs", v),
            child=True)
    add("verify --jobs 10**9 (runs for real)", ("verify", "--claim", "test.arith.four", "--force", "--jobs", str(10**9)),
        child=True)
    for cid in ["nosuch.claim", "", "test.arith.four\n", " test.arith.four", "TEST.ARITH.FOUR", "ｔest.arith.four",
                "%", "'; DROP TABLE claims; --", "test.arith.*", "\x00"]:
        add(f"show {cid!r}", ("show", cid))
    for cid in ["nosuch.claim", "", "test.arith.four\n", "%"]:
        add(f"verify --plan --claim {cid!r}", ("verify", "--plan", "--claim", cid))
        add(f"graph {cid!r}", ("graph", cid))
    add("graph --note nosuch", ("graph", "--note", "nosuch"))
    add("graph --note ../../etc/passwd", ("graph", "--note", "../../etc/passwd"))
    for opt, val in [("-g", "bogus"), ("-g", ""), ("--topic", "bogus"), ("--status", "bogus"),
                     ("--phase", "sideways"), ("--label", "rumour"), ("--rests-on", "bogus"), ("--strength", "bogus")]:
        add(f"claims {opt} {val!r}", ("claims", opt, val))
    for opt, val in [("-g", "FA9"), ("--kind", "bogus"), ("--topic", "")]:
        add(f"verify --plan {opt} {val!r}", ("verify", "--plan", opt, val))
    for v in ["-1", "-100", "x", "1.5", ""]:
        add(f"graph --depth {v!r}", ("graph", "test.arith.four", "--depth", v))
    add("graph --depth 10**30", ("graph", "test.arith.four", "--depth", str(10**30)), exits=(0, 2))
    add("graph --format bogus", ("graph", "--format", "bogus"))
    for name, cmd in {
        "export status -o /nonexistent-dir/x.md": ("export", "status", "-o", "/nonexistent-dir/x.md"),
        "export status -o an existing folder": ("export", "status", "-o", "{root}/evidence"),
        "export status -o ''": ("export", "status", "-o", ""),
        "export status -o below a file": ("export", "status", "-o", "{root}/kb.local.toml/x.md"),
        "export site -o a file": ("export", "site", "-o", "{root}/kb.local.toml"),
        "export site -o /dev/null": ("export", "site", "-o", "/dev/null"),
        "export site -o below a file": ("export", "site", "-o", "{root}/kb.local.toml/site"),
        "export prov -o /nonexistent-dir/p.json": ("export", "prov", "-o", "/nonexistent-dir/p.json"),
        "export prov -o an existing folder": ("export", "prov", "-o", "{root}/claims"),
        "graph -o /nonexistent-dir/g.json": ("graph", "-o", "/nonexistent-dir/g.json"),
        "graph -o below a file": ("graph", "-o", "{root}/kb.local.toml/g.json"),
    }.items():
        add(name, cmd)
    for name, cmd in {
        "repin an unknown source": ("repin", "nosuch", "pin", "--to", "x"),
        "repin an unknown pin": ("repin", "flash-attention", "nosuchpin", "--to", "HEAD"),
        "repin a fixed pin": ("repin", "flash-attention", "v2.0.0", "--to", "HEAD"),
        "repin empty arguments": ("repin", "", "", "--to", ""),
        "repin the notes without a clone": ("repin", "fa-notes", "commit", "--to", ""),
        "repin a paper": ("repin", "fa1-paper", "v2", "--to", "x"),
        "repin with a shell-looking ref": ("repin", "flash-attention", "current-2026-07-22", "--to", "$(rm -rf /)"),
        "repin without --to": ("repin", "flash-attention", "current-2026-07-22"),
        "repin --write an unknown source": ("repin", "nosuch", "pin", "--to", "x", "--write"),
    }.items():
        add(name, cmd)
    def clone_at(target: str) -> Setup:
        def go(root: Path) -> None:
            (root / "notgit").mkdir(exist_ok=True)
            (root / LOCAL).write_text(f'[clones]\nflash-attention = "{target.replace("{root}", str(root))}"\n')
        return go
    add("repin with a clone that is an empty folder",
        ("repin", "flash-attention", "current-2026-07-22", "--to", "HEAD"), exits=(2, 3),
        setup=clone_at("{root}/notgit"), key="repin-notgit")
    add("repin with a clone that is /dev/null",
        ("repin", "flash-attention", "current-2026-07-22", "--to", "HEAD"), exits=(2, 3),
        setup=clone_at("/dev/null"), key="repin-devnull")
    for v in ["-1", "x", str(10**30), "1.5"]:
        add(f"search --limit {v!r}", ("search", "four", "--limit", v))
    add("search --limit 0", ("search", "four", "--limit", "0"), exits=(0, 2))
    add("search for FTS syntax", ("search", '"unbalanced AND OR ('), exits=(0, 2))
    add("search for NEAR(", ("search", "NEAR("), exits=(0, 2))
    add("search for *", ("search", "*"), exits=(0, 2))
    for name, cmd in {"anchor an unknown source": ("anchor", "nosuch", "x"),
                      "anchor an absolute note path": ("anchor", "fa-notes", "/etc/passwd"),
                      "anchor an inverted span": ("anchor", "flash-attention", "x.cpp", "5", "1", "--sha", "zz"),
                      "anchor a non-numeric span": ("anchor", "flash-attention", "x.cpp", "a", "b"),
                      "anchor with no path": ("anchor", "flash-attention", "")}.items():
        add(name, cmd)
    add("--db is a folder", ("--db", "{root}/evidence", "claims", "--json"))
    add("--db below a file", ("--db", "{root}/kb.local.toml/kb.db", "claims", "--json"))
    add("--db is not SQLite", ("--db", "{root}/notadb.db", "claims", "--json"), exits=(0, 2),
        setup=_write("notadb.db", "this is not a database\n" * 100), key="db-not-sqlite")
    add("--db is an empty file", ("--db", "{root}/empty.db", "claims", "--json"), exits=(0, 2),
        setup=_write("empty.db", b""), key="db-empty")
    add("--db is a truncated copy of the index", ("--db", "{root}/trunc.db", "claims", "--json"), exits=(0, 2),
        setup=lambda root: (root / "trunc.db").write_bytes((root / DB).read_bytes()[:3000]), key="db-truncated")
    add("--root is a file", ("--root", "{root}/kb.local.toml", "validate"))
    add("audit --backend bogus", ("audit", "--backend", "bogus"))
    add("audit --ref for an unknown source", ("audit", "--offline", "--no-write", "--ref", "nosuch-source=main"))
    add("sources fetch an unknown source", ("sources", "fetch", "nosuch"))
    add("evidence import a missing file", ("evidence", "import", "/nonexistent/x.json"))
    add("evidence import a folder", ("evidence", "import", "{root}/claims"))
    incoming = "incoming/bad.json"
    for name, data in {
        "truncated": _runs_file([_run()])[:100], "format 2": json.dumps({"format": 2, "runs": []}),
        "NaN duration": _runs_file([_run(duration_s=12345.5)]).replace("12345.5", "NaN"),
        "run_id mismatch": _runs_file([_run(rehash=False, run_id="deadbeef")]),
        "not an object": "[1, 2, 3]", "empty": "", "invalid UTF-8": b"\xff\xfe{",
        "integer of 5000 digits": '{"format": ' + "1" * 5000 + "}",
        "dated 2099": _runs_file([_run(started="2099-01-01T00:00:00+00:00")]),
        "arrays nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    }.items():
        add(f"evidence import: {name}", ("evidence", "import", "{root}/" + incoming), setup=_write(incoming, data),
            fault=(incoming,), child=name.startswith("arrays"), key=_content_key(incoming, data))
    add("evidence import /dev/zero", ("evidence", "import", "/dev/zero"), child=True)
    add("evidence import a FIFO", ("evidence", "import", "{root}/incoming/fifo.json"), child=True,
        setup=_fifo("incoming/fifo.json"), fault=("incoming/fifo.json",), needs_fifo=True, text=False)
    return fam


FAMILY_BUILDERS: dict[str, Callable[[random.Random], _Family]] = {
    "claims": _claims_family, "sources": _sources_family, "evidence": _evidence_family, "audit": _audit_family,
    "local": _local_family, "cli": _cli_family,
}
FAMILIES = tuple(FAMILY_BUILDERS)


@functools.cache
def _cases(family: str) -> tuple[Case, ...]:
    rng = random.Random(SEED + FAMILIES.index(family))
    return tuple(FAMILY_BUILDERS[family](rng).cases.values())


# --------------------------------------------------------------------------- checking one case

@dataclass
class Result:
    case: Case
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[tuple[str, Outcome | None]] = field(default_factory=list)  # (problem, the command it is about)
    state_changed: bool = False
    skipped: str | None = None


def _names_fault(case: Case, stderr: str) -> bool:
    """stderr names a file at fault, with a line (`path:N`) where the file is text."""
    line = r":[1-9]\d*" if case.text else ""
    return any(re.search(re.escape(f) + line, stderr) for f in case.fault)


def _judge(case: Case, o: Outcome, role: str) -> list[str]:
    """What is wrong with one command's outcome (empty: nothing)."""
    if o.code is None:
        return [f"hang: no exit within {TIME_LIMIT_S:g} s"]
    out = []
    if o.crash:
        out.append("traceback")
    elif o.code == 4:
        out.append("exit 4 (internal error)")
    if o.seconds > TIME_LIMIT_S:
        out.append(f"took {o.seconds:.1f} s")
    if o.crash or o.code == 4:
        return out
    if role == "usage":
        if o.code not in case.exits:
            out.append(f"exit {o.code}, expected {'/'.join(map(str, case.exits))}")
        elif o.code == 2 and case.fault and not _names_fault(case, o.stderr):
            out.append(f"exit 2 without naming {' or '.join(case.fault)}{':N' if case.text else ''}")
    elif role == "gate":
        allowed = (2,) if case.verdict == "refuse" else (0, 2)
        if o.code not in allowed:
            out.append("accepted bad input (exit 0)" if o.code == 0 else f"exit {o.code} for bad input")
        elif o.code == 2 and not _names_fault(case, o.stderr):
            out.append(f"exit 2 without naming {' or '.join(case.fault)}{':N' if case.text else ''}")
    else:  # probe / downstream: handled, whichever way
        if o.code not in (0, 2):
            out.append(f"exit {o.code}")
    return out


def _ids(o: Outcome | None) -> list[str]:
    if o is None or o.code != 0:
        return list(BASE_IDS)
    try:
        rows = json.loads(o.stdout)
        return [r["id"] for r in rows if isinstance(r, dict) and isinstance(r.get("id"), str)]
    except Exception:
        return list(BASE_IDS)


def _check_case(case: Case, root: Path, scratch: Path) -> Result:
    result = Result(case)
    if case.needs_fifo and not hasattr(os, "mkfifo"):
        result.skipped = "os.mkfifo is unavailable"
        return result
    run = _child if case.child else _invoke
    if case.child:
        # The base index was built by this process's kb; a child imports kb afresh (possibly newer code) and
        # would rebuild it on first use. Let it do so on the good project first, so the snapshot below is
        # what the child's kb stores for good input and any later change is the bad command's doing.
        fresh = run(root, ("claims", "--json"))
        if fresh.code != 0 or fresh.crash:
            result.failures.append((f"the good project failed before the case was set up: {fresh.first_line()}", fresh))
            return result
    case.setup(root)
    db_before, ev_before = _db_state(root / DB), _tree_state(root / "evidence")

    def go(args: tuple[str, ...], role: str) -> Outcome:
        args = tuple(a.replace("{root}", str(root)) for a in args)
        o = run(root, args)
        result.outcomes.append(o)
        result.failures += [(p, o) for p in _judge(case, o, role)]
        return o

    if case.verdict == "usage":
        for args in case.commands:
            if go(args, "usage").code is None:
                break
    else:
        gate = case.commands or FILE_GATE
        seen: dict[tuple[str, ...], Outcome] = {}
        hung = False
        for args in gate:
            seen[args] = o = go(args, "gate")
            if o.code is None:
                hung = True
                break
        if not hung:
            v = seen.get(("validate",)) or go(("validate",), "probe")
            if v.code == 0:
                listing = seen.get(("claims", "--json"))
                if listing is None:
                    listing = seen[("claims", "--json")] = go(("claims", "--json"), "downstream")
                if listing.code == 0:
                    try:
                        json.loads(listing.stdout)
                    except ValueError as exc:
                        result.failures.append((f"claims --json printed invalid JSON ({exc})", listing))
                downstream = [("show", cid) for cid in _ids(listing)[:6]]
                downstream += [("export", "status", "-o", str(scratch / "STATUS.md")), ("verify", "--plan", "--json")]
                for args in downstream:
                    if args not in seen and go(args, "downstream").code is None:
                        break
    db_after, ev_after = _db_state(root / DB), _tree_state(root / "evidence")
    if ev_after != ev_before:
        changed = sorted(k for k in set(ev_before) | set(ev_after) if ev_before.get(k) != ev_after.get(k))
        result.failures.append((f"evidence/ changed: {', '.join(changed[:3])}", None))
        result.state_changed = True
    indexed = any(o.code == 0 and o.args[:1] != ("validate",) for o in result.outcomes)
    if db_after != db_before and (case.verdict == "usage" or not indexed):
        result.failures.append(("index changed although the input was refused", None))
        result.state_changed = True
    return result


def _run_family(family: str, base: Path, work: Path) -> list[Result]:
    cases = _cases(family)
    work.mkdir(parents=True, exist_ok=True)

    def one(i: int, case: Case) -> Result:
        root, scratch = work / f"c{i:04d}", work / f"s{i:04d}"
        shutil.copytree(base, root, symlinks=True)
        scratch.mkdir()
        try:
            return _check_case(case, root, scratch)
        finally:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)

    with ThreadPoolExecutor(CHILD_WORKERS) as pool:
        futures = {i: pool.submit(one, i, c) for i, c in enumerate(cases) if c.child}
        results = {i: one(i, c) for i, c in enumerate(cases) if not c.child}
        results.update({i: f.result() for i, f in futures.items()})
    return [results[i] for i in sorted(results)]


def _report(family: str, results: list[Result]) -> tuple[str, list[str]]:
    """(figures line, one line per failure)."""
    failing = [r for r in results if r.failures]
    tracebacks = sum(1 for r in results for o in r.outcomes if o.crash or o.code == 4)
    hangs = sum(1 for r in results for o in r.outcomes if o.code is None)
    changed = sum(1 for r in results if r.state_changed)
    accepted = sum(1 for r in results if any(p.startswith("accepted bad input") for p, _ in r.failures))
    skipped = sum(1 for r in results if r.skipped)
    commands = sum(len(r.outcomes) for r in results)
    figures = (f"fuzz {family}: {len(results)} cases ({commands} commands, {skipped} skipped), "
               f"{len(failing)} failing; tracebacks {tracebacks}, hangs {hangs}, state changes {changed}, "
               f"bad input accepted {accepted}")
    lines = []
    for r in failing:
        for problem, o in r.failures:
            if o is None:
                lines.append(f"[{family}] {r.case.name}: {problem}")
            else:
                code = "none" if o.code is None else o.code
                lines.append(f"[{family}] {r.case.name}: `kb {' '.join(o.args)[:70]}`: {problem}; exit {code}; "
                             f"{o.first_line()}")
    return figures, lines


def _causes(results: list[Result]) -> Counter:
    """Failures grouped by (problem, first stderr line with case-specific details blurred)."""
    c: Counter = Counter()
    for r in results:
        for problem, o in r.failures:
            detail = "" if o is None else re.sub(r"(zz-bad\.\w+|c\d{4}|/tmp/\S+|'[^']*'|\d+)", "…", o.first_line())[:110]
            c[(re.sub(r"\d+", "N", problem) if problem.startswith("evidence/") else problem, detail)] += 1
    return c


# --------------------------------------------------------------------------- the project and the tests

@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good project every case starts from, with its index built."""
    root = tmp_path_factory.mktemp("fuzz") / "base"
    shutil.copytree(REPO / "sources", root / "sources")
    (root / "claims").mkdir()
    (root / "claims" / "good.yaml").write_text(_yaml(_claims_doc(*_base_claims())))
    (root / BASE_RUNS).parent.mkdir(parents=True)
    (root / BASE_RUNS).write_text(_runs_file([_run("test.arith.four"), _run("test.arith.wrong")]))
    (root / AUDIT).parent.mkdir(parents=True)
    (root / AUDIT).write_text(json.dumps(_audit(), indent=1, sort_keys=True) + "\n")
    (root / LOCAL).write_text(GOOD_LOCAL)
    for args in (("validate",), ("claims", "--json")):
        o = _invoke(root, args)
        assert o.code == 0 and not o.crash, f"the base project must be good: kb {' '.join(args)}: {o.stderr}{o.crash}"
    rows = json.loads(_invoke(root, ("claims", "--json")).stdout)
    assert {r["id"] for r in rows} == set(BASE_IDS)
    # The generators' starting points are valid too: a case breaks exactly what it says.
    probe = root.parent / "probe"
    shutil.copytree(root, probe, symlinks=True)
    (probe / BAD_SOURCES).write_text(_yaml({"sources": GOOD_EXTRA_SOURCES}))
    (probe / BAD_CLAIMS).write_text(_yaml(_claims_doc(_fuzz_claim())))
    (probe / BAD_RUNS).write_text(_runs_file([_run("test.arith.four", started="2026-01-03T00:00:00+00:00")]))
    o = _invoke(probe, ("validate",))
    assert o.code == 0 and not o.crash, f"the fuzz starting points must validate: {o.stderr}{o.crash}"
    shutil.rmtree(probe)
    return root


def test_fuzz_case_count() -> None:
    """At least 400 distinct cases, spread over every family."""
    counts = {f: len(_cases(f)) for f in FAMILIES}
    print("\nfuzz cases per family: " + ", ".join(f"{f} {n}" for f, n in counts.items())
          + f"; total {sum(counts.values())}")
    for f in FAMILIES:
        names = [c.name for c in _cases(f)]
        assert len(set(names)) == len(names), f"{f}: duplicate case names {[n for n, k in Counter(names).items() if k > 1]}"
        assert counts[f] >= 40, f"{f}: only {counts[f]} cases"
    assert sum(counts.values()) >= 400


@pytest.mark.parametrize("family", FAMILIES)
def test_fuzz(family: str, base: Path, tmp_path: Path) -> None:
    """Every case of one family keeps kb's contract; all failures are listed together."""
    start = time.monotonic()
    results = _run_family(family, base, tmp_path / "work")
    figures, lines = _report(family, results)
    print(f"\n{figures} in {time.monotonic() - start:.1f} s")
    for (problem, detail), n in _causes(results).most_common():
        print(f"  {n:4d} x {problem} | {detail}")
    assert not lines, f"{figures}\n" + "\n".join(lines)
