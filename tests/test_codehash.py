"""A verifier's code hash follows what it executes, not where it lives (kb.verify.codehash)."""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from pathlib import Path

from kb.verify.codehash import CodeHasher

HELPERS = '''
"""Helpers."""


def scale(x):
    """Twice x."""
    return 2 * x  # doubling


def unrelated():
    return 0
'''

VERIFIER = '''
"""Verifiers."""
from {helpers_import} import helpers as h

HASH_FILES = ["kernel.cu"]
LIMIT = 3


def check(x):
    """A verifier."""
    return h.scale(x) + LIMIT


def other(x):
    return x
'''

KERNEL = "// a kernel\n__global__ void k(int *p) {\n  p[0] = 1;  /* one */\n}\n"


def _package(tmp: Path, *, moved: bool = False, helpers: str = HELPERS, verifier: str = VERIFIER,
             kernel: str = KERNEL) -> tuple[str, str]:
    """Write a throwaway verifier package; the verifier module sits in a subpackage when `moved`."""
    name = f"kbh_{uuid.uuid4().hex[:8]}"
    root = tmp / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helpers.py").write_text(textwrap.dedent(helpers))
    where = root / "sub" if moved else root
    if moved:
        where.mkdir()
        (where / "__init__.py").write_text("")
    (where / "checks.py").write_text(textwrap.dedent(verifier).format(helpers_import=name))
    (where / "kernel.cu").write_text(kernel)
    sys.path.insert(0, str(tmp))
    importlib.invalidate_caches()
    mod = f"{name}.sub.checks" if moved else f"{name}.checks"
    importlib.import_module(mod)
    return name, mod


def _hash(tmp: Path, fn: str = "check", **kw: object) -> str:
    pkg, mod = _package(tmp, **kw)  # type: ignore[arg-type]
    return CodeHasher(pkg).hash_function(mod, fn)


def test_a_move_a_comment_or_a_docstring_keeps_the_hash(tmp_path: Path) -> None:
    base = _hash(tmp_path)
    assert _hash(tmp_path, moved=True) == base
    recommented = HELPERS.replace("# doubling", "# times two").replace('"""Twice x."""', '"""Doubles."""')
    assert _hash(tmp_path, helpers=recommented) == base
    assert _hash(tmp_path, kernel=KERNEL.replace("/* one */", "// the first").replace("  p", "    p")) == base


def test_what_the_verifier_executes_changes_the_hash(tmp_path: Path) -> None:
    base = _hash(tmp_path)
    # The negative controls: a helper it calls, a constant it reads, a file it declares, its own body.
    assert _hash(tmp_path, helpers=HELPERS.replace("2 * x", "3 * x")) != base
    assert _hash(tmp_path, verifier=VERIFIER.replace("LIMIT = 3", "LIMIT = 4")) != base
    assert _hash(tmp_path, kernel=KERNEL.replace("p[0] = 1", "p[0] = 2")) != base
    assert _hash(tmp_path, verifier=VERIFIER.replace("+ LIMIT", "- LIMIT")) != base


def test_an_unrelated_definition_leaves_the_hash(tmp_path: Path) -> None:
    base = _hash(tmp_path)
    assert _hash(tmp_path, helpers=HELPERS.replace("return 0", "return 1")) == base
    assert _hash(tmp_path, verifier=VERIFIER.replace("return x\n", "return -x\n")) == base
    # ... while the verifier that does use it moves.
    assert _hash(tmp_path, "other") != _hash(tmp_path, "other", verifier=VERIFIER.replace("return x\n", "return -x\n"))


def test_the_real_package_hashes_every_verifier() -> None:
    from kb.verify.registry import load_verifiers

    root = Path(__file__).resolve().parents[1] / "verifiers"
    reg = load_verifiers(root)
    hashes = {k: v.code_hash() for k, v in reg.items()}
    assert all(len(h) == 16 or h.startswith("v:") for h in hashes.values())
    # The GPU verifiers that run kb's pinned builds cover the ABI and the loader, not the builder's compile steps:
    # a build records its own key and library hash in every run (verifiers.pinned.build.provenance).
    parts = CodeHasher("verifiers").parts(reg["gpu.kernel-run"].func.__module__, reg["gpu.kernel-run"].func.__qualname__)
    assert "verifiers.pinned.build:load" in parts and "verifiers.pinned.build:KbAttnArgs" in parts
    assert "verifiers.pinned.build:build" not in parts and "verifiers.pinned.build:compile_one" not in parts


def test_the_tree_text_is_the_same_on_every_python() -> None:
    import ast
    import sys

    from kb.verify.codehash import dump

    tree = ast.parse("def f():\n    pass\n")
    # Python 3.12's ast.dump of this tree, written out: the hash made on the H200 (3.12) must equal this machine's.
    want = ("Module(body=[FunctionDef(name='f', args=arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], "
            "defaults=[]), body=[Pass()], decorator_list=[], type_params=[])], type_ignores=[])")
    assert dump(tree) == want
    if sys.version_info[:2] == (3, 12):
        assert ast.dump(tree) == want


def test_hashes_from_many_threads_match_one_thread() -> None:
    """The runner hashes in its lane threads: eight threads give the serial hashes.

    CPython 3.11's ast.parse once raised SystemError ("AST constructor recursion depth mismatch") in a lane
    during the suite, which lost that run's evidence; registry.code_hash now hashes under a lock. The race is
    rare, so this test guards the result (threaded equals serial), not the race itself.
    """
    from concurrent.futures import ThreadPoolExecutor

    from kb.verify import registry as R

    root = Path(__file__).resolve().parent.parent / "verifiers"
    specs = list(R.load_verifiers(root).values())
    R._HASHES.clear()
    R._HASHERS.clear()
    with ThreadPoolExecutor(max_workers=8) as ex:
        threaded = list(ex.map(lambda s: s.code_hash(), specs * 2))
    R._HASHES.clear()
    R._HASHERS.clear()
    serial = [s.code_hash() for s in specs]
    assert threaded == serial * 2
