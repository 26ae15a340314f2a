"""One pinned configuration built by two CUDA toolkits, run on the same inputs and compared bit for bit.

`gpu.toolkit-bits` decides statements that the source alone does not fix the bits: that another compiler
can give other results from the same pinned commit. The pinned build recipe (verifiers/pinned/build.py)
is run twice, by two toolkits, into two build roots: the baseline is the usual one ($KB_BUILD_CACHE, else
.kb/build) and the second is named by the machine, not by claims data, in $KB_ALT_BUILD_CACHE (made with
`PATH=<toolkit>/bin:$PATH KB_BUILD_CACHE=<root> python -m verifiers.pinned.build --rev R`, every default
unit: FA1's and FA3's harnesses link them all). Each build runs in its own child process (ctypes cannot
load two builds of one pin side by side), twice on inputs from the check's seed, and hands back its outputs
and its manifest.

Measured: whether the two builds' compilers differ (a check with the same compiler on both sides is
inconclusive, not evidence), whether each build repeats itself bitwise (if one does not, a difference
between builds could be run-to-run noise: inconclusive), how many outputs differ between the builds, the
largest absolute difference per output, and whether the kernels' SASS differs (cuobjdump of both libraries,
addresses and encodings dropped). Two builds that agree bitwise on one input do not show that the compiler
cannot change the bits: that outcome is reported inconclusive, never as a refutation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import PINNED_IMPLS, AttnParams

GPU = Requirements(cuda=True, min_cc=90)
ALT_ENV = "KB_ALT_BUILD_CACHE"

# Runs in a child whose KB_BUILD_CACHE selects the build: two repeats of the pass, outputs saved to argv[3].
_CHILD = """
import json, sys, torch
from verifiers.gpu import common as g
from verifiers.gpu.params import AttnParams
from verifiers.pinned import build
p = AttnParams.model_validate(json.loads(sys.argv[1]))
phase = sys.argv[2]
g.set_deterministic(p)
runs = []
for _ in range(2):
    x = g.make_inputs(p, requires_grad=phase == "backward")
    if phase == "forward":
        with torch.no_grad():
            o, lse = g.forward(p, x)
        runs.append({"o": o.detach().cpu(), **({"lse": lse.detach().cpu()} if lse is not None else {})})
    else:
        r = g.forward_backward(p, x)
        runs.append({k: r[k].detach().cpu() for k in ("o", "dq", "dk", "dv")})
    torch.cuda.synchronize()
torch.save(runs, sys.argv[3])
loaded = build.load(p.impl)
m = loaded.manifest
print(json.dumps({"compiler": m["compiler"], "key": m["key"], "library_sha256": m["library_sha256"],
                  "library": str(loaded.path / "libkb.so")}))
"""


class ToolkitParams(AttnParams):
    """The pinned pass to run with both builds."""

    phase: Literal["forward", "backward"] = "forward"


def _run_child(p: ToolkitParams, cache: str | None, out: Path) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8")}
    env.pop(ALT_ENV, None)
    if cache is not None:
        env["KB_BUILD_CACHE"] = cache
    res = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(p.model_dump(include=set(AttnParams.model_fields))),
                          p.phase, str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=root)
    if res.returncode != 0:
        raise RuntimeError(f"the {cache or 'baseline'} build's run failed: {(res.stderr or res.stdout)[-800:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/|/\* 0x[0-9a-f]+ \*/")


def normalised_sass(listing: str) -> dict[str, str]:
    """cuobjdump -sass output as {function: instruction text}, with addresses and encodings dropped."""
    funcs: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for line in listing.splitlines():
        m = re.match(r"^\s+Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is not None:
            text = _ADDR.sub("", line).strip()
            if text and not text.startswith(".") and text not in ("{", "}"):
                cur.append(re.sub(r"\s+", " ", text))
    return {k: "\n".join(v) for k, v in funcs.items()}


def sass_comparison(lib_a: str, lib_b: str) -> dict[str, Any]:
    """Kernels whose normalised SASS differs between two libraries (None where cuobjdump is missing)."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return {"available": False}
    a, b = (normalised_sass(subprocess.run([tool, "-sass", lib], capture_output=True, text=True,
                                            timeout=600).stdout) for lib in (lib_a, lib_b))
    shared = sorted(set(a) & set(b))
    differ = [k for k in shared if a[k] != b[k]]
    return {"available": True, "kernels_compared": len(shared), "kernels_differ": len(differ),
            "first_differing": differ[:3]}


@verifier("gpu.toolkit-bits", kind="gpu-bitwise-repeat", params=ToolkitParams, requires=GPU, timeout_s=1500,
          own_verdict=True)
def toolkit_bits(p: ToolkitParams, ctx: Context) -> Outcome:
    """The same pinned pass from builds by two toolkits: do the bits differ, and does each build repeat itself?"""
    import torch

    if p.impl not in PINNED_IMPLS:
        raise ValueError(f"gpu.toolkit-bits compares two builds of a pin; {p.impl!r} is not one of {sorted(PINNED_IMPLS)}")
    alt = os.environ.get(ALT_ENV)
    if not alt:
        return Outcome(verdict="skipped", reason=f"no second-toolkit build on this machine (${ALT_ENV} is not set)")
    with tempfile.TemporaryDirectory() as tmp:
        base_info = _run_child(p, os.environ.get("KB_BUILD_CACHE"), Path(tmp) / "base.pt")
        alt_info = _run_child(p, alt, Path(tmp) / "alt.pt")
        base = torch.load(Path(tmp) / "base.pt")
        other = torch.load(Path(tmp) / "alt.pt")
    names = list(base[0])

    def same(x: Any, y: Any) -> bool:
        return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.uint8), y.view(torch.uint8))

    repeats = all(same(r[0][n], r[1][n]) for r in (base, other) for n in names)
    differ = [n for n in names if not same(base[0][n], other[0][n])]
    diffs = {n: float((base[0][n].double() - other[0][n].double()).abs().max()) for n in names}
    sass = sass_comparison(base_info["library"], alt_info["library"])
    toolkits_differ = base_info["compiler"] != alt_info["compiler"]
    meas: dict[str, tuple[Any, str]] = {
        "toolkits_differ": (int(toolkits_differ), "1 when the two builds' compilers differ"),
        "repeats_agree": (int(repeats), "1 when each build gives the same bits twice"),
        "outputs": (len(names), "outputs compared"),
        "outputs_differ": (len(differ), "outputs whose bits differ between the builds"),
        **{f"max_abs_diff_{n}": (diffs[n], "largest |baseline - other|") for n in names},
    }
    if sass.get("available"):
        meas["kernels_sass_differ"] = (sass["kernels_differ"], f"of {sass['kernels_compared']} kernels in both")
    env = {"baseline_build": {k: base_info[k] for k in ("compiler", "key", "library_sha256")},
           "other_build": {k: alt_info[k] for k in ("compiler", "key", "library_sha256")}}
    log = json.dumps({"differ": differ, "max_abs_diff": diffs, "sass": sass, **env}, indent=1)
    if not toolkits_differ:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason="both builds come from the same compiler: nothing about another toolkit is shown")
    if not repeats:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason="a build does not repeat its own bits, so a difference between builds is not the compiler's")
    if not differ and "outputs_differ" in ctx.expect:
        return Outcome(verdict="inconclusive", measurements=meas, log=log, environment=env,
                       reason=(f"{alt_info['compiler']} and {base_info['compiler']} give the same bits on this input; "
                               "one agreeing pair does not show that no toolkit changes them"))
    return Outcome(measurements=meas, log=log, environment=env)
