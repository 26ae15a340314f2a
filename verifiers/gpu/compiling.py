"""How GPU verifiers put an attention call under torch.compile: opaque calls and repeated compiled backwards.

Torch is imported inside the functions only (the registry scan imports the verifier modules without torch).
"""

from __future__ import annotations

from typing import Any


def graph_break(call: Any) -> Any:
    """`call` as torch.compile sees an opaque C-extension call: a graph break, run eagerly outside the graph.

    Not `torch.compile(torch.compiler.disable(call))`: torch.compile unwraps a disabled function to the
    original one and traces it (so dynamo traced into kb's ctypes call and failed on its stream handle). The
    disabled function is called from a plain wrapper instead, which dynamo compiles and breaks the graph at.
    """
    import torch

    opaque = torch.compiler.disable(call)

    def wrapper(*args: Any) -> Any:
        return opaque(*args)
    return wrapper


def no_donated_buffers() -> Any:
    """A context with AOTAutograd's donated buffers off, for a compiled graph whose backward is run repeatedly.

    A backward timed in a loop keeps its graph (retain_graph=True); a compiled backward whose saved tensors
    are donated refuses that ("compiled with non-empty donated buffers", torch 2.11 on compiled
    flex_attention). The flag is read when the forward is compiled and again at each backward, so the whole
    cell (compile, warm-up, timed calls) runs inside this context; entering it costs ~0.1 ms of CPU, so it is
    entered once per cell, never per timed call.
    """
    import torch._functorch.config as functorch_config

    return functorch_config.patch(donated_buffer=False)
