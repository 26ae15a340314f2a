"""What claims data may ask the code verifiers to execute (docs/SECURITY.md).

Claims are data. A check of a code verifier may name pinned functions, grids,
values, type aliases and expressions; every piece of C++, CUDA or Python text
that kb writes lives here, in `verifiers/snippets/`, reviewed as code, and a
check refers to it by name. This module holds the rules the params models
apply at validation (so `kb validate` names the file, line and field):

- `EXECUTABLE_PINS`: the repository revisions whose code kb may compile or
  run. Pointing a check at another revision is a code change (this file).
- Compiler flags from an allow-list; repository paths without `..`, options
  or absolute paths; identifiers as identifiers.
- C++ expressions and type aliases over a restricted token set: no
  statements, blocks, lambdas, preprocessor lines, strings or inline
  assembly. Python call expressions over a restricted syntax tree: calls,
  names, attributes without dunders, literals, arithmetic, comparisons.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

SNIPPETS = Path(__file__).parent / "snippets"
# Snippet kinds: folder and file suffix. The registry hashes every snippet (HASH_FILES in compiled.py).
SNIPPET_KINDS = {"host": ".h", "py": ".py", "cuda": ".cu", "constexpr": ".cuh"}

# (source id, full SHA) of the revisions whose code the pinned-code verifiers may execute. cutlass commits
# reached through a trusted superproject's gitlink are trusted with it.
EXECUTABLE_PINS = frozenset({
    ("flash-attention", "6d48e14a6c2f551db96f0badc658a6279a929df3"),  # v1.0.9
    ("flash-attention", "4f285b354796fb17df8636485b9a04df3ebbb7dc"),  # v2.0.0
    ("flash-attention", "3669b25206d5938e3cc74a5f7860e31c38af8204"),  # fa3-2024-08
    ("flash-attention", "cedf07d25715ed75eb9adc9d4ffc72a2b08e683d"),  # two-mma-wg-2026-04
    ("flash-attention", "b54df166ebb69b896892826014759d09b9c3c9c6"),  # current-2026-07-22
    ("flash-attention", "849f660f73b176e5ad5670e7f822c7fa9f3eaf8b"),  # fa4-2026-07-28
    ("flash-attention", "d7e4dba3e568106b0f1b6323b07c1272f53679b3"),  # large-d-2026-08-06
    ("cutlass", "319a389f42b776fae5701afcb943fc03be5b5c25"),  # fa1-v1.0.9-submodule
    # The teaching implementations on the notes author's list (code.teaching-run, verifiers/pinned/teaching.py).
    ("mog9-flashattention-cupy", "e15108108b363ec04d8e802df10de0d54dd89a4f"),  # main-2026-03-06
    ("peterr0-flashattention-pytorch", "353e9c379b42965dac584c6b444de757adea0ed4"),  # main-2025-12-15
    ("gitctrlx-flash-attention-tutorial", "8611ee0d1e7ebff7ac92ebbb0080d20ee9c8c24e"),  # main-2025-10-23
})



def executable_pins() -> frozenset[tuple[str, str]]:
    """EXECUTABLE_PINS, plus the operator's own `KB_TRUST_PINS=source@sha,...` (an environment setting, never data)."""
    extra = set()
    for item in os.environ.get("KB_TRUST_PINS", "").split(","):
        src, _, sha = item.strip().partition("@")
        if src and re.fullmatch(r"[0-9a-f]{40}", sha):
            extra.add((src, sha))
    return EXECUTABLE_PINS | extra


_FLAG_PATTERNS = [re.compile(p) for p in (
    r"-std=c\+\+(14|17|20)",
    r"--expt-relaxed-constexpr", r"--expt-extended-lambda", r"--use_fast_math",
    r"-O[0-3]", r"-maxrregcount=\d{1,3}", r"-lineinfo",
    r"-D[A-Za-z_]\w*(=[A-Za-z0-9_.]*)?", r"-U[A-Za-z_]\w*",
)]
_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_IDENT = re.compile(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*")
_SNIPPET = re.compile(r"[a-z0-9][a-z0-9_.-]{0,80}")

# A C++ expression: identifiers, numbers, scope, template brackets, operators, parentheses, commas, and
# empty braces (value-initialisation, `typename T::Layout{}`) but no block.
_CPP_TOKEN = re.compile(r"\s+|\{\s*\}|[A-Za-z_]\w*|0[xX][0-9a-fA-F]+[uUlL]*|\d+(\.\d*)?([eE][-+]?\d+)?[uUlLfF]*|::|<<|>>|<=|>=|==|!="
                        r"|&&|\|\||[-+*/%<>()?:,.!~&|^]")
_CPP_FORBIDDEN_WORDS = {"asm", "__asm__", "__asm", "_Pragma", "__pragma", "__attribute__", "__declspec", "new", "delete",
                        "throw", "extern", "static", "template", "typedef", "operator", "goto", "return", "__builtin_trap",
                        "system", "popen", "fopen", "exec", "dlopen"}
_ALIAS = re.compile(r"\s*using\s+([A-Za-z_]\w*)\s*=\s*([^;]+);\s*")


def check_flags(flags: list[str]) -> list[str]:
    """Compiler flags from the allow-list only (no -wrapper, no @file, no output or include options)."""
    for f in flags:
        if not any(p.fullmatch(f) for p in _FLAG_PATTERNS):
            raise ValueError(f"compiler flag {f!r} is not on the allow-list (verifiers/trust.py)")
    return flags


def check_repo_path(path: str) -> str:
    """A repository-relative path: no option, no absolute path, no `..`."""
    if not _PATH.fullmatch(path) or any(part == ".." for part in path.split("/")):
        raise ValueError(f"{path!r} is not a repository-relative path (letters, digits, _.+-, '/'; no '..', no leading '-')")
    return path


def check_identifier(name: str) -> str:
    """A C++ or Python name, optionally qualified with `::`."""
    if not _IDENT.fullmatch(name):
        raise ValueError(f"{name!r} is not an identifier")
    return name


def check_cpp_expr(expr: str, what: str = "expression") -> str:
    """A C++ expression over the restricted token set; raises ValueError naming the first offending token."""
    pos, depth = 0, 0
    while pos < len(expr):
        m = _CPP_TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"{what} {expr[:60]!r}: {expr[pos]!r} is not allowed in claims data "
                             "(no statements, blocks, lambdas, strings or preprocessor lines; put code in verifiers/snippets/)")
        tok = m.group(0)
        if tok in _CPP_FORBIDDEN_WORDS:
            raise ValueError(f"{what} {expr[:60]!r}: {tok!r} is not allowed in claims data")
        depth += tok == "("
        depth -= tok == ")"
        if depth < 0:
            raise ValueError(f"{what} {expr[:60]!r}: unbalanced parentheses")
        pos = m.end()
    if depth:
        raise ValueError(f"{what} {expr[:60]!r}: unbalanced parentheses")
    return expr


def check_aliases(prelude: str) -> str:
    """A constexpr prelude: type aliases only (`using T = Traits<128, 64, 4>;`), or a snippet name."""
    if not prelude.strip() or is_snippet_name(prelude):
        return prelude
    body = "\n".join(ln for ln in prelude.splitlines() if not ln.strip().startswith("//"))
    rest = _ALIAS.sub("", body)
    if rest.strip():
        raise ValueError("a constexpr prelude holds only type aliases (`using T = Traits<...>;`) or names a snippet in "
                         f"verifiers/snippets/; found {rest.strip()[:60]!r}")
    for _, target in _ALIAS.findall(body):
        check_cpp_expr(target, "type alias")
        if "(" in target:
            raise ValueError(f"type alias {target[:60]!r}: parentheses are not allowed in a type alias")
    return prelude


# Expressions only: no statements, imports or assignments. Lambdas and comprehensions stay expressions; what
# they can reach is limited by the names below, and the call runs in the sandbox in any case.
_PY_NODES = (ast.Expression, ast.Call, ast.Name, ast.Load, ast.Attribute, ast.Constant, ast.Tuple, ast.List, ast.keyword,
             ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Subscript, ast.Slice, ast.operator,
             ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context, ast.Lambda, ast.arguments, ast.arg, ast.Set,
             ast.Dict, ast.Starred, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.comprehension)
_PY_DENIED_NAMES = {"eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars",
                    "breakpoint", "input", "help", "dir", "type", "object", "memoryview", "exit", "quit"}


def check_py_expr(expr: str) -> str:
    """A Python expression: calls, names, attributes and literals without dunders, arithmetic, lambdas, comprehensions."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"call {expr[:60]!r} is not a Python expression: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _PY_NODES):
            raise ValueError(f"call {expr[:60]!r}: {type(node).__name__} is not allowed in claims data "
                             "(expressions only; put code in verifiers/snippets/)")
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name.startswith("__") or name in _PY_DENIED_NAMES:
            raise ValueError(f"call {expr[:60]!r}: the name {name!r} is not allowed in claims data")
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) and "__" in str(node.value):
            raise ValueError(f"call {expr[:60]!r}: a string with '__' is not allowed in claims data")
    return expr


def is_snippet_name(text: str) -> bool:
    """Whether a prelude value names a snippet instead of holding text."""
    return bool(_SNIPPET.fullmatch(text.strip())) and "\n" not in text.strip()


def check_snippet(kind: str, name: str) -> str:
    """A snippet name that exists in verifiers/snippets/<kind>/ (empty: none)."""
    if not name:
        return name
    if not is_snippet_name(name):
        raise ValueError(f"{kind} code in claims data is not allowed: name a snippet in verifiers/snippets/{kind}/ "
                         f"instead (got {name.strip()[:60]!r})")
    if not snippet_path(kind, name).is_file():
        raise ValueError(f"no snippet {name!r} in verifiers/snippets/{kind}/ (expected {snippet_path(kind, name).name})")
    return name


def snippet_path(kind: str, name: str) -> Path:
    """Where the snippet `name` of `kind` lives: verifiers/snippets/, else a folder of `KB_SNIPPET_PATH`.

    `KB_SNIPPET_PATH` is the operator's setting (the test suite's fixtures use it), never claims data.
    """
    file = f"{name.strip()}{SNIPPET_KINDS[kind]}"
    for base in [SNIPPETS, *(Path(p) for p in os.environ.get("KB_SNIPPET_PATH", "").split(os.pathsep) if p)]:
        if (base / kind / file).is_file():
            return base / kind / file
    return SNIPPETS / kind / file


def snippet(kind: str, name: str) -> str:
    """The text of a snippet ('' for no snippet)."""
    return snippet_path(kind, name).read_text() if name else ""


def snippet_files() -> list[str]:
    """Every snippet (absolute paths), for the registry's code hash (`HASH_FILES`)."""
    return sorted(str(p) for p in SNIPPETS.rglob("*") if p.is_file())
