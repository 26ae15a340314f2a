"""The README's tour, produced from real runs: `python docs/tour.py --write` refreshes it, `--check` diffs it.

Each entry is a shell command as a reader would type it (`kb ...`), how many
output lines the README keeps, and whether it needs the pinned clones
(`kb sources fetch`): index-only commands give the same output on every
machine with the committed files and evidence; the audit and repin examples
need the clones and are checked only where they exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- tour:begin -->", "<!-- tour:end -->"
WIDTH = 150  # the README cuts long lines here

# (command, lines kept, needs the pinned clones)
TOUR: list[tuple[str, int, bool]] = [
    ("kb claims --generation FA2 --topic determinism --status verified 2>/dev/null", 8, False),
    ("kb show fa1.occ.d128-smem-bound-three-corrected 2>/dev/null | grep -v '^  [0-9]\\{4\\}'", 30, False),
    ("kb claims --rests-on refuted", 14, False),
    ("kb verify -g fa1 -t determinism 2>&1 >/dev/null", 12, True),
    ("kb claims --strength restated -g fa4 --tsv 2>/dev/null | cut -f1,5,9", 6, False),
    ("kb audit --no-write 2>&1 | grep -E '^(source|flash-attention|fa-notes)|audited|offline audit|exit 3'", 17, True),
    ("kb repin flash-attention fa4-2026-07-28 --to 0251105a2fb1 2>&1 | grep -E 'changed upstream|advanced,|dry run'", 9,
     True),
]


def run(command: str) -> str:
    """Run one tour command in the repository, `kb` being this interpreter's kb; the README's cut of its output.

    The `kb verify` example shows a run that reuses committed evidence. Were any of its checks due to run
    (evidence gone stale), running it would write evidence into the checkout: it is then not run, and the
    output says so (the README comparison fails until the evidence is refreshed).
    """
    # Piped, as here, a claim table is one line per claim; COLUMNS would wrap it (kb.render.fitted_table),
    # so the tour leaves it out and cuts the lines to WIDTH itself.
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "PYTHONPATH": str(ROOT)}
    if command.startswith("kb verify "):
        import json
        import shlex

        plan = subprocess.run([sys.executable, "-m", "kb", *shlex.split(command.split(" 2>")[0])[1:], "--plan", "--json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        due = [r["check"] for r in json.loads(plan.stdout or "[]") if r["action"] == "run"]
        if due or plan.returncode:
            return f"(not run: {len(due)} check(s) would run, e.g. {due[:3]}; refresh the evidence first)\n"
    shell = f'kb() {{ "{sys.executable}" -m kb "$@"; }}; {command}'
    out = subprocess.run(["bash", "-c", shell], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600).stdout
    return out


def excerpt(command: str, output: str, keep: int) -> str:
    """`$ command`, then at most `keep` lines of output cut to WIDTH, then `...` if anything was left out."""
    lines = output.rstrip("\n").split("\n") if output.strip() else []
    shown = [ln if len(ln) <= WIDTH else ln[: WIDTH - 1] + "…" for ln in lines[:keep]]
    return "\n".join([f"$ {command}", *shown, *(["..."] if len(lines) > keep else [])])


def block(entries: list[tuple[str, int, bool]] = TOUR) -> str:
    """The whole tour block as the README holds it."""
    return "\n\n".join(excerpt(cmd, run(cmd), keep) for cmd, keep, _ in entries)


def readme_block(text: str) -> str:
    """The tour block currently in the README (between the markers, inside the code fence)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip().removeprefix("```").removesuffix("```").strip("\n")


def main(argv: list[str]) -> int:
    """--write refreshes README.md; --check (default) exits 1 and prints a diff when it drifted."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    fresh = block()
    if "--write" in argv:
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        readme.write_text(text[:start] + "\n```\n" + fresh + "\n```\n" + text[end:])
        return 0
    if readme_block(text) == fresh:
        return 0
    import difflib

    sys.stdout.writelines(difflib.unified_diff(readme_block(text).splitlines(True), fresh.splitlines(True),
                                               "README.md", "fresh run"))
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

