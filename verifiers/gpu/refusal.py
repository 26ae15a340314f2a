"""gpu.backend-runs: whether one attention backend runs a shape at all, and if not, what it raises.

A refusal is a result, not a harness error: SDPA restricted to one backend raises
("No available kernel") when that backend cannot take the inputs or the mode, for
example cuDNN attention under PyTorch's deterministic-algorithms switch. The
bitwise-repeat verifier reports such a raise as an error (not evidence), so a claim
about whether a backend runs needs this check. The forward and the backward are
tried separately, each once, with the deterministic switch as the params say and
reset afterwards.
"""

from __future__ import annotations

from typing import Any

from kb.registry import Context, Outcome, Requirements, verifier
from verifiers.gpu.params import AttnParams


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


@verifier("gpu.backend-runs", kind="gpu-kernel-run", params=AttnParams,
          requires=Requirements(cuda=True, min_cc=80), timeout_s=240)
def backend_runs(p: AttnParams, ctx: Context) -> Outcome:
    """Run the forward, then forward plus backward, of `impl` once; record which ran and what raised."""
    import torch

    from verifiers.gpu import common as g

    meas: dict[str, tuple[Any, str]] = {}
    log = []
    try:
        g.set_deterministic(p)
        x = g.make_inputs(p)
        for what, call in (("forward", lambda: g.forward(p, x)), ("backward", lambda: g.forward_backward(p, x))):
            try:
                call()
                torch.cuda.synchronize()
                meas[f"runs_{what}"] = (True, f"the {what} ran")
                log.append(f"{what}: ran")
            except RuntimeError as exc:  # the backend's own refusal (SDPA: no available kernel)
                meas[f"runs_{what}"] = (False, f"the {what} raised")
                meas[f"error_{what}"] = (_first_line(exc), "what it raised")
                log.append(f"{what}: {_first_line(exc)}")
    finally:
        torch.use_deterministic_algorithms(False)
    return Outcome(measurements=meas, log="\n".join(log), environment={})
