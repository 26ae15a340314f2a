"""The HTTP audit's GitHub request budget per pin, computed from a local clone (no network).

Per repository: 2 requests to resolve the head. Per pin: 1 compare; then the
contents of each cited file on both sides (pin and head) when the compare
listing names it as changed, or of every cited file when the listing is
incomplete (GitHub stops at 300 files; a pin off head's history lists
merge-base..head). Later audits answer compare and contents from the on-disk
cache (both ends are SHAs), so only the head requests are spent again.

    python bench/bench_audit_requests.py [HEAD_REF]
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kb.config import load_config  # noqa: E402
from kb.index.store import open_index  # noqa: E402
from kb.pinned.clones import clone_paths  # noqa: E402


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    cfg = load_config(ROOT)
    index = open_index(cfg)
    corpus = index.corpus()
    clones = clone_paths(cfg, corpus)
    head_ref = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    total = 0
    for sid, src in sorted(corpus.sources.items()):
        if src.kind != "repo" or not src.url or "github.com" not in src.url or sid not in clones:
            continue
        gitdir = clones[sid]
        gitdir = str(Path(gitdir) / ".git") if (Path(gitdir) / ".git").exists() else gitdir
        head = git(gitdir, "rev-parse", head_ref).strip()
        cited: dict[str, set[str]] = defaultdict(set)
        for c in corpus.claims.values():
            for a in c.anchors:
                if a.source == sid and a.sha and a.path:
                    cited[a.sha].add(a.path)
        if not cited:
            continue  # the audit only visits sources that claims cite
        names = {v: k for k, v in src.pins.items()}
        repo_total = 2
        print(f"{sid} (head {head[:12]}): 2 requests to resolve the head")
        for sha, paths in sorted(cited.items(), key=lambda kv: names.get(kv[0], kv[0])):
            changed = set(git(gitdir, "diff", "--name-only", "--no-renames", sha, head).split())
            ancestor = subprocess.run(["git", f"--git-dir={gitdir}", "merge-base", "--is-ancestor", sha, head]).returncode == 0
            capped = len(changed) >= 300 or not ancestor
            files = paths if capped else paths & changed
            n = 1 + 2 * len(files)
            repo_total += n
            why = ("listing capped at 300 files" if len(changed) >= 300 else "pin off head's history") if capped \
                else f"{len(files)} of {len(paths)} cited files changed"
            print(f"  {names.get(sha, sha[:12]):<22} {len(changed):5d} files changed upstream; {why}: "
                  f"1 compare + {2 * len(files)} contents = {n}")
        print(f"  {sid}: {repo_total} requests cold")
        total += repo_total
    print(f"total: {total} GitHub requests for a cold HTTP audit; warm: 2 per repository")


if __name__ == "__main__":
    main()
