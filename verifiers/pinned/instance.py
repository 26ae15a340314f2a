"""A pinned kernel template instantiated with traits the KB types, compiled for one architecture: code.instance-resources.

code.resources compiles a pinned translation unit unchanged, so it can only report the instances the pin
itself makes. Some claims are about an instance the pin does not make: "B_c = 256 at d = 128 would cost
registers", say. This verifier writes a one-line translation unit of kb's own that includes the pinned
launch header and explicitly instantiates one pinned launch template (named from ENTRIES, never code from
claims data) for a type alias the claim gives (`using T = FMHA_kernel_traits<256, 128, ...>;`, checked by
verifiers/trust.py as for code.constexpr), compiles it with the pinned include folders, cutlass at the
submodule commit and kb's ATen stand-ins, and reads ptxas' report per kernel, as code.resources does. The
evidence says the instance is kb's (grade note kb-instance), not one the pin compiles.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import field_validator

from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers import trust
from verifiers.pinned.compiled import (
    DEFAULT_CUDA_FLAGS,
    _anchor,
    _check_arch,
    compile_unit,
    kernel_lines,
    resource_measurements,
)
from verifiers.trust import executable_pins  # noqa: F401 - read by kb's validation: what these verifiers may execute

# name -> the explicit instantiation kb writes after the pinned header (T is the claim's alias).
ENTRIES = {
    # FA1 v1.0.9 fmha_fwd_launch_template.h: the forward launcher, which instantiates fmha_fwd_loop_kernel
    # for every (dropout, causal, return-softmax) combination, as the pinned fmha_fwd_hdim*.cu units do.
    "fa1-fwd-loop": "template void run_fmha_fwd_loop<T>(Launch_params<FMHA_fprop_params> &);",
}


class InstanceParams(Params):
    """The pinned header (anchor), the instance (type alias and entry), and how to compile it."""

    anchor: int = 0  # a repository anchor whose `path` is the pinned header defining the entry
    entry: Literal[tuple(ENTRIES)]  # type: ignore[valid-type]
    prelude: str  # type aliases only: `using T = Traits<...>;`
    dirs: list[str] = []
    submodules: dict[str, list[str]] = {}
    aten_shim: bool = False
    arch: str = "sm_80"
    flags: list[str] = [*DEFAULT_CUDA_FLAGS, "-O3"]
    kernel_filter: str = ""

    _prelude = field_validator("prelude")(lambda v: _aliases_only(v))
    _paths = field_validator("dirs")(lambda v: [trust.check_repo_path(x) for x in v])
    _subs = field_validator("submodules")(
        lambda v: {trust.check_repo_path(k): [trust.check_repo_path(x) for x in fs] for k, fs in v.items()})
    _flags = field_validator("flags")(lambda v: trust.check_flags(v))
    _arch = field_validator("arch")(lambda v: _check_arch(v))


def _aliases_only(prelude: str) -> str:
    if not prelude.strip() or trust.is_snippet_name(prelude):
        raise ValueError("prelude: give the instance as a type alias (`using T = Traits<...>;`)")
    return trust.check_aliases(prelude)


def unit_text(header: str, prelude: str, entry: str) -> str:
    """kb's translation unit: the pinned header, the alias, one explicit instantiation."""
    return f'#include "{Path(header).name}"\n\n{prelude.strip()}\n\n{ENTRIES[entry]}\n'


@verifier("code.instance-resources", kind="pinned-code", params=InstanceParams,
          requires=Requirements(tools=("nvcc",), git_source=True), timeout_s=1800)
def instance_resources(p: InstanceParams, ctx: Context) -> Outcome:
    """Compile kb's instance of a pinned launch template; registers, spills, stack and static smem per kernel."""
    a, clone = _anchor(p, ctx)
    text = unit_text(a["path"], p.prelude, p.entry)
    build = compile_unit(p, ctx, a, clone, "instances", text=text)
    if isinstance(build, Outcome):
        return build
    chosen = build.chosen(p.kernel_filter)
    log = [f"kb's instance of {a['path']} @ {a['sha']} ({p.entry}): {p.prelude.strip()}", *build.log, *kernel_lines(chosen)]
    return Outcome(measurements=resource_measurements(chosen), log="\n".join(log),
                   environment={**build.env, "instance": p.prelude.strip(), "entry": p.entry, "kb_instance": True})
