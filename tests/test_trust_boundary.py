"""The trust boundary (docs/SECURITY.md): claims data holds no code, and what kb executes runs sandboxed.

The hostile claims below are the reproductions that once passed `kb validate`
and then ran; each must now be refused at validation with its file, line and
field. The canaries are pinned code (a real git repository, a trusted pin)
that tries to reach the network, write outside its folder and read `$HOME`:
the sandbox stops each, and the run is an error, never evidence.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import threading
from pathlib import Path

import pytest
import yaml

from kb.verify import sandbox
from tests.conftest import claim, commit_files, kb_subprocess, trusting, write_claims

FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"


def _repo_source(project: Path, sha: str) -> None:
    (project / "sources" / "testrepo.yaml").write_text(
        f"sources:\n  - id: testrepo\n    kind: repo\n    url: https://example.invalid/up\n    pins:\n      main: {sha}\n")


def _code_claim(cid: str, verifier: str, params: dict, path: str = "src/a.h", sha: str = FAKE_SHA) -> dict:
    note = claim("x")["anchors"][0]
    anchor = {"source": "testrepo", "sha": sha, "path": path}
    return claim(cid, label="source-backed", anchors=[note, anchor],
                 checks=[{"verifier": verifier, "params": {"anchor": 1, **params}, "expect": {"value": {"equals": 1}}}])


HOST = {"functions": ["f"], "call": "f(x)", "grid": {"x": [1]}}
CX = {"values": {"v": "T::kValue"}}
PY = {"functions": ["f"], "call": "f(x)", "grid": {"x": [1]}}

# id -> (verifier, params, the field that must be named, words the message must hold)
HOSTILE = {
    "evil.py.read-outside": ("code.py-exec", {**PY, "call": "open('/etc/hostname').read()"}, "call", "open"),
    "evil.py.import": ("code.py-exec", {**PY, "call": "__import__('os').system('id')"}, "call", "__import__"),
    "evil.py.dunder-walk": ("code.py-exec", {**PY, "call": "().__class__.__base__.__subclasses__()"}, "call", "__"),
    "evil.py.vars-string": ("code.py-exec", {**PY, "call": "vars(f)['__builtins__']"}, "call", "vars"),
    "evil.py.prelude-text": ("code.py-exec", {**PY, "prelude": "import os\nos.system('id')"}, "prelude", "snippet"),
    "evil.host.wrapper": ("code.host-exec", {**HOST, "flags": ["-wrapper", "/bin/sh,-c,touch /tmp/kb-pwned"]}, "flags",
                          "allow-list"),
    "evil.host.at-file": ("code.host-exec", {**HOST, "flags": ["@/etc/passwd"]}, "flags", "allow-list"),
    "evil.host.save-temps": ("code.host-exec", {**HOST, "flags": ["-save-temps", "-dumpbase", "/tmp/kb-x"]}, "flags",
                             "allow-list"),
    "evil.host.prelude-system": ("code.host-exec", {**HOST, "prelude": 'int kb_x = system("id");'}, "prelude", "snippet"),
    "evil.host.lambda-call": ("code.host-exec", {**HOST, "call": '[&] { return system("id"); }()'}, "call", "not allowed"),
    "evil.cx.output": ("code.constexpr", {**CX, "dirs": ["--output=/tmp/kb-escape.tar"]}, "dirs", "repository-relative"),
    "evil.cx.remote-exec": ("code.constexpr", {**CX, "dirs": ["--remote=x", "--exec=touch /tmp/kb-y"]}, "dirs",
                            "repository-relative"),
    "evil.cx.dotdot": ("code.constexpr", {**CX, "include": ["../../etc/passwd"]}, "include", "'..'"),
    "evil.cx.include-line": ("code.constexpr", {**CX, "prelude": '#include "/etc/passwd"'}, "prelude", "type aliases"),
    "evil.cx.value-block": ("code.constexpr", {"values": {"v": "[]{ return 1; }()"}}, "values", "not allowed"),
    "evil.cx.asm": ("code.constexpr", {"values": {"v": "asm(1)"}}, "values", "asm"),
    "evil.res.flags": ("code.resources", {"flags": ["-o", "/tmp/kb-out"]}, "flags", "allow-list"),
    "evil.tc.inline-code": ("toolchain.compile", {"code": "__global__ void k() {}"}, "code", "snippet"),
}


def test_hostile_claims_are_refused_by_validate_with_file_line_and_field(project: Path, run_kb) -> None:
    _repo_source(project, FAKE_SHA)
    claims = []
    for cid, (verifier, params, _, _) in HOSTILE.items():
        if verifier == "toolchain.compile":
            claims.append(claim(cid, checks=[{"verifier": verifier, "params": params, "expect": {"compiles": {"is": True}}}]))
        else:
            claims.append(_code_claim(cid, verifier, params))
    path = write_claims(project, "hostile", claims)
    res = run_kb("validate")
    assert res.exit_code == 2, res.output
    lines = {c["id"]: i + 1 for i, c in enumerate(yaml.safe_load(path.read_text())["claims"])}
    assert lines  # the file parsed
    for cid, (_, _, field, words) in HOSTILE.items():
        found = [ln for ln in res.output.splitlines() if f"claim {cid} " in ln and f"params.{field}" in ln]
        assert found, f"{cid}: no problem naming params.{field}:\n{res.output[:3000]}"
        assert re.match(r"claims/hostile\.yaml:\d+: ", found[0]), found[0]
        assert words in found[0], found[0]
    for leftover in ("/tmp/kb-pwned", "/tmp/kb-escape.tar", "/tmp/kb-y", "/tmp/kb-out"):
        assert not os.path.exists(leftover)


def test_a_code_check_at_an_untrusted_revision_is_refused(project: Path, run_kb, tmp_path: Path) -> None:
    sha = commit_files(tmp_path / "up", {"src/a.h": "inline int f(int x) { return x; }\n"}, "one")
    _repo_source(project, sha)
    write_claims(project, "pins", [_code_claim("test.untrusted", "code.host-exec", HOST, sha=sha)])
    res = run_kb("validate")
    assert res.exit_code == 2
    assert "is not a revision whose code kb may execute" in res.output and "checks[0].params.anchor" in res.output
    # The operator may trust it on this machine; data cannot.
    os.environ["KB_TRUST_PINS"] = f"testrepo@{sha}"
    try:
        assert "is not a revision whose code kb may execute" not in run_kb("validate").output
    finally:
        del os.environ["KB_TRUST_PINS"]


CANARY = '''
def reach_network(x):
    """Connects to the test's loopback server; returns 1 only if that worked."""
    import socket
    socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
    return 1


def write_outside(x):
    """Writes beside the test's project; returns 1 only if the file was written."""
    with open(OUTSIDE, "w") as fh:
        fh.write("escaped")
    return 1


def read_home(x):
    """Reads a file the test put in $HOME; returns 1 only if it could be read."""
    with open(SECRET) as fh:
        return 1 if fh.read() == "secret" else 0
'''


@pytest.mark.skipif(sandbox.level() != "bwrap", reason="needs bubblewrap (apt-get install bubblewrap): "
                    f"this machine's sandbox is {sandbox.describe()}")
def test_canaries_in_pinned_code_are_stopped_and_are_errors_not_evidence(project: Path, tmp_path: Path) -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The server also counts raw connections: a connect that succeeds is an escape even without a request.
    accepted: list[int] = []
    orig = server.get_request

    def counting() -> tuple:
        accepted.append(1)
        return orig()

    server.get_request = counting  # type: ignore[method-assign]
    outside = tmp_path / "escaped.txt"
    home = Path(os.environ.get("HOME", "/root"))
    secret = home / f".kb-canary-{os.getpid()}"
    secret.write_text("secret")
    try:
        code = (f"PORT = {server.server_address[1]}\nOUTSIDE = {str(outside)!r}\nSECRET = {str(secret)!r}\n" + CANARY)
        up = tmp_path / "canary"
        sha = commit_files(up, {"pkg/canary.py": code}, "canary")
        _repo_source(project, sha)
        # Constants the functions read are module-level assignments: extract them as helpers of their own.
        claims = [_code_claim(f"test.canary.{name.replace('_', '-')}", "code.py-exec",
                              {"functions": [name], "call": f"{name}(x)", "grid": {"x": [1]}, "point": {"x": 1},
                               "prelude": "test-canary-constants"}, path="pkg/canary.py", sha=sha)
                  for name in ("reach_network", "write_outside", "read_home")]
        snippets = tmp_path / "snippets" / "py"
        snippets.mkdir(parents=True)
        (snippets / "test-canary-constants.py").write_text(code.split("\ndef ")[0] + "\n")
        write_claims(project, "canary", claims)
        env = trusting("testrepo", sha, KB_CLONE_TESTREPO=str(up), KB_BUILD_CACHE=str(tmp_path / "build"),
                       KB_SNIPPET_PATH=str(tmp_path / "snippets"))
        res = kb_subprocess(project, "verify", "--json", env=env)
        assert res.stdout, res.stderr
        summary = json.loads(res.stdout)
        assert {e["check"] for e in summary["errors"]} == {f"test.canary.{n}#0" for n in
                                                            ("reach-network", "write-outside", "read-home")}, summary
        # What stopped each one is at the end of the run's log (the child's traceback).
        errors = {f"test.canary.{n}#0": json.loads(kb_subprocess(project, "show", f"test.canary.{n}", "--json",
                                                                  env=env).stdout)["runs"][0]["log"]
                  for n in ("reach-network", "write-outside", "read-home")}
        assert "Network is unreachable" in errors["test.canary.reach-network#0"] or \
            "Connection refused" in errors["test.canary.reach-network#0"], errors
        assert "Read-only file system" in errors["test.canary.write-outside#0"], errors
        assert "No such file" in errors["test.canary.read-home#0"], errors
        assert not outside.exists() and not hits and not accepted
        for n in ("reach-network", "write-outside", "read-home"):
            show = json.loads(kb_subprocess(project, "show", f"test.canary.{n}", "--json", env=env).stdout)
            assert show["status"][0]["status"] not in ("verified", "refuted")
            assert all(r["verdict"] == "error" for r in show["runs"])
        # Negative control: with the sandbox off, the same canary escapes (so the canary can see an escape).
        off = kb_subprocess(project, "verify", "--json", "--force", "--claim", "test.canary.write-outside",
                            env={**env, "KB_SANDBOX": "off"})
        assert json.loads(off.stdout)["verdicts"].get("supports") == 1 and outside.read_text() == "escaped"
    finally:
        server.shutdown()
        secret.unlink(missing_ok=True)


@pytest.mark.skipif(sandbox.level() != "bwrap", reason=f"needs bubblewrap; this machine's sandbox is {sandbox.describe()}")
def test_the_sandbox_itself_denies_network_writes_home_and_tokens(tmp_path: Path) -> None:
    home = Path(os.environ.get("HOME", "/root"))
    secret = home / f".kb-sandbox-test-{os.getpid()}"
    secret.write_text("x")
    os.environ["KB_TEST_GITHUB_TOKEN"] = "ghp_notreal"
    try:
        probe = ("import os, socket\n"
                 "out = []\n"
                 "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); out.append('net')\n"
                 "except OSError: pass\n"
                 f"try:\n    open({str(tmp_path / 'w')!r}, 'w'); out.append('write')\n"
                 "except OSError: pass\n"
                 f"out.append('home' if os.path.exists({str(secret)!r}) else '')\n"
                 "out.append('token' if any('TOKEN' in k for k in os.environ) else '')\n"
                 "open('inside', 'w').write('ok'); out.append(open('inside').read())\n"
                 "print(','.join(x for x in out if x))\n")
        res = sandbox.run(["python3", "-c", probe])
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "ok"  # only its own work folder is writable
        with pytest.raises(__import__("subprocess").TimeoutExpired):
            sandbox.run(["python3", "-c", "while True: pass"], timeout=1)
    finally:
        secret.unlink(missing_ok=True)
        del os.environ["KB_TEST_GITHUB_TOKEN"]
