#!/usr/bin/env bash
# The three teaching repositories at their pins, for a machine without the clones (the H200).
#
#   scripts/stage-teaching.sh            here: one git pack per repository, only the pinned commit's own
#                                        objects (commit, trees, blobs; no history), into .gpu/teaching/
#                                        (about 0.6 MB in all). The clones are the ones kb.local.toml names.
#   scripts/stage-teaching.sh --install  on the H200, from the checkout's root after the lead's stage.sh:
#                                        a bare repository per pack under /tmp/teach/, a ref at the pin, and
#                                        the three clones added to kb.local.toml's [clones] (kept entries stay).
#
# What the teaching checks read from a clone is `git cat-file -e SHA:PATH` and `git archive SHA`, and both
# work on a pack of the pinned commit alone; `--install` checks the archive's tree hash against the pin.
# Pins come from sources/teaching.yaml (the pins' one source of truth); pack names carry source id and SHA.
# Environment: PY (python with PyYAML here, default /work/main/.venv/bin/python), TEACH_OUT (.gpu/teaching),
# TEACH_ROOT (/tmp/teach), KB_LOCAL (kb.local.toml).
set -euo pipefail
out=${TEACH_OUT:-.gpu/teaching}
root=${TEACH_ROOT:-/tmp/teach}
local_toml=${KB_LOCAL:-kb.local.toml}
py=${PY:-/work/main/.venv/bin/python}
[ -x "$py" ] || py=python3

gitdir() { if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi; }

if [ "${1:-}" != "--install" ]; then
  [ -f sources/teaching.yaml ] || { echo "run from the checkout's root (sources/teaching.yaml not found)" >&2; exit 2; }
  rm -rf "$out"; mkdir -p "$out"
  # "source-id sha clone" per teaching source: every pin of every repo source in sources/teaching.yaml.
  "$py" - "$local_toml" > "$out/pins.txt" <<'EOF'
import sys, tomllib, yaml
clones = tomllib.load(open(sys.argv[1], "rb")).get("clones", {})
for s in yaml.safe_load(open("sources/teaching.yaml"))["sources"]:
    if s.get("kind") != "repo":
        continue
    if s["id"] not in clones:
        sys.exit(f"kb.local.toml [clones] has no {s['id']} (sources/teaching.yaml)")
    for sha in s.get("pins", {}).values():
        print(s["id"], sha, clones[s["id"]])
EOF
  while read -r id sha clone; do
    g=$(gitdir "$clone")
    git --git-dir="$g" cat-file -e "$sha^{commit}"
    # -n1: the pinned commit and every object its tree reaches, none of its ancestors'.
    name=$(git --git-dir="$g" rev-list --objects -n1 "$sha" | git --git-dir="$g" pack-objects -q "$out/tmp")
    mv "$out/tmp-$name.pack" "$out/$id@$sha.pack"; mv "$out/tmp-$name.idx" "$out/$id@$sha.idx"
    git --git-dir="$g" rev-parse "$sha^{tree}" > "$out/$id@$sha.tree"
  done < "$out/pins.txt"
  rm "$out/pins.txt"
  du -sh "$out"; ls "$out"
  exit 0
fi

# --install (on the H200)
ls "$out"/*@*.pack > /dev/null
mkdir -p "$root"
entries=()
for p in "$out"/*@*.pack; do
  b=$(basename "$p" .pack); id=${b%@*}; sha=${b#*@}
  repo="$root/$id.git"
  rm -rf "$repo"; git init -q --bare "$repo"
  cp "$p" "${p%.pack}.idx" "$repo/objects/pack/"
  git --git-dir="$repo" update-ref "refs/kb/pin" "$sha"
  want=$(cat "$out/$b.tree")
  got=$(git --git-dir="$repo" rev-parse "$sha^{tree}")
  [ "$got" = "$want" ] || { echo "$id: tree $got at $sha, expected $want" >&2; exit 1; }
  # Every blob the tree names is present (the archive would fail otherwise).
  git --git-dir="$repo" archive --format=tar "$sha" > /dev/null
  entries+=("$id=$repo")
done
python3 - "$local_toml" "${entries[@]}" <<'EOF'
import os, sys, tomllib
path, entries = sys.argv[1], dict(e.split("=", 1) for e in sys.argv[2:])
data = tomllib.load(open(path, "rb")) if os.path.exists(path) else {}
data.setdefault("clones", {}).update(entries)

def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    sys.exit(f"{path}: cannot rewrite a {type(v).__name__} value")

lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
for table, body in data.items():
    if isinstance(body, dict):
        lines += ["", f"[{table}]"] + [f'"{k}" = {value(v)}' for k, v in body.items()]
tmp = path + ".tmp"
open(tmp, "w").write("\n".join(lines).lstrip() + "\n")
os.replace(tmp, path)
EOF
echo "teaching clones staged under $root:"; sed -n '/^\[clones\]/,/^\[/p' "$local_toml"
