"""Toolchain checks: what the CUDA compiler accepts per architecture and what it emits.

A CUDA snippet (our own code, given in the claim's parameters) is compiled with
nvcc for one architecture; the verifier records whether it compiles, the
registers ptxas reports, and whether given tokens appear in the PTX or in the
SASS that cuobjdump disassembles. No GPU is needed: these are facts about the
ISA and the compiler, decided by the compiler itself.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier


class CompileParams(Params):
    """The snippet, the target, and what to look for."""

    code: str
    arch: str = "sm_90a"
    flags: list[str] = []
    inspect: Literal["none", "ptx", "sass"] = "none"
    tokens: list[str] = []


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)


@verifier("toolchain.compile", kind="cpu-check", params=CompileParams,
          requires=Requirements(tools=("nvcc", "cuobjdump", "nvdisasm")), timeout_s=180)
def compile_snippet(p: CompileParams, ctx: Context) -> Outcome:
    """Compile for one architecture; measure `compiles`, `registers`, and `tokens_found` in PTX or SASS."""
    nvcc = find_tool("nvcc")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "k.cu").write_text(p.code)
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
            dump = subprocess.run([find_tool("cuobjdump") or "cuobjdump", "-sass", "k.cubin"], capture_output=True,
                                  text=True, cwd=work, timeout=120, env={"PATH": tools, "NVDISASM_PATH": tools})
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
    return Outcome(measurements=meas, log=log, environment={"nvcc": version})
