"""The package layout follows the data flow, and imports only run downward (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import kb

KB = Path(kb.__file__).resolve().parent

# What each top-level unit of kb/ may import from kb (besides itself). The order is the
# data flow: records -> (pinned text) -> verify -> index -> export, audit beside them;
# cli sits on top. A new edge here is a design decision: record it in ARCHITECTURE.md.
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "config": set(),
    "render": set(),
    "fsutil": set(),
    "http": set(),
    "records": {"config"},
    "pinned": {"config", "records"},
    "verify": {"config", "fsutil", "http", "records", "pinned"},
    "audit": {"config", "http", "records", "pinned", "render"},
    "index": {"config", "records", "pinned", "verify", "audit.state"},
    "export": {"config", "fsutil", "http", "records", "pinned", "index"},
    "maintain": {"config", "fsutil", "render", "records", "pinned", "verify", "index", "audit"},
    "cli": {"config", "fsutil", "http", "render", "records", "pinned", "verify", "index", "audit", "export",
            "maintain"},
    "__main__": {"cli"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _unit(path: Path) -> str:
    return path.relative_to(KB).parts[0].removesuffix(".py")


def test_every_unit_is_known():
    units = {_unit(p) for p in KB.rglob("*.py")}
    assert units <= set(ALLOWED), f"new top-level unit(s) {units - set(ALLOWED)}: give them a row in ALLOWED"


def test_no_import_runs_upward_and_kb_never_imports_verifiers():
    bad = []
    for path in sorted(KB.rglob("*.py")):
        unit = _unit(path)
        for line, mod in _imports(path):
            where = f"{path.relative_to(KB.parent)}:{line}"
            if mod == "verifiers" or mod.startswith("verifiers."):
                bad.append(f"{where} imports {mod}: the registry is handed a path instead")
                continue
            if not mod.startswith("kb."):
                continue
            target = mod.split(".")[1]
            if target == unit:
                continue
            allowed = ALLOWED[unit]
            if target not in allowed and ".".join(mod.split(".")[1:3]) not in allowed:
                bad.append(f"{where}: {unit} imports {mod}")
    assert not bad, "\n".join(bad)


def test_no_file_name_prefix_stands_in_for_a_package():
    # Two or more modules of one folder sharing a `prefix_` is a family that wants a package.
    families: dict[tuple[Path, str], list[str]] = defaultdict(list)
    for path in KB.rglob("*.py"):
        m = re.match(r"([a-z]+)_", path.stem)
        if m and not path.stem.startswith("__"):
            families[(path.parent, m.group(1))].append(path.name)
    assert {k: v for k, v in families.items() if len(v) > 1} == {}
    # ...and no top-level module is named for a stage that has a package.
    stages = {p.name for p in KB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    flat = {p.stem for p in KB.glob("*.py")}
    assert not {f for f in flat for s in stages if f.startswith(s)}, flat


def test_legacy_verifier_names_are_not_used_inside_kb():
    # kb/__init__ keeps old names importable for verifier modules only; kb itself uses the owners.
    for path in KB.rglob("*.py"):
        for line, mod in _imports(path):
            assert mod not in kb.LEGACY_VERIFIER_API, f"{path}:{line} uses legacy name {mod}"


def test_legacy_names_resolve_to_the_owning_module():
    import importlib

    for old, new in kb.LEGACY_VERIFIER_API.items():
        assert importlib.import_module(old) is importlib.import_module(new)


VERIFIERS = KB.parent / "verifiers"
# verifiers/ holds packages by kind of evidence; only the trust boundary, shared by all, sits at the top.
VERIFIER_PACKAGES = {"cpu", "source", "pinned", "gpu"}


def test_verifiers_are_packages_by_kind_of_evidence():
    top = {p.name for p in VERIFIERS.iterdir() if p.suffix == ".py"}
    assert top == {"__init__.py", "trust.py"}, f"verifier modules belong in a package: {sorted(top)}"
    pkgs = {p.name for p in VERIFIERS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert pkgs == VERIFIER_PACKAGES, f"packages {sorted(pkgs)}: a new kind of evidence is a design decision"
    families: dict[tuple[Path, str], list[str]] = defaultdict(list)
    for path in VERIFIERS.rglob("*.py"):
        m = re.match(r"([a-z]+)_", path.stem)
        if m and "snippets" not in path.parts:
            families[(path.parent, m.group(1))].append(path.name)
    assert {k: v for k, v in families.items() if len(v) > 1} == {}
