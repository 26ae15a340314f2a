"""math.identity: a formula as the claim states it, against an independent definition, in fp64.

The built-in identity verifiers (math.online-softmax, math.backward-identities,
...) check an identity the KB wrote once; they agree with any note that names
it, whatever formula the note prints. This verifier reads the formula from the
check itself: `let` holds the statement's steps (`m = max(m1, m2)`, ...), `lhs`
the statement's result, `rhs` an independent definition (the dense softmax,
autograd's gradient, a plain sum). Both are evaluated on seeded random fp64
inputs over several trials; `max_abs_err` is their largest difference. A
flipped sign or a wrong operand in the statement's formula shows up as an
error of order one, so the check can refute what it is given.

Expressions: numbers, the declared variables, + - * / ** @, unary minus,
comparisons inside `where`, slices (`S[:, 0:64]`), `.T`, and the functions
exp, log, sqrt, abs, max, min (elementwise), rowmax, rowsum, colsum, sum,
softmax (row-wise), logsumexp (row-wise), diag, where, ones_like, zeros_like,
set_rows(X, r, Y) and add_rows(X, r, Y) (X with rows r.. replaced by, or
increased by, Y: a tile written back or accumulated into a larger buffer),
grad(f, x, seed) (the vector-Jacobian product of expression `f` with respect
to variable `x`, contracted with `seed`).

Steps may be loops, for recurrences a statement gives per tile (the online
softmax update, a tiled backward's accumulation): `{for: j, range: 4, do:
[...]}` runs its steps for j = 0..3, and inside a loop a step may update a
name it assigned before (`m = max(m, rowmax(S[:, j*8:(j+1)*8]))`). A loop
that skips a tile, or an update with a wrong rescale, leaves a gap of order
one against the dense definition.
"""

from __future__ import annotations

import ast
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from kb.registry import Context, Outcome, Params, verifier

# Memory bound of the evaluator: no variable, and no value a step computes, may hold more than this
# many fp64 elements (128 MiB); all declared variables together at most twice that. Checked before
# anything is allocated: declared shapes when the parameters are read, each operation's result shape
# on torch's meta device (shapes only, no data) before it runs.
MAX_ELEMENTS = 1 << 24
MAX_TOTAL_ELEMENTS = 2 * MAX_ELEMENTS
MAX_DIMS = 8


class TooLarge(ValueError):
    """A variable or an intermediate value would exceed the evaluator's memory bound (a harness error, not a verdict)."""


def _numel(shape: list[int] | tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _shape_text(shape: Any) -> str:
    return "×".join(map(str, shape)) or "scalar"


class Loop(Params):
    """Steps repeated for a loop variable over range(n) (nested loops allowed)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    var: str = Field(alias="for", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    range: int = Field(ge=0, le=64)
    do: list[str | Loop] = Field(min_length=1)


Loop.model_rebuild()


class IdentityParams(Params):
    """Variables, the statement's formula and an independent definition."""

    vars: dict[str, list[int]] = Field(min_length=1)  # name -> shape ([] for a scalar)
    positive: list[str] = []  # variables drawn positive (sums, normalisers)
    let: list[str | Loop] = []  # "name = expr" steps or loops of them, in the statement's order
    lhs: str  # the statement's result
    rhs: str  # an independent definition
    trials: int = Field(default=3, ge=1, le=20)
    seed: int = 0
    scale: float = 3.0  # spread of the random scores

    @model_validator(mode="after")
    def _bounded(self) -> IdentityParams:
        total = 0
        for name, shape in self.vars.items():
            if len(shape) > MAX_DIMS or any(d < 0 for d in shape):
                raise ValueError(f"variable {name!r} has shape {shape}: at most {MAX_DIMS} non-negative dimensions")
            n = _numel(shape)
            if n > MAX_ELEMENTS:
                raise ValueError(f"variable {name!r} has shape {_shape_text(shape)} = {n:,} elements, above the "
                                 f"bound of {MAX_ELEMENTS:,} ({MAX_ELEMENTS * 8 // 2**20} MiB of fp64)")
            total += n
        if total > MAX_TOTAL_ELEMENTS:
            raise ValueError(f"the variables hold {total:,} elements together, above the bound of {MAX_TOTAL_ELEMENTS:,}")
        return self


_FUNCS = ("exp", "log", "sqrt", "abs", "max", "min", "rowmax", "rowsum", "colsum", "sum", "softmax", "logsumexp",
          "diag", "where", "ones_like", "zeros_like", "set_rows", "add_rows", "grad")


def _functions(torch: Any, env: dict[str, Any]) -> dict[str, Any]:
    def grad(expr: Any, wrt: Any, seed: Any) -> Any:
        raise TypeError("grad takes an expression: use it as grad(<expr>, <variable>, <seed>)")

    def rows(x: Any, start: Any, y: Any, add: bool) -> Any:
        out, r = x.clone(), int(start)
        if r < 0 or r + y.shape[0] > x.shape[0]:
            raise RuntimeError(f"rows {r}..{r + y.shape[0]} do not fit in {x.shape[0]}")
        out[r:r + y.shape[0]] = (out[r:r + y.shape[0]] + y) if add else y
        return out

    return {
        "set_rows": lambda x, r, y: rows(x, r, y, False), "add_rows": lambda x, r, y: rows(x, r, y, True),
        "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": torch.abs,
        "max": torch.maximum, "min": torch.minimum,
        "rowmax": lambda x: x.max(dim=-1, keepdim=True).values, "rowsum": lambda x: x.sum(dim=-1, keepdim=True),
        "colsum": lambda x: x.sum(dim=0, keepdim=True), "sum": torch.sum,
        "softmax": lambda x: torch.softmax(x, dim=-1), "logsumexp": lambda x: torch.logsumexp(x, dim=-1, keepdim=True),
        "diag": torch.diag, "where": torch.where, "ones_like": torch.ones_like, "zeros_like": torch.zeros_like,
        "grad": grad,
    }


def _bounded(torch: Any, what: str, fn: Any, *args: Any) -> Any:
    """fn(*args), after checking on the meta device (shapes, no data) that its result fits the memory bound.

    Where the meta device cannot tell (an error there, a value that needs data), the real call runs
    and raises its own error, if any: operations that cannot grow their inputs need no check.
    """
    metas = [torch.empty(a.shape, dtype=a.dtype, device="meta") if isinstance(a, torch.Tensor) else a for a in args]
    try:
        out = fn(*metas)
    except Exception:
        out = None
    if isinstance(out, torch.Tensor) and out.numel() > MAX_ELEMENTS:
        raise TooLarge(f"{what} would give a {_shape_text(tuple(out.shape))} value = {out.numel():,} elements, above "
                       f"the bound of {MAX_ELEMENTS:,} ({MAX_ELEMENTS * 8 // 2**20} MiB of fp64)")
    return fn(*args)


def _eval(node: ast.AST, env: dict[str, Any], funcs: dict[str, Any], torch: Any) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, funcs, torch)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id == "inf":
            return float("inf")
        raise ValueError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, funcs, torch)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, funcs, torch), _eval(node.right, env, funcs, torch)
        ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
               ast.Div: lambda x, y: x / y, ast.Pow: lambda x, y: x ** y, ast.MatMult: lambda x, y: x @ y}
        if type(node.op) in ops:
            return _bounded(torch, ast.unparse(node)[:60], ops[type(node.op)], a, b)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _eval(node.left, env, funcs, torch), _eval(node.comparators[0], env, funcs, torch)
        cmp = {ast.Lt: lambda x, y: x < y, ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y,
               ast.GtE: lambda x, y: x >= y}
        if type(node.ops[0]) in cmp:
            return _bounded(torch, ast.unparse(node)[:60], cmp[type(node.ops[0])], a, b)
    if isinstance(node, ast.Attribute) and node.attr == "T":
        return _eval(node.value, env, funcs, torch).transpose(-1, -2)
    if isinstance(node, ast.Subscript):
        return _eval(node.value, env, funcs, torch)[_index(node.slice, env, funcs, torch)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs:
        if node.func.id == "grad":
            return _grad(node, env, funcs, torch)
        return _bounded(torch, ast.unparse(node)[:60], funcs[node.func.id], *[_eval(a, env, funcs, torch) for a in node.args])
    raise ValueError(f"unsupported expression: {ast.unparse(node)[:60]}")


def _index(node: ast.AST, env: dict[str, Any], funcs: dict[str, Any], torch: Any) -> Any:
    if isinstance(node, ast.Tuple):
        return tuple(_index(e, env, funcs, torch) for e in node.elts)
    if isinstance(node, ast.Slice):
        def bound(b: ast.AST | None) -> int | None:
            return None if b is None else int(_eval(b, env, funcs, torch))
        return slice(bound(node.lower), bound(node.upper), bound(node.step))
    return int(_eval(node, env, funcs, torch))


def _grad(node: ast.Call, env: dict[str, Any], funcs: dict[str, Any], torch: Any) -> Any:
    """grad(expr, x, seed): d<expr, seed>/dx, by autograd on a fresh leaf copy of x."""
    if len(node.args) != 3 or not isinstance(node.args[1], ast.Name):
        raise ValueError("grad(<expression>, <variable>, <seed>)")
    name = node.args[1].id
    leaf = env[name].detach().clone().requires_grad_(True)
    out = _eval(node.args[0], {**env, name: leaf}, funcs, torch)
    seed = _eval(node.args[2], env, funcs, torch)
    (g,) = torch.autograd.grad(out, leaf, grad_outputs=seed)
    return g.detach()


def _run(steps: list[str | Loop], env: dict[str, Any], funcs: dict[str, Any], torch: Any,
         frozen: frozenset[str], in_loop: bool) -> None:
    """Execute the statement's steps; outside a loop each step names something new."""
    for step in steps:
        if isinstance(step, Loop):
            if step.var in env:
                raise ValueError(f"loop variable {step.var!r} is already a name")
            for value in range(step.range):
                env[step.var] = value
                _run(step.do, env, funcs, torch, frozen | {step.var}, in_loop=True)
            env.pop(step.var, None)
            continue
        target, _, expr = step.partition("=")
        target = target.strip()
        if not target.isidentifier() or target in frozen or target in _FUNCS or (target in env and not in_loop):
            raise ValueError(f"step {step!r} must assign a new name (updates are allowed inside a loop)")
        env[target] = _eval(ast.parse(expr.strip(), mode="eval"), env, funcs, torch)


@verifier("math.identity", kind="cpu-check", params=IdentityParams, timeout_s=60, own_verdict=True)
def identity(p: IdentityParams, ctx: Context) -> Outcome:
    """Evaluate the statement's formula (let + lhs) and an independent definition (rhs) in fp64; report the gap."""
    import torch

    worst = 0.0
    for t in range(p.trials):
        g = torch.Generator().manual_seed(p.seed * 1000 + t)
        env: dict[str, Any] = {}
        for name, shape in p.vars.items():
            x = torch.randn(*shape, generator=g, dtype=torch.float64) if shape else torch.randn(1, generator=g,
                                                                                                 dtype=torch.float64)[0]
            env[name] = (x.abs() + 0.5) if name in p.positive else x * p.scale
        funcs = _functions(torch, env)
        try:  # the statement's side: a formula that does not even evaluate (shapes) is refuted, not an error
            _run(p.let, env, funcs, torch, frozenset(p.vars), in_loop=False)
            lhs = _eval(ast.parse(p.lhs, mode="eval"), env, funcs, torch)
        except RuntimeError as exc:
            return Outcome(measurements={"max_abs_err": (float("inf"), "")}, verdict="refutes",
                           reason=f"the statement's formula does not evaluate: {str(exc)[:160]}")
        rhs = _eval(ast.parse(p.rhs, mode="eval"), env, funcs, torch)
        lt, rt = torch.as_tensor(lhs, dtype=torch.float64), torch.as_tensor(rhs, dtype=torch.float64)
        if lt.shape != rt.shape and lt.numel() != rt.numel():
            return Outcome(measurements={"max_abs_err": (float("inf"), "")}, verdict="refutes",
                           reason=f"the statement's formula has shape {tuple(lt.shape)}, the definition {tuple(rt.shape)}")
        diff = (lt.reshape(rt.shape) - rt).abs()
        err = float(diff.max()) if diff.numel() else 0.0
        worst = max(worst, err if err == err else float("inf"))  # NaN counts as a total disagreement
    return Outcome(measurements={"max_abs_err": (worst, "")},
                   log=f"lhs: {p.lhs}\nrhs: {p.rhs}\nlet: {p.let}\ntrials={p.trials} max_abs_err={worst:.3e}")


__all__ = ["_FUNCS", "identity"]
