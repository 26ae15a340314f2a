"""nvcc's compilation trajectory, read off the compiler itself, and the build helpers kb's own CUDA probes use.

`toolchain.nvcc-trajectory` asks nvcc for its plan (`--dryrun`) of one build of kb's probe
(verifiers/gpu/cuda/image_select.cu) into a fatbinary holding sm_80 and sm_90 SASS plus compute_86
PTX, follows each file from stage to stage (cicc writes PTX, ptxas turns that PTX into an
architecture's cubin, fatbinary packs the cubins and the PTX), then really builds it and lists the
images with cuobjdump. No GPU is needed; which image the runtime picks at launch is
`gpu.image-select` (verifiers/gpu/micro.py).

`build` and `sass_counts` are shared with the GPU probes: they compile one of kb's CUDA files in
verifiers/gpu/cuda/ with fixed flags (nothing from claims data reaches the command line).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier

CUDA_DIR = Path(__file__).resolve().parent.parent / "gpu" / "cuda"
HASH_FILES = ["../gpu/cuda/image_select.cu"]

# The trajectory build: SASS for two real architectures and PTX for a third, virtual one.
TRAJECTORY_GENCODES = ("arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_86,code=compute_86")


def build(source: str, out: Path, gencodes: tuple[str, ...], kind: str = "exe", extra: tuple[str, ...] = (),
          timeout: float = 300) -> tuple[Path, str]:
    """Compile verifiers/gpu/cuda/SOURCE into `out` (an executable, or a shared library for kind 'so').

    Returns the artifact and ptxas' -v report; a failed compile raises RuntimeError with nvcc's message.
    """
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc is not installed")
    src = CUDA_DIR / source
    flags = ["-O3", "-std=c++17", "-Xptxas", "-v", *extra]
    for g in gencodes:
        flags += ["-gencode", g]
    if kind == "so":
        flags += ["-Xcompiler", "-fPIC", "-shared", "--cudart", "shared"]
    res = subprocess.run([nvcc, *flags, "-o", str(out), str(src)], capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source}:\n{res.stderr[-2000:]}")
    return out, res.stderr


def cuobjdump(*args: str, timeout: float = 120) -> str:
    """cuobjdump's output (its nvdisasm found beside it); RuntimeError when it fails."""
    tool = find_tool("cuobjdump")
    if tool is None:
        raise RuntimeError("cuobjdump is not installed")
    disasm = find_tool("nvdisasm")
    env = {"PATH": str(Path(disasm).parent) if disasm else "/usr/bin:/bin"}
    res = subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"cuobjdump {' '.join(args)} failed: {res.stderr[-400:]}")
    return res.stdout


_FUNC = re.compile(r"Function : (\S+)")
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)")  # HGMMA.64x256x16...


def sass_counts(binary: Path) -> dict[str, Counter[str]]:
    """Per (mangled) kernel name, how often each SASS opcode (with its modifiers) occurs: static counts."""
    out: dict[str, Counter[str]] = {}
    cur: Counter[str] | None = None
    for line in cuobjdump("-sass", str(binary)).splitlines():
        if m := _FUNC.search(line):
            cur = out.setdefault(m.group(1), Counter())
        elif cur is not None and (m := _OPCODE.search(line)):
            cur[m.group(1)] += 1
    return out


def dryrun_stages(stderr: str) -> list[tuple[str, list[str]]]:
    """nvcc --dryrun's commands as (program name, arguments), in order."""
    out = []
    for line in stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        try:
            argv = shlex.split(line[3:])
        except ValueError:
            continue
        if argv and "=" not in argv[0]:  # variable assignments (#$ PATH=...) are not commands
            out.append((Path(argv[0]).name, argv[1:]))
    return out


def _after(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def follow(stages: list[tuple[str, list[str]]]) -> dict[str, object]:
    """Follow each file through the plan: which PTX cicc wrote, which cubins ptxas made of it, what fatbinary packed.

    Only the device pass before the first fatbinary counts (nvcc's later device-link step repackages
    the link stubs, not the kernel).
    """
    ptx_written: dict[str, int] = {}
    cubins: dict[str, tuple[str, int]] = {}  # cubin -> (sm_XX, its stage index)
    chained: list[bool] = []
    images: list[str] = []
    fat_at = None
    for i, (prog, args) in enumerate(stages):
        if prog == "cicc" and (o := _after(args, "-o")) and o.endswith(".ptx"):
            ptx_written[o] = i
        elif prog == "ptxas":
            arch = next((a.split("=", 1)[1] for a in args if a.startswith("-arch=")), "?")
            src = next((a for a in args if a.endswith(".ptx")), None)
            o = _after(args, "-o")
            chained.append(src in ptx_written and ptx_written[src] < i)
            if o:
                cubins[o] = (arch, i)
        elif prog == "fatbinary" and fat_at is None:
            fat_at = i
            for a in args:
                if m := re.fullmatch(r"--image3=kind=(elf|ptx),sm=(\d+),file=(.+)", a):
                    kind, sm, f = m.groups()
                    came = (f in cubins and cubins[f][1] < i) if kind == "elf" else (f in ptx_written and ptx_written[f] < i)
                    chained.append(came)
                    images.append(f"{kind}:{'sm' if kind == 'elf' else 'compute'}_{sm}")
    return {"ptxas_arches": sorted({a for a, _ in cubins.values()}), "fatbinary_images": sorted(images),
            "every_file_chained": bool(chained) and all(chained) and fat_at is not None,
            "ptx_files": len(ptx_written), "fatbinary_stage": fat_at}


class TrajectoryParams(Params):
    """No knobs: the build is fixed (TRAJECTORY_GENCODES), so a check restates only what it expects."""


@verifier("toolchain.nvcc-trajectory", kind="cpu-check", params=TrajectoryParams,
          requires=Requirements(tools=("nvcc", "cuobjdump")), timeout_s=240)
def nvcc_trajectory(p: TrajectoryParams, ctx: Context) -> Outcome:
    """nvcc's plan for a fatbinary build (cicc -> PTX -> ptxas -> cubin -> fatbinary) and cuobjdump's image list."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return Outcome(verdict="skipped", reason="nvcc is not installed")
    gen: list[str] = []
    for g in TRAJECTORY_GENCODES:
        gen += ["-gencode", g]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan = subprocess.run([nvcc, "--dryrun", *gen, "-o", str(work / "probe"), str(CUDA_DIR / "image_select.cu")],
                              capture_output=True, text=True, timeout=60)
        facts = follow(dryrun_stages(plan.stderr))
        exe, _ = build("image_select.cu", work / "probe", TRAJECTORY_GENCODES)
        elf = sorted({m.group(1) for m in re.finditer(r"\.(sm_\d+)\.cubin", cuobjdump("--list-elf", str(exe)))})
        ptx = sorted({m.group(1) for m in re.finditer(r"\.(sm_\d+)\.ptx", cuobjdump("--list-ptx", str(exe)))})
        version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    meas: dict[str, tuple[object, str]] = {
        "every_file_chained": (facts["every_file_chained"], "each ptxas input is a PTX file cicc wrote earlier, each "
                               "fatbinary image a file an earlier stage wrote"),
        "ptxas_arches": (facts["ptxas_arches"], "architectures ptxas made cubins for"),
        "fatbinary_images": (facts["fatbinary_images"], "images the fatbinary stage packs"),
        "listed_elf": (elf, "cuobjdump --list-elf of the built executable (architectures)"),
        "listed_ptx": (ptx, "cuobjdump --list-ptx (the PTX's virtual architecture, named sm_NN by cuobjdump)"),
    }
    log = f"gencodes {', '.join(TRAJECTORY_GENCODES)}; plan facts {facts}"
    return Outcome(measurements=meas, log=log, environment={"nvcc": version})
