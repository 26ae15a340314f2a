"""A verifier's code hash: its own code and what it uses, not where the code lives.

Evidence goes stale when the code that produced it changes. The hash covers
the verifier function and, transitively, every top-level definition of the
verifier package it refers to (helpers in its module, names imported from
other modules of the package), plus the non-Python files a module declares in
`HASH_FILES` (snippets, harness sources, a child interpreter) when any of that
module's definitions is used.

Each definition is hashed as its syntax tree with docstrings removed and the
package's own import statements dropped, and the hash is taken over the set of
those digests, never over module names or paths. So a comment or docstring edit,
reformatting, or moving a module to another package (with its imports updated)
leaves the hash as it was, while an edit to anything the verifier executes
changes it. An edit to an unrelated verifier of the same module does not.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

Symbol = tuple[str, str]  # (module name, top-level name); name "*" is the whole module


@dataclass
class _Module:
    name: str
    path: Path
    defs: dict[str, list[ast.stmt]] = field(default_factory=dict)  # top-level name -> statements binding it
    loose: list[ast.stmt] = field(default_factory=list)  # top-level statements that bind nothing (side effects)
    aliases: dict[str, Symbol] = field(default_factory=dict)  # local name -> what it imports from the package
    hash_files: list[str] = field(default_factory=list)


# Fields that newer Pythons added to nodes, with the value they take for code that does not use them.
# dump() writes them on every version, so a hash made under Python 3.11 equals one made under 3.12 (where
# ast.dump prints type_params=[]), and 3.13's new defaults for ast.dump do not matter either.
_ADDED_FIELDS: dict[str, tuple[str, ...]] = {
    "FunctionDef": ("type_params",), "AsyncFunctionDef": ("type_params",), "ClassDef": ("type_params",),
}


def dump(node: object) -> str:
    """A syntax tree as text, the same on every supported Python (ast.dump's 3.12 format, no positions)."""
    if isinstance(node, ast.AST):
        cls = type(node)
        fields = list(node._fields) + [f for f in _ADDED_FIELDS.get(cls.__name__, ()) if f not in node._fields]
        args = []
        for name in fields:
            value = getattr(node, name, [] if name in _ADDED_FIELDS.get(cls.__name__, ()) else None)
            if value is None and getattr(cls, name, ...) is None:
                continue
            args.append(f"{name}={dump(value)}")
        return f"{cls.__name__}({', '.join(args)})"
    if isinstance(node, list):
        return "[" + ", ".join(dump(x) for x in node) + "]"
    return repr(node)


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def _bound_names(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


class CodeHasher:
    """Hashes verifier functions of the package `package` (e.g. "verifiers") by what they use."""

    def __init__(self, package: str) -> None:
        self.package = package
        self._modules: dict[str, _Module | None] = {}
        self._digests: dict[Symbol, str] = {}

    def _own(self, name: str | None) -> bool:
        return bool(name) and (name == self.package or name.startswith(self.package + "."))

    def _is_module(self, name: str) -> bool:
        if name in self._modules:
            return self._modules[name] is not None
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def module(self, name: str) -> _Module | None:
        """The parsed module `name` of the package (None when it has no Python source)."""
        if name in self._modules:
            return self._modules[name]
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if path is None:
            spec = importlib.util.find_spec(name)
            path = spec.origin if spec is not None else None
        if path is None or not str(path).endswith(".py"):
            self._modules[name] = None
            return None
        tree = ast.parse(Path(path).read_text(), str(path))
        _strip_docstrings(tree)
        m = _Module(name, Path(path))
        pkg = name if Path(path).name == "__init__.py" else name.rpartition(".")[0]
        # Imports anywhere in the module (function-level ones included) name what the code refers to.
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                    base = f"{parent}.{base}" if base else parent
                if not self._own(base):
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    m.aliases[a.asname or a.name] = (sub, "*") if self._is_module(sub) else (base, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if self._own(a.name):
                        # `import verifiers.x.y` binds `verifiers`; `import ... as z` binds z to the module.
                        m.aliases[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0],
                                                                      "*")
        _DropOwnImports(self._own, pkg).visit(tree)
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass):
                continue
            bound = _bound_names(stmt)
            if not bound:
                m.loose.append(stmt)
            for n in bound:
                m.defs.setdefault(n, []).append(stmt)
                if n == "HASH_FILES":
                    m.hash_files = self._hash_files_of(name)
        self._modules[name] = m
        return m

    def _hash_files_of(self, name: str) -> list[str]:
        mod = sys.modules.get(name)
        files = getattr(mod, "HASH_FILES", None) if mod is not None else None
        return list(files or [])

    def _refs(self, m: _Module, nodes: list[ast.stmt]) -> set[Symbol]:
        """What these statements refer to: names of m, names and modules imported from the package."""
        out: set[Symbol] = set()
        for stmt in nodes:
            bases = {id(n.value) for n in ast.walk(stmt) if isinstance(n, ast.Attribute)
                     and isinstance(n.value, ast.Name) and m.aliases.get(n.value.id, ("", ""))[1] == "*"}
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and id(node) in bases:
                    continue  # `g.helper`: the attribute below, not all of g
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id in m.aliases and m.aliases[node.value.id][1] == "*":
                    mod_name = m.aliases[node.value.id][0]
                    sub = f"{mod_name}.{node.attr}"
                    out.add((sub, "*") if self._is_module(sub) else (mod_name, node.attr))
                elif isinstance(node, ast.Name):
                    if node.id in m.aliases:
                        target = m.aliases[node.id]
                        # A bare module name used as a value (not an attribute base) takes the whole module.
                        out.add(target)
                    elif node.id in m.defs:
                        out.add((m.name, node.id))
        return out

    def _closure(self, roots: set[Symbol]) -> set[Symbol]:
        seen: set[Symbol] = set()
        todo = list(roots)
        while todo:
            sym = todo.pop()
            if sym in seen:
                continue
            seen.add(sym)
            m = self.module(sym[0])
            if m is None:
                continue
            if sym[1] == "*":
                nodes = [s for stmts in m.defs.values() for s in stmts] + m.loose
            else:
                nodes = m.defs.get(sym[1], [])
            todo += [s for s in self._refs(m, nodes) if s not in seen]
        return seen

    def _digest(self, sym: Symbol) -> str:
        if sym in self._digests:
            return self._digests[sym]
        m = self.module(sym[0])
        h = hashlib.sha256()
        if m is not None:
            nodes = ([s for stmts in m.defs.values() for s in stmts] + m.loose) if sym[1] == "*" \
                else m.defs.get(sym[1], [])
            seen_ids: set[int] = set()
            for stmt in nodes:
                if id(stmt) in seen_ids:
                    continue
                seen_ids.add(id(stmt))
                h.update(dump(stmt).encode() + b"\0")
        else:
            h.update(b"<no source>" + sym[0].encode())
        self._digests[sym] = h.hexdigest()
        return self._digests[sym]

    def parts(self, module: str, qualname: str) -> dict[str, str]:
        """What the hash of `module.qualname` covers: each definition (module:name) and file, with its digest."""
        out = {f"{m}:{n}": self._digest((m, n)) for m, n in self._closure({(module, qualname.split(".")[0])})}
        for mod_name in sorted({k.split(":")[0] for k in out}):
            m = self.module(mod_name)
            for rel in (m.hash_files if m is not None else []):
                f = Path(rel) if Path(rel).is_absolute() else m.path.parent / rel  # type: ignore[union-attr]
                out[f"file:{Path(rel).name}"] = hashlib.sha256(file_text(f)).hexdigest()
        return out

    def hash_function(self, module: str, qualname: str) -> str:
        """The code hash of the top-level function `qualname` of `module` (16 hex digits)."""
        top = qualname.split(".")[0]
        syms = self._closure({(module, top)})
        parts = {self._digest(s) for s in syms}
        for mod_name in sorted({s[0] for s in syms}):
            m = self.module(mod_name)
            if m is None:
                continue
            # The module's side effects at import (registration aside) run before any verifier of it.
            parts |= {hashlib.sha256(dump(s).encode()).hexdigest() for s in m.loose
                      if not _is_trivial(s)}
            for rel in m.hash_files:
                f = Path(rel) if Path(rel).is_absolute() else m.path.parent / rel
                data = file_text(f)
                # Keyed by the file's name and content, not its folder: a moved harness keeps its hash.
                parts.add(hashlib.sha256(Path(rel).name.encode() + b"\0" + data).hexdigest())
        return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:16]


_C_LIKE = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".helpers"}
# A C/C++ comment, or a string/char literal (kept as is, so `"//"` inside a string is not a comment).
_C_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def file_text(path: Path) -> bytes:
    """What of a declared file counts for the hash: Python without docstrings, C/C++ without comments.

    Blank lines and runs of blanks are folded too, so re-indenting or re-commenting a harness keeps its hash;
    any other file counts byte for byte.
    """
    if not path.exists():
        return b"<missing>"
    raw = path.read_bytes()
    if path.suffix == ".py":
        try:
            tree = ast.parse(raw)
        except SyntaxError:
            return raw
        _strip_docstrings(tree)
        return dump(tree).encode()
    if path.suffix in _C_LIKE:
        text = raw.decode("utf-8", "replace")
        text = _C_TOKEN.sub(lambda mt: " " if mt.group(0)[0] == "/" else mt.group(0), text)
        # Lines stay lines (a preprocessor directive ends at its newline); blanks inside a line fold.
        lines = (re.sub(r"[ \t]+", " ", ln).strip() for ln in text.splitlines())
        return "\n".join(ln for ln in lines if ln).encode()
    return raw


class _DropOwnImports(ast.NodeTransformer):
    """Replaces imports from the verifier package by `pass`: where a module lives is not what it does."""

    def __init__(self, own: object, pkg: str) -> None:
        self.own, self.pkg = own, pkg

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return ast.Pass() if any(self.own(a.name) for a in node.names) else node  # type: ignore[operator]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return ast.Pass() if node.level or self.own(node.module) else node  # type: ignore[operator]


def _is_trivial(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Pass | ast.Expr) and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call))
