"""The child interpreter of `code.py-exec`: runs pinned Python in the sandbox and answers JSON.

Started by verifiers/pinned/compiled.py as `python -I -S pyexec_child.py` inside
`kb.verify.sandbox` (no network, read-only files, limits). It reads one JSON
task on stdin: the code (kb's snippets and the pinned functions), a file name
for tracebacks, the call expression (checked by verifiers/trust.py at
validation) and the grid points; it prints one JSON list, a result per point.
It imports nothing from kb.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types


def _plain(v: object) -> object:
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [_plain(getattr(v, f.name)) for f in dataclasses.fields(v)]
    raise TypeError(f"unsupported result type {type(v).__name__}")


def main() -> None:
    """Run the task on stdin."""
    task = json.loads(sys.stdin.read())
    # A real module, so that decorators that look their class's module up (dataclass) work.
    module = types.ModuleType("kb_pinned_code")
    sys.modules[module.__name__] = module
    exec(compile(task["code"], task["filename"], "exec"), module.__dict__)  # pinned code, in the sandbox
    call = compile(task["call"], "<call>", "eval")
    out = [_plain(eval(call, dict(module.__dict__), dict(pt))) for pt in task["points"]]
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
