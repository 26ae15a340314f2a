"""Checks that compile or run the pinned code on a CPU (in the sandbox), and kb's builds of the pins for the GPU."""

# The large-d pin's build registers itself with the pinned builder (build.REVISIONS) on import; importing it with
# the package makes every entry point (python -m verifiers.pinned.build, code.build-sass's revision list,
# scripts/stage-pinned.sh) know it, while build.py's own table, and the code hash of the older builds' checks,
# stay as they are.
from verifiers.pinned import larged as _larged  # noqa: F401  (registration)
