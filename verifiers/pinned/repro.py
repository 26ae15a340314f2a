"""Reproducible builds of kb's pinned libraries: the same key gives the same bytes, in any build directory.

A pinned build records the sha256 of its `libkb.so` (verifiers/pinned/build.py). For that hash to be
re-derivable from the recorded key, nothing in the objects may depend on where, when or by which
process the build ran. Measured with nvcc 13.0.88 and g++ 12.2 (docs/ARCHITECTURE.md, "Reproducible
pinned builds"), these got into the bytes:

- nvcc's temporary file names (`tmpxft_<pid>_00000000-6_<unit>.cudafe1.cpp`) become the host
  object's STT_FILE symbol: two compiles in the same folder differ. `-objtemp` (`--objdir-as-tempdir`)
  names the intermediates after the object instead, so every unit is compiled to the fixed name
  `kb.o` in a private folder and renamed into the cache.
- nvcc's module id (in the `_INTERNAL_<hash>_<len>_<unit>_cu_...` names of every internal-linkage
  entity and in the registration code) ends in the unit's first external non-template function; a
  unit that has none, such as every FA3 kernel unit (explicit template instantiations only), gets
  `<hash>_<pid>` there instead. `-frandom-seed=<seed>` replaces it; the seed is derived from the
  unit's path in the stage, so units differ from one another but not from build to build.
- The absolute path of the source: in nvcc's module id (a hash of the path, in symbol names), in the
  fatbinary's ident, in `__FILE__` (device and host asserts), and with `-lineinfo` in the cubin's
  `.debug_line` directory table and the embedded PTX's `.file` directives. cicc makes every path
  absolute against the working directory, so no prefix map reaches the device line tables; the cure
  is a fixed location. Sources are staged under one fixed root (`/tmp/kb-pinned-src`, or
  $KB_PINNED_STAGE, which then enters the key), content-addressed and never rewritten, and nvcc runs
  there; `-Xcompiler -ffile-prefix-map=<root>=.` makes the host side's strings relative as well.
- With `-lineinfo` ptxas records each source file's mtime and size in the line table. Staged kb files
  get the fixed mtime EPOCH; the pinned trees keep what `git archive` gives them (the commit time).
- nvlink writes its own command line into the device-linked image, `-L` folders included: the
  link-time libcuda.so.1 stand-in (FA3) is built in the stage too, not in the build folder.
- What else the bytes depend on is put in the key: nvcc's build, the host compiler's version and the
  toolkit's location (its headers' paths are in the device line tables).

`--build-id=sha1` is asked for explicitly: the note is then a hash of the content, whatever the
distribution's default. `SOURCE_DATE_EPOCH` pins `__DATE__`/`__TIME__` (no pinned unit uses them today).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

STAGE_ENV = "KB_PINNED_STAGE"
DEFAULT_STAGE = "/tmp/kb-pinned-src"
EPOCH = 315532800  # 1980-01-01T00:00:00Z, the zip epoch: mtime of every file kb stages
LINK_FLAGS = ("-Xlinker", "--build-id=sha1")
OBJECT_NAME = "kb.o"  # every unit is compiled to this name: nvcc's intermediates are named after it
SCHEME = 1  # bump when the recipe below changes what the bytes depend on


def stage_root() -> Path:
    """The fixed folder sources are compiled from: $KB_PINNED_STAGE, else /tmp/kb-pinned-src."""
    root = Path(os.environ.get(STAGE_ENV) or DEFAULT_STAGE)
    if not root.is_absolute():
        raise ValueError(f"${STAGE_ENV} must be an absolute path, not {root}")
    root.mkdir(parents=True, exist_ok=True)
    return root


def compile_flags(stage: Path) -> list[str]:
    """nvcc flags that keep temporary names and the stage's path out of host strings."""
    return ["-objtemp", "-Xcompiler", f"-ffile-prefix-map={stage}=."]


def random_seed(src: Path, stage: Path) -> str:
    """nvcc's -frandom-seed for a unit: from its path inside the stage (one per unit, the same every build)."""
    if not Path(src).is_relative_to(stage):
        raise ValueError(f"{src} is not in the stage {stage}: compiled from there, its bytes would name the folder")
    return "0x" + hashlib.sha256(str(Path(src).relative_to(stage)).encode()).hexdigest()[:8]


@cache
def toolkit_root(nvcc: str = "nvcc") -> str:
    """The CUDA toolkit nvcc runs from (its TOP, as `nvcc -dryrun` prints it), resolved."""
    res = subprocess.run([nvcc, "-dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"^#\$ TOP=(.+)$", res.stderr + res.stdout, re.M)
    return str(Path(m.group(1).strip()).resolve()) if m else "unknown"


@cache
def host_compiler() -> str:
    """First line of `gcc --version`: nvcc's default host compiler (it calls gcc and g++ from PATH)."""
    out = subprocess.run(["gcc", "--version"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    return out[0] if out else "unknown"


def environment(nvcc: str = "nvcc") -> dict[str, Any]:
    """What the library's bytes depend on besides sources and flags; part of every build key."""
    stage = stage_root()
    return {"scheme": SCHEME, "stage": str(stage), "compile_flags": compile_flags(stage),
            "random_seed": "-frandom-seed=0x<sha256 of the unit's path in the stage, 8 hex digits>",
            "link_flags": list(LINK_FLAGS),
            "epoch": EPOCH, "host_compiler": host_compiler(), "toolkit": toolkit_root(nvcc)}


def compile_env() -> dict[str, str]:
    """The environment nvcc runs in: SOURCE_DATE_EPOCH fixed."""
    return {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)}


def _digest(files: dict[str, bytes], run: list[str] | None) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    if run:
        h.update(b"\0run\0" + "\0".join(run).encode())
    return h.hexdigest()[:16]


def stage_files(kind: str, files: dict[str, bytes], run: list[str] | None = None) -> Path:
    """`files` (relative name -> bytes) under <stage>/<kind>-<digest>/, each with mtime EPOCH; returns the folder.

    Content-addressed and written once: a folder that exists holds exactly these bytes. It is filled
    in a private folder and renamed into place, so concurrent builds never see half of it. `run`, a
    command, is run inside the private folder before the rename (it is part of the digest; what it
    writes stays): how a link-time stand-in library gets a fixed path.
    """
    stage = stage_root()
    dest = stage / f"{kind}-{_digest(files, run)}"
    if dest.is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=stage, prefix=f".{kind}-"))
    for name, data in files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"staged name {name!r} leaves its folder")
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (EPOCH, EPOCH))
    if run:
        res = subprocess.run(run, cwd=tmp, capture_output=True, text=True, timeout=300, env=compile_env())
        if res.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"staging {kind}: {' '.join(run)} failed:\n{res.stderr[-2000:]}")
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the stage from other users of a shared /tmp
    try:
        os.rename(tmp, dest)
    except OSError:  # another build staged the same files first: theirs are the same bytes
        shutil.rmtree(tmp, ignore_errors=True)
        if not dest.is_dir():
            raise
    return dest


def compile_object(nvcc: str, args: list[str], src: Path, obj: Path, timeout: int = 3600) -> tuple[float, str]:
    """`nvcc args -c src` from the stage into `obj`, reproducibly; returns (seconds, compiler output).

    The object is compiled as `kb.o` in a private folder beside `obj` (with -objtemp nvcc's
    intermediates are named after the object and written there, so concurrent compiles do not meet)
    and renamed over `obj`.
    """
    stage = stage_root()
    seed = random_seed(src, stage)
    obj.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=obj.parent, prefix=".kbc-"))
    t0 = time.time()
    try:
        res = subprocess.run([nvcc, *args, *compile_flags(stage), f"-frandom-seed={seed}", "-c", str(src), "-o",
                              str(work / OBJECT_NAME)],
                             capture_output=True, text=True, timeout=timeout, cwd=stage, env=compile_env())
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed on {src.name}:\n{res.stderr[-3000:]}")
        os.replace(work / OBJECT_NAME, obj)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return time.time() - t0, res.stderr + res.stdout


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def elf_sections(path: Path) -> dict[str, str]:
    """Section name -> sha256 of its bytes, for an ELF64 little-endian file (objects and shared libraries).

    Used to say where two builds differ; SHT_NOBITS sections (.bss) have no bytes and hash as empty.
    """
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = heads[shstrndx][4]

    def name(off: int) -> str:
        end = data.index(b"\0", names_off + off)
        return data[names_off + off:end].decode(errors="replace")

    out: dict[str, str] = {}
    for i, (nm, typ, _flags, _addr, off, size, *_rest) in enumerate(heads):
        if i == 0:
            continue
        body = b"" if typ == 8 else data[off:off + size]  # 8: SHT_NOBITS
        key = name(nm)
        out[key if key not in out else f"{key}#{i}"] = hashlib.sha256(body).hexdigest()
    return out


def differing_sections(a: Path, b: Path) -> list[str]:
    """Names of the sections whose bytes differ between two ELF files (or that only one has)."""
    sa, sb = elf_sections(a), elf_sections(b)
    return sorted(n for n in set(sa) | set(sb) if sa.get(n) != sb.get(n))


def paths_found(path: Path, candidates: list[str]) -> list[str]:
    """Which of the given absolute paths occur, as bytes, in the file."""
    data = Path(path).read_bytes()
    return [c for c in candidates if c and c.encode() in data]
