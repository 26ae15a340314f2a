"""source.structure: queries over the syntax tree of a pinned file.

A token check says that some text occurs in the cited lines; it cannot tell a
call inside a loop from one after it, the then-branch from the else-branch, or
code from a comment. This verifier parses the whole file at the pinned SHA -
tree-sitter with the CUDA grammar (the C++ grammar if the CUDA one is missing)
for C/C++/CUDA, Python's own `ast` for `.py` - and answers one query about the
targets found in the anchored lines:

- `inside` / `outside`: every (no) occurrence of the target sits within the
  containers named (a loop with its header, a branch arm with its condition, a
  function by name);
- `order`: the first occurrence of one target precedes the first of another;
- `condition`: the innermost branch (or loop) around the target, or some branch
  in the lines, has the stated condition;
- `argument`: an argument (or template argument) of every call has a value;
- `result`: a call's return value is used, or discarded;
- `count`: how many times the target occurs (within containers).

Only syntax-tree nodes count: a name in a comment or a string is not code. A
target inside a parse-error region (an ERROR or missing node on its path, or
one inside its enclosing function) gives `inconclusive` with the reason, never
a refutation. Attribute macros that the grammars do not know (CUTLASS_DEVICE,
CUTE_HOST_DEVICE, __forceinline__, ...) are blanked to spaces before parsing,
so byte offsets and line numbers stay those of the pinned file.

The file is read exactly as `source.lines` reads it (git blob at the pin from
the local clone, or with `--online` the cached raw file), and the cited lines
must hash as recorded.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kb.gitsrc import GitRepo
from kb.notes import lines_sha256
from kb.registry import Context, Outcome, Params, Requirements, verifier
from verifiers.source.lines import fetch_raw

CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx", ".c", ".hh", ".inl")
PY_SUFFIXES = (".py",)

# Attribute-like macros and specifiers the grammars do not know: blanked (same length, spaces) before parsing.
BLANK_WORDS = (
    "CUTLASS_DEVICE", "CUTLASS_HOST_DEVICE", "CUTLASS_HOST", "CUTLASS_GLOBAL", "CUTE_HOST_DEVICE", "CUTE_DEVICE",
    "CUTE_HOST", "CUTE_GLOBAL", "CUTLASS_PRAGMA_UNROLL", "CUTLASS_PRAGMA_NO_UNROLL", "CUTE_UNROLL", "CUTE_NO_UNROLL",
    "__forceinline__", "__noinline__", "__inline__", "__restrict__", "FMHA_INLINE", "FLASH_DEVICE",
    "CUTE_GRID_CONSTANT", "CUTE_STATIC_V", "CUTLASS_NAMESPACE_OPEN", "CUTLASS_NAMESPACE_CLOSE",
)
# Macros with a parenthesised argument list, blanked with it: __launch_bounds__(128, 1), __align__(16).
BLANK_CALLS = ("__launch_bounds__", "__align__", "alignas", "__grid_constant__")
_BLANK_WORD = re.compile(r"\b(?:" + "|".join(map(re.escape, BLANK_WORDS)) + r")\b")
_BLANK_CALL = re.compile(r"\b(?:" + "|".join(map(re.escape, BLANK_CALLS)) + r")\b")

# Tokens of code text and of query text: names, numbers, multi-character operators, single characters.
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.']*|::|->|&&|\|\||==|!=|<=|>=|<<=|>>=|\+\+|--|\S")
_NAME = re.compile(r"[A-Za-z_]\w*(?:(?:::|\.|->)[A-Za-z_~]\w*)*")


def tokens(text: str) -> list[str]:
    """Code tokens of a text (whitespace never matters)."""
    return _TOKEN.findall(text)


def _has_run(hay: list[str], needle: list[str]) -> bool:
    """Whether `needle` occurs as a contiguous run in `hay`, not negated (`!X` does not contain the condition `X`)."""
    n = len(needle)
    return n == 0 or any(hay[i:i + n] == needle and not (i and hay[i - 1] in ("!", "not"))
                         for i in range(len(hay) - n + 1))


def blank_macros(src: bytes) -> bytes:
    """The source with attribute macros replaced by spaces of the same length (offsets and lines kept)."""
    text = bytearray(src)
    s = src.decode("latin-1")  # one char per byte, so offsets match
    for m in _BLANK_WORD.finditer(s):
        text[m.start():m.end()] = b" " * (m.end() - m.start())
    for m in _BLANK_CALL.finditer(s):
        end = m.end()
        j = end
        while j < len(s) and s[j] in " \t":
            j += 1
        if j < len(s) and s[j] == "(":
            depth = 0
            for k in range(j, min(len(s), j + 400)):
                if s[k] == "(":
                    depth += 1
                elif s[k] == ")":
                    depth -= 1
                    if depth == 0:
                        end = k + 1
                        break
        chunk = text[m.start():end]
        text[m.start():end] = bytes(b if b == 0x0A else 0x20 for b in chunk)
    return bytes(text)


# ------------------------------------------------------------------ the query's parameters


class Container(Params):
    """One container a target must sit in: exactly one of loop / then / else / branch / function.

    The value is text that must occur (as a contiguous run of code tokens) in the loop's header, the
    branch's condition, or equal the function's name; "" accepts any loop or branch.
    """

    loop: str | None = None
    then: str | None = None
    else_: str | None = Field(default=None, alias="else")
    branch: str | None = None
    function: str | None = None
    # The matched loop or branch must be the innermost one of its kind around the target.
    innermost: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> Container:
        given = [k for k in ("loop", "then", "else_", "branch", "function") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a container names exactly one of loop, then, else, branch, function "
                             f"(got {', '.join(k.rstrip('_') for k in given) or 'none'})")
        if self.function is not None and not _NAME.fullmatch(self.function):
            raise ValueError(f"function must be a name, not {self.function!r}")
        return self

    def describe(self) -> str:
        """Human text: 'the loop over m_block', 'the then-branch of is_final_write'."""
        if self.loop is not None:
            return f"a loop whose header has {self.loop!r}" if self.loop else "a loop"
        if self.function is not None:
            return f"function {self.function}"
        arm, text = (("then", self.then) if self.then is not None else ("else", self.else_) if self.else_ is not None
                     else ("either", self.branch))
        what = f"{arm}-branch" if arm != "either" else "branch"
        return f"the {what} of a condition with {text!r}" if text else f"a {what}"


class Target(Params):
    """What to look for: a call to a function (by name) or any code occurrence of a name."""

    call: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Target:
        if (self.call is None) == (self.name is None):
            raise ValueError("a target names exactly one of call or name")
        value = self.call if self.call is not None else self.name
        if not _NAME.fullmatch(value or ""):
            raise ValueError(f"a target is a name such as flash::gemm or cute.arch.fence, not {value!r}")
        return self

    def describe(self) -> str:
        """Human text."""
        return f"call to {self.call}" if self.call is not None else f"name {self.name}"


class StructureParams(Params):
    """One query over the syntax tree of the file a repository anchor cites."""

    anchor: int
    query: Literal["inside", "outside", "order", "condition", "argument", "result", "count"]
    target: Target | None = None
    within: list[Container] = []
    # order: the first occurrence of `before` precedes the first occurrence of `after`.
    before: Target | None = None
    after: Target | None = None
    # condition: the condition text; `exact` asks for the whole condition, else a contiguous run of its tokens.
    condition: str | None = None
    exact: bool = False
    of: Literal["branch", "loop"] = "branch"
    # argument: the 0-based position among the call's arguments (or its template arguments), or a keyword (Python).
    arg: int | None = Field(default=None, ge=0, le=32)
    keyword: str | None = None
    template: bool = False
    value: str | None = None
    contains: str | None = None
    # inside/outside/condition/argument/result: which occurrence in the lines (0-based, in source order; for
    # condition/argument/result counted among those within the containers); default every one.
    nth: int | None = Field(default=None, ge=0, le=1000)
    # result: true = the return value is used (assigned, passed, returned, tested); false = discarded.
    used: bool | None = None
    # count: how many occurrences (within the containers) the lines hold.
    count: int | None = Field(default=None, ge=0, le=10_000)

    @field_validator("condition", "value", "contains")
    @classmethod
    def _short(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 200 or "\n" in v):
            raise ValueError("condition/value/contains are one short line of code text (at most 200 characters)")
        return v

    @model_validator(mode="after")
    def _fits_query(self) -> StructureParams:
        q = self.query
        need: dict[str, list[str]] = {
            "inside": ["target", "within"], "outside": ["target", "within"], "order": ["before", "after"],
            "condition": ["condition"], "argument": ["target"], "result": ["target", "used"], "count": ["target", "count"],
        }
        missing = [k for k in need[q] if getattr(self, k) in (None, [])]
        if missing:
            raise ValueError(f"query {q!r} needs {', '.join(missing)}")
        if q == "argument":
            if self.target is not None and self.target.call is None:
                raise ValueError("query 'argument' needs target.call (a call has arguments, a name does not)")
            if (self.arg is None) == (self.keyword is None):
                raise ValueError("query 'argument' needs exactly one of arg (0-based position) or keyword")
            if (self.value is None) == (self.contains is None):
                raise ValueError("query 'argument' needs exactly one of value (the whole argument) or contains")
        if q == "result" and self.target is not None and self.target.call is None:
            raise ValueError("query 'result' needs target.call")
        if q == "order" and self.target is not None:
            raise ValueError("query 'order' takes before and after, not target")
        return self


# ------------------------------------------------------------------ a language-neutral view of the tree


@dataclass
class Scope:
    """A loop, a branch arm or a function around an occurrence."""

    kind: str  # loop | then | else | function
    text: list[str]  # header / condition tokens, or [name] for a function
    line: int
    group: int  # the id of the if/loop node, so then and else of one if are known as one branch


@dataclass
class Occ:
    """One occurrence of a call or a name in code."""

    line: int
    pos: tuple[int, int]  # (line, column) for order
    scopes: list[Scope]  # innermost first
    error: str | None  # why this occurrence sits in a parse-error region
    callee: str = ""
    args: list[list[str]] = field(default_factory=list)
    keywords: dict[str, list[str]] = field(default_factory=dict)
    targs: list[list[str]] = field(default_factory=list)
    used: bool = True


@dataclass
class Tree:
    """What the queries read: every call and name, every branch and loop, and where parsing failed."""

    calls: list[Occ] = field(default_factory=list)
    names: list[tuple[str, Occ]] = field(default_factory=list)
    conditions: list[tuple[Scope, Occ]] = field(default_factory=list)  # (the branch/loop, where it starts)
    errors: list[tuple[int, int, str]] = field(default_factory=list)  # (first line, last line, code text)
    comments: list[tuple[int, str]] = field(default_factory=list)  # (line, text) of comments and strings
    parser: str = ""


def _callee_matches(callee: str, name: str) -> bool:
    return callee == name or any(callee.endswith(sep + name) for sep in ("::", ".", "->"))


# ------------------------------------------------------------------ C++ / CUDA through tree-sitter

_LOOPS = {"for_statement", "for_range_loop", "while_statement", "do_statement"}
_NAME_NODES = {"identifier", "field_identifier", "type_identifier", "namespace_identifier"}
_TEXT_NODES = {"comment", "string_literal", "raw_string_literal", "char_literal", "system_lib_string",
               "concatenated_string"}


def _parser() -> tuple[Any, str]:
    import tree_sitter as ts

    try:
        import tree_sitter_cuda as grammar

        name = "tree-sitter-cuda"
    except ImportError:  # the C++ grammar parses the same code less well (no __global__, <<<>>>)
        import tree_sitter_cpp as grammar

        name = "tree-sitter-cpp"
    return ts.Parser(ts.Language(grammar.language())), name


def _code_tokens(node: Any, src: bytes) -> list[str]:
    """Tokens of a node's text with comments left out."""
    parts: list[bytes] = []
    pos = node.start_byte
    stack = [node]
    cuts = []
    while stack:
        n = stack.pop()
        if n.type == "comment":
            cuts.append((n.start_byte, n.end_byte))
        else:
            stack.extend(n.children)
    for a, b in sorted(cuts):
        parts.append(src[pos:a])
        pos = b
    parts.append(src[pos:node.end_byte])
    return tokens(b" ".join(parts).decode("utf-8", "replace"))


def _strip_targs(text: str) -> str:
    """Callee text without template argument lists and whitespace: flash::gemm<true>(...) -> flash::gemm."""
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0 and not ch.isspace():
            out.append(ch)
    return "".join(out).replace("template", "") if "template" in text else "".join(out)


def _function_name(node: Any) -> str:
    d = node.child_by_field_name("declarator")
    while d is not None and d.type not in ("identifier", "qualified_identifier", "field_identifier", "destructor_name",
                                           "operator_name", "template_function"):
        nxt = d.child_by_field_name("declarator")
        d = nxt if nxt is not None else (d.named_children[0] if d.named_children else None)
    if d is None:
        return ""
    return _strip_targs(d.text.decode("utf-8", "replace")).split("::")[-1]


# An ERROR that starts with the keyword before a qualified name: `typename`, `typename K::T{},`, `typename K::T::S`.
_TYPENAME_ONLY = re.compile(r"typename(?:\s+[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*(?:\s*::)?(?:\s*\{\s*\})?\s*[,)]?)?\s*")


def _error_nodes(root: Any) -> list[Any]:
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        if n.type == "ERROR":
            out.append(n)
        stack.extend(n.children)
    return out


def _balanced(text: str) -> bool:
    """Whether an error's text opens and closes as many braces and parentheses (comments and strings aside)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", " ", text, flags=re.S)
    return code.count("{") == code.count("}") and code.count("(") == code.count(")")


def parse_cpp(src: bytes) -> Tree:
    """Every call, name, branch and loop of a C/C++/CUDA file, with their scopes and parse-error regions."""
    parser, name = _parser()
    blanked = blank_macros(src)
    root = parser.parse(blanked).root_node
    # The grammars reject `typename T::X{}` used as an expression (an ERROR holding just the keyword);
    # where that is the whole error, the keyword is blanked and the file parsed again (offsets kept).
    for _ in range(3):
        fix = bytearray(blanked)
        hits = 0
        for n in _error_nodes(root):
            text = blanked[n.start_byte:n.end_byte]
            if text.startswith(b"typename") and _TYPENAME_ONLY.fullmatch(text.decode("latin-1")):
                fix[n.start_byte:n.start_byte + 8] = b" " * 8
                hits += 1
        if not hits:
            break
        blanked = bytes(fix)
        root = parser.parse(blanked).root_node
    tree = Tree(parser=name)

    def line(n: Any) -> int:
        return n.start_point[0] + 1

    # Error regions: ERROR nodes and missing nodes; functions that hold one are unreliable as a whole.
    bad_functions: dict[int, str] = {}
    stack = [(root, None)]
    while stack:
        n, fn = stack.pop()
        # The outermost function: a lost brace lets one function swallow the next, and the missing `}` then
        # shows up inside the swallowed one.
        if n.type == "function_definition" and fn is None:
            fn = n
        if n.type == "ERROR" or n.is_missing:
            what = (f"a parse error at lines {line(n)}-{n.end_point[0] + 1}" if n.type == "ERROR"
                    else f"a missing {n.type!r} at line {line(n)}")
            text = blanked[n.start_byte:n.end_byte].decode("utf-8", "replace")
            tree.errors.append((line(n), n.end_point[0] + 1, text))
            # An error that loses a brace or a parenthesis may have moved code in or out of a block: every
            # container of that function is then in doubt. A balanced error is local to its own subtree.
            # A missing `;` (a macro call used as a statement) is local too.
            if n.type in ("}", ")", "]") if n.is_missing else not _balanced(text):
                # Outside every function (the missing `}` of a namespace whose last function swallowed it), the
                # damage cannot be placed: the whole file is in doubt.
                bad_functions.setdefault(fn.id if fn is not None else -1, what)
            if n.type == "ERROR":
                continue
        stack.extend((c, fn) for c in n.children)

    def occ(n: Any, scopes: list[Scope], err: str | None) -> Occ:
        return Occ(line=line(n), pos=(n.start_point[0], n.start_point[1]), scopes=list(reversed(scopes)), error=err)

    # Walk with the chain of scopes; `err` is set below an ERROR node or inside a function holding one.
    whole = bad_functions.get(-1)
    work: list[tuple[Any, list[Scope], str | None]] = [(root, [], f"{whole}, outside any function" if whole else None)]
    while work:
        n, scopes, err = work.pop()
        t = n.type
        if t in _TEXT_NODES:
            tree.comments.append((line(n), n.text.decode("utf-8", "replace")))
            continue
        if t == "ERROR":
            err = err or f"a parse error at lines {line(n)}-{n.end_point[0] + 1}"
        if t == "function_definition":
            fname = _function_name(n)
            scopes = [*scopes, Scope("function", [fname], line(n), n.id)]
            if n.id in bad_functions and err is None:
                err = err or f"{bad_functions[n.id]} inside function {fname or '?'}"
        if t == "call_expression":
            fnode = n.child_by_field_name("function")
            o = occ(n, scopes, err)
            o.callee = _strip_targs(fnode.text.decode("utf-8", "replace")) if fnode is not None else ""
            argl = n.child_by_field_name("arguments")
            if argl is not None:
                o.args = [_code_tokens(a, blanked) for a in argl.named_children if a.type != "comment"]
            tnode = fnode
            while tnode is not None and tnode.type not in ("template_function", "template_method"):
                # `obj.template f<T>(...)` wraps the template method in a dependent_name.
                nxt = tnode.child_by_field_name("name") or tnode.child_by_field_name("field")
                if nxt is None and tnode.type == "dependent_name" and tnode.named_children:
                    nxt = tnode.named_children[0]
                tnode = nxt
            if tnode is not None:
                tl = tnode.child_by_field_name("arguments")
                if tl is not None:
                    o.targs = [_code_tokens(a, blanked) for a in tl.named_children if a.type != "comment"]
            parent = n.parent
            while parent is not None and parent.type == "parenthesized_expression":
                parent = parent.parent
            if parent is not None and parent.type == "cast_expression":
                ty = parent.child_by_field_name("type")
                if ty is not None and ty.text.strip() == b"void":
                    parent = parent.parent
            o.used = not (parent is not None and parent.type == "expression_statement")
            tree.calls.append(o)
        if t in _NAME_NODES:
            tree.names.append((n.text.decode("utf-8", "replace"), occ(n, scopes, err)))
        if t in ("qualified_identifier", "field_expression"):
            tree.names.append((_strip_targs(n.text.decode("utf-8", "replace")), occ(n, scopes, err)))
        # Children, each with the scopes it is in.
        if t in _LOOPS:
            body = n.child_by_field_name("body")
            head = [c for c in n.children if body is None or c.id != body.id]
            if t == "for_statement":
                head_toks = [tok for c in head for tok in _code_tokens(c, blanked)]
            else:
                cond = n.child_by_field_name("condition")
                head_toks = ([tok for c in head if c.type not in ("for", "while", "do", "(", ")", ";")
                              for tok in _code_tokens(c, blanked)] if cond is None or t == "for_range_loop"
                             else _code_tokens(cond, blanked))
            sc = Scope("loop", head_toks, line(n), n.id)
            tree.conditions.append((sc, occ(n, scopes, err)))
            for c in n.children:
                work.append((c, [*scopes, sc] if body is not None and c.id == body.id else scopes, err))
            continue
        if t in ("if_statement", "conditional_expression"):
            cond = n.child_by_field_name("condition")
            ctoks = _code_tokens(cond, blanked) if cond is not None else []
            if t == "if_statement" and ctoks[:1] == ["("] and ctoks[-1:] == [")"]:
                ctoks = ctoks[1:-1]
            then = n.child_by_field_name("consequence")
            alt = n.child_by_field_name("alternative")
            sc_then = Scope("then", ctoks, line(n), n.id)
            sc_else = Scope("else", ctoks, line(n), n.id)
            tree.conditions.append((sc_then, occ(n, scopes, err)))
            for c in n.children:
                if then is not None and c.id == then.id:
                    work.append((c, [*scopes, sc_then], err))
                elif alt is not None and c.id == alt.id:
                    work.append((c, [*scopes, sc_else], err))
                else:
                    work.append((c, scopes, err))
            continue
        if t in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"):
            cond = n.child_by_field_name("condition") or n.child_by_field_name("name")
            ctoks = _code_tokens(cond, blanked) if cond is not None else []
            if t in ("preproc_ifdef", "preproc_elifdef"):
                ctoks = [n.children[0].text.decode().strip(), *ctoks]
            alt = n.child_by_field_name("alternative")
            sc_then = Scope("then", ctoks, line(n), n.id)
            sc_else = Scope("else", ctoks, line(n), n.id)
            tree.conditions.append((sc_then, occ(n, scopes, err)))
            for c in n.children:
                if cond is not None and c.id == cond.id:
                    work.append((c, scopes, err))
                elif alt is not None and c.id == alt.id:
                    work.append((c, [*scopes, sc_else], err))
                else:
                    work.append((c, [*scopes, sc_then], err))
            continue
        work.extend((c, scopes, err) for c in n.children)
    return tree


# ------------------------------------------------------------------ Python through ast


def parse_py(src: bytes) -> Tree:
    """Every call, name, branch and loop of a Python file with their scopes (a syntax error fails the file)."""
    text = src.decode("utf-8", "replace")
    tree = Tree(parser="python-ast")
    try:
        mod = ast.parse(text)
    except SyntaxError as exc:
        tree.errors.append((exc.lineno or 1, exc.end_lineno or exc.lineno or 1, str(exc)))
        return tree
    import io
    import tokenize

    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                tree.comments.append((tok.start[0], tok.string))
    except (tokenize.TokenError, IndentationError):
        pass

    def toks(node: ast.AST) -> list[str]:
        return tokens(ast.unparse(node))

    def occ(n: Any, scopes: list[Scope]) -> Occ:
        return Occ(line=n.lineno, pos=(n.lineno, n.col_offset), scopes=list(reversed(scopes)), error=None)

    def visit(n: ast.AST, scopes: list[Scope], parent: ast.AST | None) -> None:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            tree.comments.append((n.lineno, n.value))
            return
        if isinstance(n, ast.Call):
            o = occ(n, scopes)
            o.callee = re.sub(r"\s+", "", ast.unparse(n.func))
            o.args = [toks(a) for a in n.args]
            o.keywords = {k.arg: toks(k.value) for k in n.keywords if k.arg}
            o.used = not isinstance(parent, ast.Expr)
            tree.calls.append(o)
        if isinstance(n, ast.Name):
            tree.names.append((n.id, occ(n, scopes)))
        if isinstance(n, ast.Attribute):
            tree.names.append((n.attr, occ(n, scopes)))
            tree.names.append((re.sub(r"\s+", "", ast.unparse(n)), occ(n, scopes)))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            sc = Scope("function", [n.name], n.lineno, id(n))
            for d in [*n.decorator_list, n.args, *([n.returns] if n.returns else [])]:
                visit(d, scopes, n)
            for s in n.body:
                visit(s, [*scopes, sc], n)
            return
        if isinstance(n, ast.For | ast.AsyncFor | ast.While):
            head = toks(n.test) if isinstance(n, ast.While) else [*toks(n.target), "in", *toks(n.iter)]
            sc = Scope("loop", head, n.lineno, id(n))
            tree.conditions.append((sc, occ(n, scopes)))
            for h in ([n.test] if isinstance(n, ast.While) else [n.target, n.iter]):
                visit(h, scopes, n)
            for s in n.body:
                visit(s, [*scopes, sc], n)
            for s in n.orelse:
                visit(s, scopes, n)
            return
        if isinstance(n, ast.If | ast.IfExp):
            cond = toks(n.test)
            then, other = Scope("then", cond, n.lineno, id(n)), Scope("else", cond, n.lineno, id(n))
            tree.conditions.append((then, occ(n, scopes)))
            visit(n.test, scopes, n)
            for s in (n.body if isinstance(n, ast.If) else [n.body]):
                visit(s, [*scopes, then], n)
            for s in (n.orelse if isinstance(n, ast.If) else [n.orelse]):
                visit(s, [*scopes, other], n)
            return
        for c in ast.iter_child_nodes(n):
            visit(c, scopes, n)

    visit(mod, [], None)
    return tree


# ------------------------------------------------------------------ the queries


def _container_matches(c: Container, sc: Scope) -> bool:
    if c.function is not None:
        return sc.kind == "function" and sc.text[:1] == [c.function.split("::")[-1].split(".")[-1]]
    if c.loop is not None:
        return sc.kind == "loop" and _has_run(sc.text, tokens(c.loop))
    arm, text = ("then", c.then) if c.then is not None else ("else", c.else_) if c.else_ is not None else (None, c.branch)
    return sc.kind in (("then", "else") if arm is None else (arm,)) and _has_run(sc.text, tokens(text or ""))


def _inside(o: Occ, c: Container) -> bool:
    if not c.innermost:
        return any(_container_matches(c, sc) for sc in o.scopes)
    kinds = ("function",) if c.function is not None else ("loop",) if c.loop is not None else ("then", "else")
    first = next((sc for sc in o.scopes if sc.kind in kinds), None)
    return first is not None and _container_matches(c, first)


def find(tree: Tree, target: Target, lo: int, hi: int) -> list[Occ]:
    """The target's occurrences whose first line lies in lo..hi, in source order."""
    if target.call is not None:
        found = [o for o in tree.calls if lo <= o.line <= hi and _callee_matches(o.callee, target.call)]
    else:
        want = target.name or ""
        seen: set[tuple[int, int]] = set()
        found = []
        for text, o in tree.names:
            if lo <= o.line <= hi and (text == want or (("." in want or "::" in want) and _callee_matches(text, want))):
                if o.pos not in seen:
                    seen.add(o.pos)
                    found.append(o)
    return sorted(found, key=lambda o: o.pos)


def _word(text: str, name: str) -> bool:
    last = re.split(r"::|\.|->", name)[-1]
    return re.search(rf"(?<![\w]){re.escape(last)}(?![\w])", text) is not None


class Inconclusive(Exception):
    """The tree cannot decide: the target sits where parsing failed."""


def _not_found(tree: Tree, target: Target, lo: int, hi: int) -> str:
    name = target.call or target.name or ""
    for a, b, text in tree.errors:
        if a <= hi and b >= lo and _word(text, name):
            raise Inconclusive(f"the {target.describe()} is not in the parsed code of lines {lo}-{hi}, but the name occurs "
                               f"in the parse-error region at lines {a}-{b}")
    in_text = sorted({ln for ln, text in tree.comments if lo <= ln <= hi and _word(text, name)})
    extra = (f"; the name occurs only in comments or strings (line {', '.join(map(str, in_text[:5]))}), which are not code"
             if in_text else "")
    return f"no {target.describe()} in the code of lines {lo}-{hi}{extra}"


def _clean(occs: list[Occ]) -> list[Occ]:
    for o in occs:
        if o.error:
            raise Inconclusive(f"the occurrence at line {o.line} sits in {o.error}")
    return occs


def answer(p: StructureParams, tree: Tree, lo: int, hi: int) -> tuple[bool, str, dict[str, Any]]:
    """(holds, why, extra measurements) for the query over lines lo..hi; raises Inconclusive."""
    if p.query == "order":
        assert p.before is not None and p.after is not None
        a_all, b_all = find(tree, p.before, lo, hi), find(tree, p.after, lo, hi)
        a = [o for o in a_all if all(_inside(o, c) for c in p.within)]
        b = [o for o in b_all if all(_inside(o, c) for c in p.within)]
        where = f" within {', '.join(c.describe() for c in p.within)}" if p.within else ""
        for t, lst, alls in ((p.before, a, a_all), (p.after, b, b_all)):
            if not lst:
                if alls:
                    _clean(alls)
                    return False, f"the {t.describe()} occurs in lines {lo}-{hi} but not{where}", {}
                return False, _not_found(tree, t, lo, hi), {}
        _clean([a[0], b[0]])
        holds = a[0].pos < b[0].pos
        return holds, (f"the first {p.before.describe()} (line {a[0].line}) comes "
                       f"{'before' if holds else 'after'} the first {p.after.describe()} (line {b[0].line}){where}"), {}

    if p.query == "condition" and p.target is None:
        # Some branch (or loop) starting in the lines has the condition.
        kinds = ("loop",) if p.of == "loop" else ("then",)
        conds = [(sc, o) for sc, o in tree.conditions if sc.kind in kinds and lo <= o.line <= hi]
        want = tokens(p.condition or "")
        for sc, o in conds:
            if (sc.text == want) if p.exact else _has_run(sc.text, want):
                _clean([o])
                return True, f"the {p.of} at line {o.line} has condition {' '.join(sc.text)!r}", {}
        for a, b, _text in tree.errors:
            if a <= hi and b >= lo:
                raise Inconclusive(f"no {p.of} in lines {lo}-{hi} has the condition {p.condition!r}, "
                                   f"and lines {a}-{b} did not parse")
        seen = "; ".join(f"line {o.line}: {' '.join(sc.text)}" for sc, o in conds[:4]) or "none"
        return False, f"no {p.of} in lines {lo}-{hi} has the condition {p.condition!r} ({p.of} conditions there: {seen})", {}

    assert p.target is not None
    allocc = find(tree, p.target, lo, hi)
    if not allocc:
        if p.query == "count" and p.count == 0:
            return True, _not_found(tree, p.target, lo, hi), {"count": (0, "")}
        if p.query == "outside":
            return True, _not_found(tree, p.target, lo, hi), {}
        return False, _not_found(tree, p.target, lo, hi), {"count": (0, "")} if p.query == "count" else {}
    _clean(allocc)
    desc = "the " + p.target.describe()
    where = ", ".join(c.describe() for c in p.within)
    lines_of = ", ".join(str(o.line) for o in allocc[:8]) + (" ..." if len(allocc) > 8 else "")

    if p.query in ("inside", "outside"):
        if p.nth is not None:
            if p.nth >= len(allocc):
                return False, f"only {len(allocc)} occurrence(s) of {desc} in lines {lo}-{hi}; nth {p.nth} is not there", {}
            allocc = [allocc[p.nth]]
            lines_of = str(allocc[0].line)
        ins = [o for o in allocc if all(_inside(o, c) for c in p.within)]
        if p.query == "inside":
            out = [o for o in allocc if o not in ins]
            if out:
                return False, f"{desc} at line {out[0].line} is not within {where}", {"occurrences": (len(allocc), "")}
            return True, f"every {desc[4:]} in lines {lo}-{hi} (line {lines_of}) is within {where}", {"occurrences": (len(allocc), "")}
        if ins:
            return False, f"{desc} at line {ins[0].line} is within {where}", {"occurrences": (len(allocc), "")}
        return True, f"no {desc[4:]} in lines {lo}-{hi} (line {lines_of}) is within {where}", {"occurrences": (len(allocc), "")}

    if p.query == "count":
        ins = [o for o in allocc if all(_inside(o, c) for c in p.within)]
        where = f" within {where}" if p.within else ""
        return (len(ins) == p.count, f"{len(ins)} occurrence(s) of {desc} in lines {lo}-{hi}{where} "
                f"(line {', '.join(str(o.line) for o in ins[:8]) or '-'}), the claim says {p.count}",
                {"count": (len(ins), "")})

    scoped = [o for o in allocc if all(_inside(o, c) for c in p.within)]
    if not scoped:
        return False, f"{desc} occurs in lines {lo}-{hi} but not within {where}", {}
    if p.nth is not None:
        if p.nth >= len(scoped):
            return False, f"only {len(scoped)} occurrence(s) of {desc} in lines {lo}-{hi}; nth {p.nth} is not there", {}
        scoped = [scoped[p.nth]]
    lines_of = ", ".join(str(o.line) for o in scoped[:8]) + (" ..." if len(scoped) > 8 else "")
    if p.nth is not None:
        desc4 = f"{desc[4:]} number {p.nth} (0-based)"
    else:
        desc4 = desc[4:]

    if p.query == "condition":
        want = tokens(p.condition or "")
        kinds = ("loop",) if p.of == "loop" else ("then", "else")
        for o in scoped:
            sc = next((s for s in o.scopes if s.kind in kinds), None)
            if sc is None:
                return False, f"{desc} at line {o.line} is in no {p.of}", {}
            ok = (sc.text == want) if p.exact else _has_run(sc.text, want)
            if not ok:
                return False, (f"the innermost {p.of} around {desc} at line {o.line} has condition "
                               f"{' '.join(sc.text)!r}, not {p.condition!r}"), {}
        return True, f"the innermost {p.of} around every {desc4} (line {lines_of}) has condition {p.condition!r}", {}

    if p.query == "result":
        for o in scoped:
            if o.used != p.used:
                return False, f"the return value of {desc} at line {o.line} is {'used' if o.used else 'discarded'}", {}
        state = "used" if p.used else "discarded"
        return True, f"the return value of every {desc4} in lines {lo}-{hi} (line {lines_of}) is {state}", {}

    # argument
    for o in scoped:
        if p.keyword is not None:
            got = o.keywords.get(p.keyword)
            label = f"keyword {p.keyword}"
        else:
            lst = o.targs if p.template else o.args
            got = lst[p.arg] if p.arg is not None and p.arg < len(lst) else None
            label = f"{'template ' if p.template else ''}argument {p.arg}"
        if got is None:
            return False, f"{desc} at line {o.line} has no {label}", {}
        ok = got == tokens(p.value) if p.value is not None else _has_run(got, tokens(p.contains or ""))
        if not ok:
            return False, f"{label} of {desc} at line {o.line} is {' '.join(got)!r}, not {p.value or p.contains!r}", {}
    return True, (f"{'template ' if p.template else ''}{'keyword ' + p.keyword if p.keyword else 'argument ' + str(p.arg)} of "
                  f"every {desc4} in lines {lo}-{hi} (line {lines_of}) "
                  f"{'is' if p.value is not None else 'contains'} {p.value or p.contains!r}"), {}


def parse_file(path: str, blob: bytes) -> Tree | None:
    """The tree of a pinned file by its suffix; None for a file kind this verifier does not parse."""
    if path.endswith(PY_SUFFIXES):
        return parse_py(blob)
    if path.endswith(CPP_SUFFIXES):
        return parse_cpp(blob)
    return None


def read_blob(anchor: dict[str, Any], ctx: Context) -> bytes | Outcome | None:
    """The anchored file at its pin, read as source.lines reads it (a skipped Outcome when no copy is reachable)."""
    clone = ctx.clones.get(anchor["source"])
    if clone:
        repo = GitRepo(clone)
        try:
            return repo.read(anchor["sha"], anchor["path"])
        finally:
            repo.close()
    if os.environ.get("KB_ONLINE"):
        src = ctx.sources[anchor["source"]]
        return fetch_raw(src.get("url") or src.get("repo") or "", anchor["sha"], anchor["path"])
    return Outcome(verdict="skipped", reason=f"no local clone of {anchor['source']} configured (offline)")


@verifier("source.structure", kind="source-check", params=StructureParams,
          requires=Requirements(git_source=True, online_fallback=True), timeout_s=60, own_verdict=True)
def source_structure(p: StructureParams, ctx: Context) -> Outcome:
    """Parse the anchored file at its pin and answer one structural query about the cited lines."""
    anchors = ctx.claim["anchors"]
    if not 0 <= p.anchor < len(anchors) or not anchors[p.anchor].get("path") or not anchors[p.anchor].get("sha"):
        return Outcome(verdict="error", reason=f"anchor {p.anchor} is not a repository anchor with sha and path")
    anchor = anchors[p.anchor]
    path = anchor["path"]
    got = read_blob(anchor, ctx)
    if isinstance(got, Outcome):
        return got
    if got is None:
        return Outcome(measurements={"hash_ok": (False, ""), "holds": (False, "")},
                       verdict="refutes", reason=f"{path} does not exist at {anchor['sha'][:12]}")
    blob = got
    if anchor.get("lines"):
        lo, hi = anchor["lines"]
        span = lines_sha256(blob, lo, hi)
        if span is None:
            return Outcome(measurements={"hash_ok": (False, ""), "holds": (False, "")},
                           verdict="refutes", reason=f"lines {lo}-{hi} run past the end of {path}")
        hash_ok = span[0] == anchor.get("sha256")
    else:
        lo, hi, hash_ok = 1, blob.count(b"\n") + 1, True
    tree = parse_file(path, blob)
    if tree is None:
        return Outcome(verdict="error", reason=f"{path}: source.structure parses {', '.join(CPP_SUFFIXES + PY_SUFFIXES)} files")
    env = {"parser": tree.parser, "lines": [lo, hi]}
    if not hash_ok:
        return Outcome(measurements={"hash_ok": (False, ""), "holds": (False, "")}, verdict="refutes", environment=env,
                       reason=f"lines {lo}-{hi} of {path} hash to {span[0][:12]}, not the recorded {str(anchor.get('sha256'))[:12]}")
    if tree.parser == "python-ast" and tree.errors:
        a, _, msg = tree.errors[0]
        return Outcome(measurements={"hash_ok": (True, "")}, verdict="inconclusive", environment=env,
                       reason=f"{path} does not parse as Python (line {a}: {msg[:200]})")
    try:
        holds, why, extra = answer(p, tree, lo, hi)
    except Inconclusive as exc:
        return Outcome(measurements={"hash_ok": (True, "")}, verdict="inconclusive", environment=env,
                       reason=f"{path} ({tree.parser}): {exc}; the syntax tree cannot decide here")
    return Outcome(measurements={"hash_ok": (True, ""), "holds": (holds, ""), **extra},
                   verdict="supports" if holds else "refutes", environment=env,
                   reason=f"{path} ({tree.parser}): {why}")
