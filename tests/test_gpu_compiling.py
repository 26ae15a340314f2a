"""verifiers.gpu.compiling on the CPU: an opaque call under torch.compile, and repeated compiled backwards.

The H200 failures these guard against: torch.compile traced into kb's ctypes call of a pinned build (the
call had been wrapped in torch.compiler.disable, which torch.compile unwraps), and compiled flex_attention's
backward refused retain_graph=True because of donated buffers. A stand-in kernel plays the ctypes call: it
records whether dynamo was tracing it (the ctypes call must only ever run eagerly).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from verifiers.gpu.compiling import graph_break, no_donated_buffers  # noqa: E402

TRACED: list[bool] = []


def _stand_in_kernel(x: Any) -> Any:
    """Stands for kb's ctypes call; records whether it runs under dynamo's tracing (where the real one fails)."""
    TRACED.append(torch.compiler.is_compiling())
    return x * 3.0


class _StandIn(torch.autograd.Function):
    """The shape of verifiers.gpu.pinned.forward: an autograd Function around the opaque forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return _stand_in_kernel(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return _stand_in_kernel(g)


def _call(x: Any) -> Any:
    return _StandIn.apply(x)


def test_compile_of_a_disabled_function_traces_it() -> None:
    """The cause: torch.compile(torch.compiler.disable(f)) compiles f itself (so the old wrapping failed)."""
    torch._dynamo.reset()
    TRACED.clear()
    torch.compile(torch.compiler.disable(_call), backend="eager")(torch.ones(4))
    assert True in TRACED


def test_graph_break_runs_the_call_eagerly_forward_and_backward() -> None:
    torch._dynamo.reset()
    TRACED.clear()
    run = torch.compile(graph_break(_call), backend="eager", dynamic=False)
    x = torch.arange(4.0, requires_grad=True)
    o = run(x)
    assert torch.equal(o.detach(), torch.arange(4.0) * 3)
    do = torch.ones(4)
    o.backward(do, retain_graph=True)
    o.backward(do, retain_graph=True)  # a timed loop repeats the backward on the kept graph
    assert torch.equal(x.grad, torch.full((4,), 6.0))
    assert TRACED == [False, False, False]  # the forward and both backwards, all eager


def test_no_donated_buffers_scopes_the_flag_and_allows_repeated_backward() -> None:
    import torch._functorch.config as functorch_config

    before = functorch_config.donated_buffer
    torch._dynamo.reset()

    def f(x: Any) -> Any:
        return x.sin().cos() * x  # saves intermediates the backward alone reads: candidates for donation

    x = torch.linspace(-1, 1, 8, requires_grad=True)
    with no_donated_buffers():
        assert functorch_config.donated_buffer is False
        o = torch.compile(f, backend="aot_eager", dynamic=False)(x)
        for _ in range(3):
            o.backward(torch.ones(8), retain_graph=True)
    assert functorch_config.donated_buffer == before
    ref = torch.linspace(-1, 1, 8, requires_grad=True)
    f(ref).backward(torch.ones(8))
    torch.testing.assert_close(x.grad, 3 * ref.grad)
