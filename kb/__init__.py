"""kb: a verified knowledge base of FlashAttention claims.

The package is laid out by stage of the data flow (see docs/ARCHITECTURE.md):
records -> index -> verify -> evidence -> status -> export, with audit and
pinned-text reading beside them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__version__ = "0.1.0"

# Verifier modules (a project's `verifiers/` directory) were written against the flat
# layout. Their code hash covers their source, so rewriting their import lines would
# make every recorded run stale, GPU runs included, for no change in behaviour. Until
# each verifier is next edited, the old verifier-facing names resolve to the modules
# that now own them. Nothing inside kb uses these names (tests/test_layout.py).
LEGACY_VERIFIER_API = {
    "kb.registry": "kb.verify.registry",
    "kb.expect": "kb.verify.expect",
    "kb.models": "kb.records.models",
    "kb.gitsrc": "kb.pinned.git",
    "kb.notes": "kb.pinned.notes",
    "kb.hw": "kb.verify.hw",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve a legacy verifier-facing module name to the module that owns it now."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for the legacy names only; everything else is left to the normal finders."""
        if fullname in LEGACY_VERIFIER_API:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The owning module itself, so both names share one module object."""
        return importlib.import_module(LEGACY_VERIFIER_API[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the owning module is already executed."""


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.append(_Alias())
