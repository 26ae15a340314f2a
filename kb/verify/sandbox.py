"""The sandbox for everything kb executes that it did not write itself.

Pinned code (host functions, kernel units, FA4's Python), kb's builds of it
and the compilers that read it run through `run()`: a child process with

- no network (a new network namespace), its own PID namespace, and
  `--die-with-parent` (it dies with the verifier that started it);
- the whole file system read-only, a private writable work folder, an empty
  `/tmp` and an empty `$HOME` (so credentials under the home folder are not
  readable);
- an environment reduced to an allow-list (no tokens, no credentials);
- CPU-time, address-space, file-size and open-file limits set in the child
  itself (`setrlimit` before exec), and a wall-clock timeout that kills the
  child's whole process group.

The platform mechanism is bubblewrap (`bwrap`). Where it is missing or cannot
create namespaces, `run()` degrades to the limits, the clean environment and
the process group alone, and every run records which level it had
(`environment.sandbox`); `kb hw` reports the level. `KB_SANDBOX=require`
makes a missing sandbox an error instead of a degrade. A verifier's worker
process is started the same way by the runner (`worker_prefix`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Environment variables a child may see; everything else (tokens, cloud credentials, SSH agents) is dropped.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
             "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED",
             "TERM")
# Prefixes of variables a verifier's worker needs (its own settings, the CuTe DSL's, torch's).
ENV_ALLOW_PREFIXES = ("KB_", "CUTE_DSL_", "TORCH_", "TRITON_", "PYTORCH_", "NVIDIA_", "CUDA_", "OMP_", "MKL_")
# Never passed on, whatever their prefix: they open the network or name credentials.
ENV_DENY_SUBSTRINGS = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AWS_", "GITHUB_", "SSH_", "_KEY", "PROXY")

GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """Resource limits applied in the child before it executes anything."""

    cpu_s: int = 600
    address_space: int | None = 16 * GIB  # None: unlimited (CUDA reserves far more virtual memory than it uses)
    file_size: int = 2 * GIB
    open_files: int = 4096


class SandboxError(RuntimeError):
    """The sandboxed command could not be run as required (KB_SANDBOX=require and no sandbox)."""


def clean_env(extra: dict[str, str] | None = None, keep_prefixes: bool = False) -> dict[str, str]:
    """The environment a child gets: the allow-list (and, for workers, kb's and the toolkits' prefixes)."""
    out: dict[str, str] = {}
    for k, v in os.environ.items():
        if any(s in k.upper() for s in ENV_DENY_SUBSTRINGS):
            continue
        if k in ENV_ALLOW or (keep_prefixes and k.startswith(ENV_ALLOW_PREFIXES)):
            out[k] = v
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.setdefault("LANG", "C.UTF-8")
    out.update(extra or {})
    return out


@functools.cache
def level() -> str:
    """What this machine gives: `bwrap` (namespaces), or `rlimits` (limits, clean env, process group only)."""
    if os.environ.get("KB_SANDBOX") == "off":
        return "rlimits"
    exe = shutil.which("bwrap")
    if not exe:
        return "rlimits"
    try:
        res = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent",
                              "--dev", "/dev", "--proc", "/proc", "--", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "rlimits"
    return "bwrap" if res.returncode == 0 else "rlimits"


def describe() -> str:
    """One line for `kb hw` and evidence: the level and what it means."""
    if level() == "bwrap":
        return "bwrap: no network, read-only file system, private /tmp and $HOME, clean environment, rlimits"
    why = "KB_SANDBOX=off" if os.environ.get("KB_SANDBOX") == "off" else "bubblewrap missing or unable to create namespaces"
    return f"rlimits only ({why}): clean environment, CPU/memory/file limits, process group killed on timeout"


def _require() -> None:
    if os.environ.get("KB_SANDBOX") == "require" and level() != "bwrap":
        raise SandboxError(f"KB_SANDBOX=require, but this machine has no working sandbox ({describe()})")


def _bwrap_args(work: Path | None, writable: Sequence[Path], readable: Sequence[Path], devices: bool, network: bool,
                hide_tmp: bool, scratch_home: bool) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
    args += ["--dev-bind", "/dev", "/dev"] if devices else ["--dev", "/dev"]
    if not network:
        args.append("--unshare-net")
    # Hidden folders: the caller's home (credentials) and, for commands, the shared /tmp. What the child
    # needs from inside them (the Python installation, the project, its build cache) is bound back read-only.
    hidden = [Path(h).resolve() for h in (os.environ.get("HOME", ""), "/tmp" if hide_tmp else "")
              if h and h != "/" and Path(h).is_dir()]
    for h in hidden:
        args += ["--tmpfs", str(h)]
    for keep in _needed_under(hidden, readable):
        args += ["--ro-bind", str(keep), str(keep)]
    for w in [*([work] if work else []), *writable]:
        w.mkdir(parents=True, exist_ok=True)
        args += ["--bind", str(w.resolve()), str(w.resolve())]
    # The hidden folders' stand-ins are read-only too: a write there must fail, not land in a throwaway copy.
    # A worker keeps a scratch home (torch's and Triton's caches), thrown away when it ends.
    for h in hidden if not scratch_home else [h for h in hidden if str(h) == "/tmp"]:
        args += ["--remount-ro", str(h)]
    return args


def _needed_under(hidden: list[Path], readable: Sequence[Path]) -> list[Path]:
    import sys

    wanted = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.executable).parent,
              Path.cwd(), *readable,
              *(Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p),
              *(Path(p) for p in os.environ.get("KB_SANDBOX_EXPOSE", "").split(os.pathsep) if p)}
    found: set[Path] = set()
    for w in wanted:
        with contextlib.suppress(OSError, ValueError):
            r = w.resolve()
            if r.exists() and any(r != h and r.is_relative_to(h) for h in hidden):
                found.add(r)
    # Outermost first, and no path twice (a bind inside a bind is redundant).
    return [p for p in sorted(found) if not any(p != q and p.is_relative_to(q) for q in found)]


def _preexec(limits: Limits):
    def apply() -> None:
        # Die with the process that started us, even if it is killed with SIGKILL.
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        if limits.address_space:
            resource.setrlimit(resource.RLIMIT_AS, (limits.address_space, limits.address_space))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size, limits.file_size))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def command(argv: Sequence[str], work: Path | None = None, writable: Sequence[Path] = (),
            readable: Sequence[Path] = (), devices: bool = False, network: bool = False,
            hide_tmp: bool = True, scratch_home: bool = False) -> tuple[list[str], str]:
    """The argv that runs `argv` sandboxed at this machine's level, and that level."""
    _require()
    if level() == "bwrap":
        return [*_bwrap_args(work, writable, readable, devices, network, hide_tmp, scratch_home), "--", *argv], "bwrap"
    return list(argv), "rlimits"


def run(argv: Sequence[str], *, work: Path | None = None, readable: Sequence[Path] = (),
        input: str | bytes | None = None, timeout: float = 300, limits: Limits = Limits(),
        env: dict[str, str] | None = None, cwd: Path | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """Run `argv` in the sandbox; returns the completed process (check `returncode` yourself).

    `work` is the only writable folder (created when missing; a private temporary one when None);
    `readable` lists folders under /tmp or $HOME the command must read (inputs, tools).
    A timeout kills the child's process group and raises `subprocess.TimeoutExpired`.
    """
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="kb-sandbox-")) if own else work
    try:
        cmd, _ = command(argv, work=work, readable=[*readable, *([cwd] if cwd else [])])
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(cwd or work),
                                env=clean_env({"HOME": str(work), "TMPDIR": str(work), **(env or {})}),
                                preexec_fn=_preexec(limits), start_new_session=True, text=text)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a child started with `start_new_session=True` and everything it started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def worker_limits(gpu: bool) -> Limits:
    """Limits of a verifier worker process: CUDA needs an unlimited address space."""
    return Limits(cpu_s=24 * 3600, address_space=None if gpu else 48 * GIB, file_size=8 * GIB, open_files=8192)


def worker_preexec(gpu: bool):
    """The pre-exec hook the runner gives a worker: parent-death signal and limits."""
    return _preexec(worker_limits(gpu))
