"""Toolchain checks: what the CUDA compiler accepts per architecture and what it emits.

A CUDA snippet (our own code, in verifiers/snippets/cuda/, named by the claim) is compiled with
nvcc for one architecture; the verifier records whether it compiles, the
registers ptxas reports, and whether given tokens appear in the PTX or in the
SASS that cuobjdump disassembles. No GPU is needed: these are facts about the
ISA and the compiler, decided by the compiler itself. The compiler runs in
the sandbox (kb.verify.sandbox) with flags from verifiers/trust.py's allow-list.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers import trust

HASH_FILES = trust.snippet_files()


class CompileParams(Params):
    """The snippet, the target, and what to look for."""

    code: str  # a snippet name: verifiers/snippets/cuda/NAME.cu
    arch: str = "sm_90a"
    flags: list[str] = []
    inspect: Literal["none", "ptx", "sass"] = "none"
    tokens: list[str] = []

    _code = field_validator("code")(lambda v: trust.check_snippet("cuda", v) if v else _no_code())
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))


def _no_code() -> str:
    raise ValueError("name a snippet in verifiers/snippets/cuda/")


def _check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise ValueError(f"{arch!r} is not an architecture like sm_80 or sm_90a")
    return arch


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return sandbox.run(cmd, work=cwd, timeout=120, limits=sandbox.Limits(cpu_s=120))


@verifier("toolchain.compile", kind="cpu-check", params=CompileParams,
          requires=Requirements(tools=("nvcc", "cuobjdump", "nvdisasm")), timeout_s=180)
def compile_snippet(p: CompileParams, ctx: Context) -> Outcome:
    """Compile for one architecture; measure `compiles`, `registers`, and `tokens_found` in PTX or SASS."""
    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "k.cu").write_text(trust.snippet("cuda", p.code))
        arch = p.arch.removeprefix("sm_")
        res = _run([nvcc, f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v", "-o", "k.cubin", "k.cu", *p.flags], work)
        compiles = res.returncode == 0
        regs = re.findall(r"Used (\d+) registers", res.stderr)
        meas: dict[str, tuple[object, str]] = {"compiles": (compiles, "")}
        if regs:
            meas["registers"] = (int(regs[-1]), "per thread")
        text = ""
        if compiles and p.inspect == "ptx":
            _run([nvcc, f"-arch=sm_{arch}", "-ptx", "-o", "k.ptx", "k.cu", *p.flags], work)
            text = (work / "k.ptx").read_text()
        elif compiles and p.inspect == "sass":
            tools = str(Path(find_tool("nvdisasm") or "nvdisasm").parent)
            dump = sandbox.run([find_tool("cuobjdump") or "cuobjdump", "-sass", "k.cubin"], work=work, readable=[Path(tools)],
                               timeout=120, env={"PATH": tools, "NVDISASM_PATH": tools})
            if dump.returncode != 0:
                raise RuntimeError(f"cuobjdump failed: {dump.stderr[-300:]}")
            text = dump.stdout
        if p.tokens and p.inspect != "none":
            found = [t for t in p.tokens if t in text]
            meas["tokens_found"] = (len(found) == len(p.tokens), "")
            meas["tokens_missing"] = ([t for t in p.tokens if t not in text], "")
        version = _run([nvcc, "--version"], work).stdout.strip().splitlines()[-1]
    log = (res.stderr[-1500:] + "\n" + "\n".join(ln for ln in text.splitlines()
                                               if any(t in ln for t in p.tokens))[:1500])
    return Outcome(measurements=meas, log=log, environment={"nvcc": version, "sandbox": sandbox.level()})
