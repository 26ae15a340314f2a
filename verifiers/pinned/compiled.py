"""The pinned code itself, compiled and run: host functions and compile-time constants.

Three verifiers read values that the pinned source computes, not values the
note or the KB typed:

- `code.host-exec` extracts a named function (and the functions it needs) from
  the cited file at its pinned SHA, compiles it with g++ beside a small
  harness, and runs it over a grid of inputs. It reports the value at the
  claim's point and, when the check states the claim's rule as an
  expression, every grid input where the rule and the pinned code disagree
  (the first one is kept as the finding).
- `code.py-exec` does the same for a pure-Python host function of a pinned
  `.py` file (FA4's tile-size and split heuristics), run in a fresh namespace.
- `code.constexpr` materialises the pinned tree (and the submodules it
  needs, e.g. cutlass at the commit the superproject records), includes the
  cited headers, and has nvcc's device pass evaluate constant expressions
  over the pinned templates (`Flash_fwd_kernel_traits<...>::kSmemSize`). The
  values are read back from the PTX initialisers, so `__CUDA_ARCH__`-dependent
  traits take their device-side branch.

The harness and the expressions are the KB's own; the function bodies and
templates come byte-for-byte from the pinned blobs and are never committed.
Claims data names functions, grids, values and expressions only: every piece
of C++ or Python that kb adds (stand-in types, helpers) is a snippet in
`verifiers/snippets/`, and every flag, path and expression passes the rules of
`verifiers/trust.py` at validation. Compilers, harnesses and pinned Python run
in the sandbox (`kb.verify.sandbox`): no network, read-only files, limits.
Builds are cached under `.kb/build/` by (generated source, flags, compiler),
so a re-run costs nothing; evidence records compiler, flags, SHA and the
hash of what was compiled.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import operator
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from kb.hw import find_tool
from kb.registry import Context, Outcome, Params, Requirements, verifier
from kb.verify import sandbox
from verifiers import trust
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

# Every snippet kb adds to pinned code is part of these verifiers' code hash.
HASH_FILES = [*trust.snippet_files(), "pyexec_child.py"]

Scalar = int | float | bool


# --------------------------------------------------------------------------- pinned text


def _git(gitdir: str, *args: str, binary: bool = False) -> Any:
    res = subprocess.run(["git", f"--git-dir={_gitdir(gitdir)}", *args], capture_output=True, timeout=300)
    if res.returncode != 0:
        raise FileNotFoundError(f"git {' '.join(args[:3])}: {res.stderr.decode(errors='replace').strip()[:300]}")
    return res.stdout if binary else res.stdout.decode("utf-8", errors="replace")


def _gitdir(path: str) -> str:
    p = Path(path)
    return str(p / ".git") if (p / ".git").exists() else str(p)


def _anchor(p: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    """The repository anchor the check cites, and the local clone holding it."""
    anchors = ctx.claim["anchors"]
    if not 0 <= p.anchor < len(anchors):
        raise ValueError(f"anchor {p.anchor} is out of range")
    a = anchors[p.anchor]
    if not a.get("sha") or not a.get("path"):
        raise ValueError(f"anchor {p.anchor} is not a repository anchor with a path")
    clone = ctx.clones.get(a["source"])
    if not clone:
        raise FileNotFoundError(f"no local clone of {a['source']}")
    return a, clone


def _cache_root(ctx: Context) -> Path:
    root = Path(os.environ.get("KB_BUILD_CACHE") or Path.cwd() / ".kb" / "build")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _tool_version(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    return (out[-1] if "nvcc" in tool else out[0]) if out else tool


# --------------------------------------------------------------------------- C++ extraction


def _strip_comments_keep_layout(src: str) -> str:
    """Blank out comments and string contents (same length), so brace matching ignores them."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in src[i:j]]
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def extract_function(src: str, name: str) -> str:
    """The full definition of function `name` (with its template header) as it stands in `src`.

    The definition is the occurrence of `name(` whose parameter list is followed
    by a body `{...}` (after optional qualifiers), not a call or a declaration.
    """
    clean = _strip_comments_keep_layout(src)
    for m in re.finditer(rf"(?<![\w:.>]){re.escape(name)}\s*\(", clean):
        depth, i = 0, m.end() - 1
        while i < len(clean):
            depth += {"(": 1, ")": -1}.get(clean[i], 0)
            i += 1
            if depth == 0:
                break
        tail = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>, ]+)?\s*\{", clean[i:])
        if not tail:
            continue
        # Start of the declaration: back to the end of the previous statement, block or directive.
        line_start = clean.rfind("\n", 0, m.start()) + 1
        start = line_start
        while start > 0:
            prev_end = start - 1
            prev_start = clean.rfind("\n", 0, prev_end) + 1
            prev = clean[prev_start:prev_end].strip()
            if not prev or prev.endswith((";", "}", "{")) or prev.startswith("#"):
                break
            start = prev_start
        j = i + tail.end() - 1
        depth = 0
        while j < len(clean):
            depth += {"{": 1, "}": -1}.get(clean[j], 0)
            j += 1
            if depth == 0:
                return src[start:j]
        raise ValueError(f"unbalanced braces after {name}")
    raise ValueError(f"no definition of {name}( found")


# --------------------------------------------------------------------------- rules as the claim states them

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
        ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
        ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "bool": bool, "round": round,
          "ceil_div": lambda a, b: -(-a // b), "ceil": lambda x: -int(-x // 1), "floor": lambda x: int(x // 1)}


def eval_rule(expr: str, env: dict[str, Scalar]) -> Scalar:
    """Evaluate a rule as a claim states it: arithmetic, comparisons, `a if c else b`, and/or, min/max/ceil_div."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float | bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"rule uses unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right in zip(node.ops, node.comparators, strict=True):
                r = ev(right)
                if not _OPS[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Tuple | ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ValueError(f"unsupported syntax in rule: {ast.dump(node)[:80]}")

    return ev(ast.parse(expr, mode="eval"))


# --------------------------------------------------------------------------- code.host-exec

DEFAULT_HOST_FLAGS = ["-O0", "-std=c++17"]


class HostExecParams(Params):
    """A function of the pinned file, called over a grid; the claim's point and (optionally) its rule."""

    anchor: int = 0
    functions: list[str] = Field(min_length=1)  # extracted in this order (helpers first)
    prelude: str = ""  # snippet (verifiers/snippets/host/NAME.h): the declarations the extracted code needs
    helpers: str = ""  # snippet placed after the pinned functions (kb's wrappers that call them)
    call: str  # C++ expression over the grid variables, e.g. "num_splits_heuristic(bh, sms, nblk, 128)"
    grid: dict[str, list[Scalar]] = Field(min_length=1)
    point: dict[str, Scalar] | None = None  # the input the claim's number is about -> measurement `value`
    rule: str | None = None  # the rule as the claim states it (Python expression over the grid variables)
    flags: list[str] = DEFAULT_HOST_FLAGS

    _functions = field_validator("functions")(lambda v: [trust.check_identifier(f) for f in v])
    _prelude = field_validator("prelude", "helpers")(lambda v: trust.check_snippet("host", v))
    _call = field_validator("call")(lambda v: trust.check_cpp_expr(v, "call"))
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _grid = field_validator("grid")(lambda v: {trust.check_identifier(k): x for k, x in v.items()})


def _ctype(values: list[Scalar]) -> str:
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "long long"
    return "double"


def _host_source(p: HostExecParams, bodies: list[str]) -> str:
    names = list(p.grid)
    decls = "\n".join(f"    {_ctype(p.grid[n])} {n};" for n in names)
    reads = "\n".join(f"        {{ double t; if (!(std::cin >> t)) return 0; {n} = ({_ctype(p.grid[n])})t; }}"
                      for n in names)
    return (
        "// Generated by kb (code.host-exec): harness is kb's own; the functions below are from the pinned file.\n"
        "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <iostream>\n#include <vector>\n"
        f"{trust.snippet('host', p.prelude)}\n\n" + "\n\n".join(bodies) + "\n\n"
        f"{trust.snippet('host', p.helpers)}\n\n"
        "int main() {\n" + decls + "\n    for (;;) {\n" + reads + "\n"
        f"        auto kb_result = ({p.call});\n"
        "        std::printf(\"%.17g\\n\", (double)kb_result);\n    }\n}\n"
    )


def _grid_points(grid: dict[str, list[Scalar]]) -> list[dict[str, Scalar]]:
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(grid[n] for n in names))]


def _number(x: float) -> Scalar:
    return int(x) if float(x).is_integer() else x


@verifier("code.host-exec", kind="pinned-code", params=HostExecParams,
          requires=Requirements(tools=("g++",), git_source=True), timeout_s=300)
def host_exec(p: HostExecParams, ctx: Context) -> Outcome:
    """Compile the pinned function with a harness, run it over the grid; `value` at the point, rule disagreements."""
    a, clone = _anchor(p, ctx)
    text = _git(clone, "show", f"{a['sha']}:{a['path']}")
    bodies = [extract_function(text, f) for f in p.functions]
    source = _host_source(p, bodies)
    gxx = find_tool("g++") or shutil.which("g++") or "g++"
    version = _tool_version(gxx)
    key = hashlib.sha256(json.dumps([source, p.flags, version]).encode()).hexdigest()[:20]
    exe = _cache_root(ctx) / "host" / key / "harness"
    cached = exe.exists()
    if not cached:
        # Lanes may build the same harness at once: each writes its own files, the rename is atomic.
        exe.parent.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"  # pids repeat across sandboxed workers
        src_file = exe.parent / f"harness.{tag}.cpp"
        src_file.write_text(source)
        res = sandbox.run([gxx, *p.flags, "-o", f"{exe}.{tag}", str(src_file)], work=exe.parent, timeout=240)
        if res.returncode != 0:
            raise RuntimeError(f"g++ failed: {res.stderr[-800:]}")
        os.replace(f"{exe}.{tag}", exe)
        os.replace(src_file, exe.parent / "harness.cpp")
    points = _grid_points(p.grid)
    n_grid = len(points)
    if p.point is not None and p.point not in points:
        points.append(dict(p.point))  # answered, but not part of the rule sweep
    stdin = "\n".join(" ".join(repr(float(pt[n])) for n in p.grid) for pt in points) + "\n"
    # The harness runs pinned code: in the sandbox, with a private work folder and a read-only build cache.
    run = sandbox.run([str(exe)], input=stdin, readable=[exe.parent], timeout=120,
                      limits=sandbox.Limits(cpu_s=120, address_space=4 * sandbox.GIB))
    if run.returncode != 0:
        raise RuntimeError(f"harness exited {run.returncode}: {run.stderr[-300:]}")
    outputs = [_number(float(x)) for x in run.stdout.split()]
    if len(outputs) != len(points):
        raise RuntimeError(f"harness answered {len(outputs)} of {len(points)} inputs")
    meas: dict[str, tuple[Any, str]] = {"grid_points": (len(points), "inputs")}
    if p.point is not None:
        meas["value"] = (outputs[points.index(p.point)], "")
    log = [f"{a['source']} {a['path']} @ {a['sha']}; functions {', '.join(p.functions)}",
           f"compiler: {version}; flags: {' '.join(p.flags)}; build {key}{' (cached)' if cached else ''}"]
    if p.rule is not None:
        bad = []
        for pt, got in zip(points[:n_grid], outputs[:n_grid], strict=True):
            stated = eval_rule(p.rule, pt)
            if _number(float(stated)) != got:
                bad.append({"input": pt, "pinned_code": got, "rule": _number(float(stated))})
        meas["disagreements"] = (len(bad), "inputs")
        if bad:
            meas["first_disagreement"] = (bad[0], "")
            log.append(f"first disagreement: {bad[0]}")
    return Outcome(measurements=meas, log="\n".join(log),
                   environment={"compiler": version, "flags": p.flags, "source_sha": a["sha"], "sandbox": sandbox.level(),
                                "compiled_sha256": hashlib.sha256(source.encode()).hexdigest()})


# --------------------------------------------------------------------------- code.constexpr

# Flags of the pinned setup.py files that change what the headers compute.
DEFAULT_CUDA_FLAGS = ["-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
                      "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                      "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]


class ConstexprParams(Params):
    """Constant expressions over the pinned templates, evaluated by nvcc's device pass."""

    anchor: int = 0
    include: list[str] = []  # repo-relative headers to #include (default: the anchor's file)
    dirs: list[str] = []  # repo-relative directories to materialise and put on -I (default: the anchor's folder)
    submodules: dict[str, list[str]] = {}  # gitlink path -> its folders to put on -I, e.g. {"csrc/cutlass": ["include"]}
    # Type aliases only ("using T = Flash_fwd_kernel_traits<128, 128, 64, 4>;"), or a snippet name
    # (verifiers/snippets/constexpr/NAME.cuh) for anything more.
    prelude: str = ""
    values: dict[str, str] = Field(min_length=1)  # measurement name -> C++ constant expression
    aten_shim: bool = False  # headers that include ATen names (FA1/FA2 launch and kernel headers): verifiers/pinned/aten_shim.py
    arch: str = "sm_80"
    flags: list[str] = DEFAULT_CUDA_FLAGS

    _paths = field_validator("include", "dirs")(lambda v: [trust.check_repo_path(x) for x in v])
    _subs = field_validator("submodules")(
        lambda v: {trust.check_repo_path(k): [trust.check_repo_path(x) for x in fs] for k, fs in v.items()})
    _prelude = field_validator("prelude")(lambda v: trust.check_aliases(v))
    _values = field_validator("values")(lambda v: {trust.check_identifier(k): trust.check_cpp_expr(x, "value")
                                                   for k, x in v.items()})
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))


def _check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise ValueError(f"{arch!r} is not an architecture like sm_80 or sm_90a")
    return arch


def _prelude_text(prelude: str) -> str:
    return trust.snippet("constexpr", prelude) if trust.is_snippet_name(prelude) else prelude


def _materialise(clone: str, sha: str, dirs: list[str], root: Path) -> Path:
    """Extract `dirs` of the tree at `sha` once into the build cache; returns the tree root."""
    key = hashlib.sha256(json.dumps([sha, sorted(dirs)]).encode()).hexdigest()[:16]
    dest = root / "trees" / key
    if (dest / ".complete").exists():
        return dest
    tmp = Path(tempfile.mkdtemp(dir=root))
    for d in dirs:
        trust.check_repo_path(d)  # validated already; checked again where it reaches git
    data = _git(clone, "archive", "--format=tar", sha, "--", *dirs, binary=True)
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / ".complete").write_text(f"{sha} {' '.join(dirs)}\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, dest)
    except OSError:  # another lane finished the same tree first: use that one
        shutil.rmtree(tmp, ignore_errors=True)
        if not (dest / ".complete").exists():
            raise
    return dest


def gitlink(clone: str, sha: str, path: str) -> str:
    """The commit a superproject at `sha` records for its submodule at `path`."""
    out = _git(clone, "ls-tree", sha, "--", trust.check_repo_path(path)).split()
    if len(out) < 3 or out[1] != "commit":
        raise FileNotFoundError(f"{path} is not a submodule at {sha[:12]}")
    return out[2]


# `= value` when non-zero; a zero-initialised global is declared without an initialiser.
_PTX_INIT = re.compile(r"^\.global \.align \d+ \.[us]64 (kb_value_\d+)(?: = (-?\d+))?;", re.M)


@verifier("code.constexpr", kind="pinned-code", params=ConstexprParams,
          requires=Requirements(tools=("nvcc",), git_source=True), timeout_s=900)
def constexpr_values(p: ConstexprParams, ctx: Context) -> Outcome:
    """Compile-time constants of the pinned templates as nvcc's device pass computes them."""
    a, clone = _anchor(p, ctx)
    root = _cache_root(ctx)
    dirs = p.dirs or [str(Path(a["path"]).parent)]
    tree = _materialise(clone, a["sha"], dirs, root)
    incs = [f"-I{tree / d}" for d in dirs]
    subs_used = {}
    for sub, folders in p.submodules.items():
        commit = gitlink(clone, a["sha"], sub)
        sub_clone = ctx.clones.get(Path(sub).name)
        if not sub_clone:
            return Outcome(verdict="skipped", reason=f"needs a local clone of {Path(sub).name} (submodule {sub} @ {commit})")
        sub_tree = _materialise(sub_clone, commit, folders, root)
        incs += [f"-I{sub_tree / f}" for f in folders]
        subs_used[sub] = commit
    if p.aten_shim:
        from verifiers.pinned import aten_shim

        incs.insert(0, f"-I{aten_shim.write(root)}")
        subs_used["aten_shim"] = aten_shim.digest()
    include = p.include or [a["path"]]
    names = list(p.values)
    # <cstdint> first: in the real builds torch's headers have brought it in before the pinned ones.
    source = ("// Generated by kb (code.constexpr): the expressions are kb's own; the headers are the pinned ones.\n"
              + ("#include <cstdint>\n" if p.aten_shim else "")
              + "".join(f'#include "{h}"\n' for h in include)
              + f"{_prelude_text(p.prelude)}\n"
              + "".join(f"__device__ long long kb_value_{i} = (long long)({p.values[n]});\n" for i, n in enumerate(names)))
    nvcc = find_tool("nvcc") or "nvcc"
    version = _tool_version(nvcc)
    arch = p.arch.removeprefix("sm_")
    flags = [f"-arch=sm_{arch}", *p.flags]
    key = hashlib.sha256(json.dumps([source, flags, version, a["sha"], subs_used, dirs]).encode()).hexdigest()[:20]
    out = root / "constexpr" / key
    ptx = out / "values.ptx"
    cached = ptx.exists()
    if not cached:
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"  # pids repeat across sandboxed workers
        src_file = out / f"values.{tag}.cu"
        src_file.write_text(source)
        res = sandbox.run([nvcc, *flags, *incs, "-I" + str(tree), "-ptx", "-o", f"{ptx}.{tag}", str(src_file)],
                          work=out, readable=[root], timeout=840, limits=sandbox.Limits(cpu_s=900))
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed: {res.stderr[-1200:]}")
        os.replace(f"{ptx}.{tag}", ptx)
        os.replace(src_file, out / "values.cu")
    found = {name: value or "0" for name, value in _PTX_INIT.findall(ptx.read_text())}
    meas: dict[str, tuple[Any, str]] = {}
    for i, n in enumerate(names):
        if f"kb_value_{i}" not in found:
            raise RuntimeError(f"{n}: no constant initialiser in the PTX (not a constant expression?)")
        meas[n] = (int(found[f"kb_value_{i}"]), "")
    log = (f"{a['source']} @ {a['sha']}; include {', '.join(include)}; submodules {subs_used or 'none'}\n"
           f"compiler: {version}; flags: {' '.join(flags)}; build {key}{' (cached)' if cached else ''}\n"
           + "\n".join(f"{n} = {p.values[n]} -> {meas[n][0]}" for n in names))
    return Outcome(measurements=meas, log=log,
                   environment={"compiler": version, "flags": flags, "source_sha": a["sha"], "submodules": subs_used,
                                "sandbox": sandbox.level(), "compiled_sha256": hashlib.sha256(source.encode()).hexdigest()})


# --------------------------------------------------------------------------- code.py-exec


def _normal(v: Any) -> Any:
    """Comparable form: tuples as lists, integral floats as ints."""
    if isinstance(v, list | tuple):
        return [_normal(x) for x in v]
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return _number(float(v))
    import dataclasses

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [_normal(getattr(v, f.name)) for f in dataclasses.fields(v)]
    raise TypeError(f"unsupported result type {type(v).__name__}")


def extract_py_function(src: str, name: str) -> str:
    """The source of `def name` or `class name` in a Python file, decorators included."""
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            body = lines[start:node.end_lineno]
            indent = len(body[0]) - len(body[0].lstrip())
            return "".join(ln[indent:] if ln.strip() else ln for ln in body)
    raise ValueError(f"no definition of {name} found")


class PyExecParams(Params):
    """Pure-Python functions of the pinned file, called over a grid."""

    anchor: int = 0
    functions: list[str] = Field(min_length=1)  # functions or classes (a dataclass result compares as its field list)
    prelude: str = ""  # snippet (verifiers/snippets/py/NAME.py): our own imports and stand-ins
    helpers: str = ""  # snippet placed after the pinned functions (kb's wrappers that call them)
    call: str  # Python expression over the grid names, e.g. "_tile_size_fwd_sm90(d, d, causal, False)"
    grid: dict[str, list[Scalar | None]] = Field(min_length=1)
    point: dict[str, Scalar | None] | None = None
    rule: str | None = None

    _functions = field_validator("functions")(lambda v: [trust.check_identifier(f) for f in v])
    _prelude = field_validator("prelude", "helpers")(lambda v: trust.check_snippet("py", v))
    _call = field_validator("call")(lambda v: trust.check_py_expr(v))
    _grid = field_validator("grid")(lambda v: {trust.check_identifier(k): x for k, x in v.items()})


@verifier("code.py-exec", kind="pinned-code", params=PyExecParams, requires=Requirements(git_source=True), timeout_s=120)
def py_exec(p: PyExecParams, ctx: Context) -> Outcome:
    """Run pinned pure-Python host functions over the grid; `value` at the point, rule disagreements."""
    import sys

    a, clone = _anchor(p, ctx)
    text = _git(clone, "show", f"{a['sha']}:{a['path']}")
    code = (trust.snippet("py", p.prelude) + "\n\n" + "\n\n".join(extract_py_function(text, f) for f in p.functions)
            + "\n\n" + trust.snippet("py", p.helpers))
    points = _grid_points(p.grid)  # type: ignore[arg-type]
    n_grid = len(points)
    if p.point is not None and p.point not in points:
        points.append(dict(p.point))
    # The pinned code runs in a fresh interpreter in the sandbox (isolated mode: no site-packages, no
    # user paths), never in this worker: it answers one JSON list of results.
    child = Path(__file__).with_name("pyexec_child.py")
    task = json.dumps({"code": code, "filename": f"{a['path']}@{a['sha'][:12]}", "call": p.call, "points": points})
    res = sandbox.run([sys.executable, "-I", "-S", str(child)], input=task, readable=[child.parent], timeout=100,
                      limits=sandbox.Limits(cpu_s=100, address_space=4 * sandbox.GIB))
    if res.returncode != 0:
        raise RuntimeError(f"pinned Python failed (exit {res.returncode}): {res.stderr[-800:]}")
    outputs = [_normal(v) for v in json.loads(res.stdout.strip().splitlines()[-1])]
    if len(outputs) != len(points):
        raise RuntimeError(f"pinned Python answered {len(outputs)} of {len(points)} inputs")
    meas: dict[str, tuple[Any, str]] = {"grid_points": (len(points), "inputs")}
    if p.point is not None:
        meas["value"] = (outputs[points.index(p.point)], "")
    log = [f"{a['source']} {a['path']} @ {a['sha']}; functions {', '.join(p.functions)}; python {sys.version.split()[0]}"]
    if p.rule is not None:
        bad = []
        for pt, got in zip(points[:n_grid], outputs[:n_grid], strict=True):
            stated = _normal(eval_rule(p.rule, pt))  # type: ignore[arg-type]
            if stated != got:
                bad.append({"input": pt, "pinned_code": got, "rule": stated})
        meas["disagreements"] = (len(bad), "inputs")
        if bad:
            meas["first_disagreement"] = (bad[0], "")
            log.append(f"first disagreement: {bad[0]}")
    return Outcome(measurements=meas, log="\n".join(log),
                   environment={"python": sys.version.split()[0], "source_sha": a["sha"], "sandbox": sandbox.level(),
                                "compiled_sha256": hashlib.sha256(code.encode()).hexdigest()})


# --------------------------------------------------------------------------- code.resources


class ResourcesParams(Params):
    """A pinned kernel translation unit, compiled for one architecture; what ptxas reports for its kernels."""

    anchor: int = 0  # a repository anchor whose `path` is the .cu unit
    dirs: list[str] = []  # folders to materialise and put on -I (default: the unit's folder)
    submodules: dict[str, list[str]] = {}
    aten_shim: bool = False  # FA1/FA2 units include a few ATen names (verifiers/pinned/aten_shim.py)
    arch: str = "sm_80"
    flags: list[str] = [*DEFAULT_CUDA_FLAGS, "-O3"]

    _paths = field_validator("dirs")(lambda v: [trust.check_repo_path(x) for x in v])
    _subs = field_validator("submodules")(
        lambda v: {trust.check_repo_path(k): [trust.check_repo_path(x) for x in fs] for k, fs in v.items()})
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))
    kernel_filter: str = ""  # regex over the demangled kernel name; all kernels when empty
    # Occupancy by the documented rules, for a launch the claim names (block threads and dynamic smem bytes).
    block_threads: int | None = None
    dynamic_smem: int | None = None
    sku: str | None = None  # hardware source id whose constants apply, e.g. A100


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas(log: str) -> list[dict[str, Any]]:
    """One record per kernel entry in `-Xptxas -v` output: name, registers, static smem, stack, spills."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            cur = {"mangled": m.group(1), "registers": None, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            out.append(cur)
        elif cur is not None and (m := _PROPS.search(line)):
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = (int(x) for x in m.groups())
        elif cur is not None and (m := _USED.search(line)):
            cur["registers"] = int(m.group(1))
            cur["smem"] = int(m.group(2) or 0)
    return out


def occupancy(regs: int, threads: int, smem_block: int, hw: dict[str, float]) -> tuple[int, str]:
    """Resident CTAs per SM and the limiting resource, by the CUDA occupancy rules."""
    warps = -(-threads // 32)
    unit = int(hw.get("reg_alloc_unit_per_warp", 256))
    regs_per_warp = -(-(regs * 32) // unit) * unit
    limits = {
        "registers": (int(hw["regs_per_sm"]) // regs_per_warp) // warps if regs_per_warp else 10**9,
        "shared memory": int(hw["smem_per_sm_bytes"]) // (smem_block + int(hw.get("smem_reserved_per_block_bytes", 0))),
        "warps": int(hw["max_warps_per_sm"]) // warps,
        "blocks": int(hw["max_blocks_per_sm"]),
    }
    if smem_block > hw.get("smem_per_block_max_bytes", float("inf")):
        return 0, "shared memory (exceeds the per-block maximum)"
    limiter = min(limits, key=lambda k: limits[k])
    return limits[limiter], limiter


class UnitBuild:
    """What compile_unit returns: the kernels ptxas reported (demangled names added) and how it was built."""

    def __init__(self, kernels: list[dict[str, Any]], env: dict[str, Any], log: list[str]) -> None:
        self.kernels, self.env, self.log = kernels, env, log

    def chosen(self, kernel_filter: str) -> list[dict[str, Any]]:
        """The kernels whose demangled name matches `kernel_filter` (a regex); an error when none does."""
        out = [k for k in self.kernels if re.search(kernel_filter, k.get("name", k["mangled"]))]
        if not out:
            raise RuntimeError(f"no kernel matches {kernel_filter!r} among {len(self.kernels)}")
        return out


def compile_unit(p: Any, ctx: Context, a: dict[str, Any], clone: str, cache: str, unit: str | None = None,
                 text: str | None = None) -> UnitBuild | Outcome:
    """Compile one translation unit for `p.arch` with the pinned include folders and read ptxas' report.

    The unit is the pinned file `unit` of the anchor's tree (code.resources), or kb's own source `text`
    compiled beside it (code.instance-resources). `p` carries dirs, submodules, aten_shim, arch and flags.
    Results are cached under .kb/build/<cache>/<key> by every input; a missing submodule clone is a skipped
    Outcome.
    """
    from verifiers.pinned import aten_shim

    root = _cache_root(ctx)
    src_dir = str(Path(a["path"]).parent)
    dirs = p.dirs or [src_dir]
    tree = _materialise(clone, a["sha"], sorted({*dirs, src_dir}), root)
    incs = [f"-I{tree / d}" for d in dirs]
    subs_used = {}
    for sub, folders in p.submodules.items():
        commit = gitlink(clone, a["sha"], sub)
        sub_clone = ctx.clones.get(Path(sub).name)
        if not sub_clone:
            return Outcome(verdict="skipped", reason=f"needs a local clone of {Path(sub).name} (submodule {sub} @ {commit})")
        incs += [f"-I{_materialise(sub_clone, commit, folders, root) / f}" for f in folders]
        subs_used[sub] = commit
    if p.aten_shim:
        incs.insert(0, f"-I{aten_shim.write(root)}")
    nvcc = find_tool("nvcc") or "nvcc"
    version = _tool_version(nvcc)
    flags = [f"-arch=sm_{p.arch.removeprefix('sm_')}", *p.flags, "-Xptxas", "-v"]
    # The key of a pinned unit is what it was before kb's own units existed, so cached builds stay valid.
    parts = [a["sha"], unit or a["path"], flags, version, subs_used, dirs, aten_shim.digest() if p.aten_shim else None]
    if text is not None:
        parts.insert(2, text)
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]
    out = root / cache / key
    log_file = out / "ptxas.log"
    cached = log_file.exists()
    start = time.perf_counter()
    if not cached:
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"  # pids repeat across sandboxed workers
        # nvcc names its temporaries tmpxft_<pid>_...: every sandboxed worker is pid 2, so two workers compiling
        # the same unit must not share a working folder.
        work = out / f".work-{tag}"
        work.mkdir()
        try:
            if text is not None:
                (work / "instance.cu").write_text(text)
            source = work / "instance.cu" if text is not None else tree / (unit or a["path"])
            res = sandbox.run([nvcc, *flags, *incs, "-cubin", "-o", str(work / "unit.cubin"), str(source)],
                              work=work, readable=[root], timeout=1700, limits=sandbox.Limits(cpu_s=1800))
            if res.returncode != 0:
                raise RuntimeError(f"nvcc failed: {res.stderr[-1500:]}")
            os.replace(work / "unit.cubin", out / "unit.cubin")
            if text is not None:
                (out / "instance.cu").write_text(text)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        (out / f"ptxas.{tag}.log").write_text(res.stderr)
        os.replace(out / f"ptxas.{tag}.log", log_file)
    seconds = time.perf_counter() - start
    kernels = parse_ptxas(log_file.read_text())
    names = subprocess.run(["c++filt"], input="\n".join(k["mangled"] for k in kernels), capture_output=True,
                           text=True, timeout=60).stdout.splitlines()
    for k, n in zip(kernels, names, strict=False):
        k["name"] = n
    log = [f"compiler: {version}; flags: {' '.join(flags)}; build {key}"
           + (" (cached)" if cached else f" (compiled in {seconds:.0f} s)"),
           f"ATen names supplied by kb's shim {aten_shim.digest()}" if p.aten_shim else "no shim"]
    env = {"compiler": version, "flags": flags, "source_sha": a["sha"], "submodules": subs_used,
           "aten_shim": aten_shim.digest() if p.aten_shim else None, "sandbox": sandbox.level(),
           "compile_seconds": round(seconds, 1), "cached": cached}
    return UnitBuild(kernels, env, log)


def resource_measurements(chosen: list[dict[str, Any]]) -> dict[str, tuple[Any, str]]:
    """registers (max and min), spills, stack and static smem over the matched kernels."""
    return {
        "kernels": (len(chosen), "entries"),
        "registers": (max(k["registers"] for k in chosen), "per thread (max over matched kernels)"),
        "registers_min": (min(k["registers"] for k in chosen), "per thread"),
        "spill_stores": (max(k["spill_stores"] for k in chosen), "bytes"),
        "spill_loads": (max(k["spill_loads"] for k in chosen), "bytes"),
        "stack_bytes": (max(k["stack"] for k in chosen), "bytes"),
        "static_smem": (max(k["smem"] for k in chosen), "bytes"),
    }


def kernel_lines(chosen: list[dict[str, Any]]) -> list[str]:
    """One log line per matched kernel (the first 20)."""
    return [f"{k['registers']:4d} regs {k['spill_stores']:6d} B spill-st {k['spill_loads']:6d} B spill-ld "
            f"{k['smem']:6d} B smem  {k.get('name', k['mangled'])[:160]}" for k in chosen[:20]]


@verifier("code.resources", kind="pinned-code", params=ResourcesParams,
          requires=Requirements(tools=("nvcc",), git_source=True), timeout_s=1800)
def kernel_resources(p: ResourcesParams, ctx: Context) -> Outcome:
    """Compile the pinned kernel unit; registers, spills, stack and static smem per kernel; optional occupancy."""
    a, clone = _anchor(p, ctx)
    build = compile_unit(p, ctx, a, clone, "resources")
    if isinstance(build, Outcome):
        return build
    chosen = build.chosen(p.kernel_filter)
    meas = resource_measurements(chosen)
    if p.block_threads is not None and p.sku:
        hw = ctx.hardware.get(p.sku)
        if hw is None:
            raise ValueError(f"no hardware source {p.sku!r}")
        smem = (p.dynamic_smem or 0) + meas["static_smem"][0]
        ctas, limiter = occupancy(meas["registers"][0], p.block_threads, smem, hw)
        meas["ctas_per_sm"] = (ctas, f"on {p.sku}")
        meas["occupancy_limiter"] = (limiter, "")
    log = [f"{a['source']} {a['path']} @ {a['sha']}; {len(build.kernels)} kernels, {len(chosen)} matched {p.kernel_filter!r}",
           *build.log, *kernel_lines(chosen)]
    return Outcome(measurements=meas, log="\n".join(log), environment=build.env)
