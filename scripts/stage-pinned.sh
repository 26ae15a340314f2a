#!/usr/bin/env bash
# The pinned revisions' build inputs, for a GPU host without the clones (the lent H200), and their build there.
#
#   scripts/stage-pinned.sh            here: .gpu/packs/, one git pack per repository (flash-attention, cutlass) of
#                                      only the objects the builds and launch traces read: each pinned commit, all
#                                      its trees, and the blobs under csrc/ and hopper/ (flash-attention) or
#                                      include/ and tools/util/include/ at each cutlass submodule commit.
#                                      A few MB in all; the clones are the ones kb.local.toml names.
#   scripts/stage-pinned.sh --install  on the GPU host, from the checkout's root: a bare repository per pack under
#                                      /tmp/pins/, a ref at every pinned commit, and kb.local.toml naming them
#                                      (other [clones] entries are kept).
#   scripts/stage-pinned.sh --build    on the GPU host after --install: the three pins, the large-d pin's forward
#                                      (verifiers/pinned/larged.py) and the probes, built in parallel
#                                      (python -m verifiers.pinned.build, 6 jobs each; ~5 min on 16 cores),
#                                      FA1 with its packed-entry library (python -m verifiers.pinned.varlen);
#                                      REVS="fa1-v1.0.9 probes" builds only those; a variant's name
#                                      (verifiers/pinned/variants.py, e.g. fa3-2024-08-nosched, or
#                                      verifiers/pinned/owners.py's fa3-2024-08-owner) derives and builds it.
#
# `git archive SHA -- PATH` of a path inside the pack gives the same bytes as the full clone, and the gitlink
# entries (the cutlass submodule commits) are part of the csrc/ trees. Pins come from verifiers/pinned/build.py
# (REVISIONS), the builds' one source of truth. Environment: PY (python with kb's requirements, default
# /work/main/.venv/bin/python here, python3 there), PACKS (.gpu/packs), PIN_ROOT (/tmp/pins), KB_LOCAL (kb.local.toml).
set -euo pipefail
out=${PACKS:-.gpu/packs}
root=${PIN_ROOT:-/tmp/pins}
local_toml=${KB_LOCAL:-kb.local.toml}

gitdir() { if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi; }

case "${1:-}" in
"")
  py=${PY:-/work/main/.venv/bin/python}
  [ -f verifiers/pinned/build.py ] || { echo "run from the checkout's root" >&2; exit 2; }
  rm -rf "$out"; mkdir -p "$out"
  # "sha cutlass_path cutlass_dir..." per revision, and the two clones.
  PYTHONPATH=$PWD "$py" - "$local_toml" > "$out/pins.txt" <<'EOF'
import sys, tomllib
import verifiers.pinned.larged  # noqa: F401  (registers the large-d build in REVISIONS)
from verifiers.pinned.build import REVISIONS
clones = tomllib.load(open(sys.argv[1], "rb")).get("clones", {})
for name in ("flash-attention", "cutlass"):
    if name not in clones:
        sys.exit(f"kb.local.toml [clones] has no {name}")
    print("clone", name, clones[name])
for r in REVISIONS.values():
    print("rev", r.name, r.sha, r.cutlass_path, *r.cutlass_dirs)
EOF
  fa=$(gitdir "$(awk '$1=="clone" && $2=="flash-attention" {print $3}' "$out/pins.txt")")
  cu=$(gitdir "$(awk '$1=="clone" && $2=="cutlass" {print $3}' "$out/pins.txt")")
  : > "$out/fa.list"; : > "$out/cutlass.list"; : > "$out/refs.txt"
  while read -r kind name sha cpath cdirs; do
    [ "$kind" = rev ] || continue
    git --git-dir="$fa" cat-file -e "$sha^{commit}"
    # Every tree of the commit (git archive reads them all to match its pathspec; they are small), and the
    # blobs under the build's paths.
    { echo "$sha"; git --git-dir="$fa" rev-parse "$sha^{tree}"
      git --git-dir="$fa" ls-tree -r -t "$sha" | awk '$2=="tree" {print $3}'
      git --git-dir="$fa" ls-tree -r "$sha" -- csrc hopper | awk '$2=="blob" {print $3}'; } >> "$out/fa.list"
    echo "flash-attention $name $sha" >> "$out/refs.txt"
    csha=$(git --git-dir="$fa" ls-tree "$sha" -- "$cpath" | awk '{print $3}')
    git --git-dir="$cu" cat-file -e "$csha^{commit}"
    # shellcheck disable=SC2086
    { echo "$csha"; git --git-dir="$cu" rev-parse "$csha^{tree}"
      git --git-dir="$cu" ls-tree -r -t "$csha" | awk '$2=="tree" {print $3}'
      git --git-dir="$cu" ls-tree -r "$csha" -- $cdirs | awk '$2=="blob" {print $3}'; } >> "$out/cutlass.list"
    echo "cutlass $name-cutlass $csha" >> "$out/refs.txt"
  done < "$out/pins.txt"
  sort -u "$out/fa.list" | git --git-dir="$fa" pack-objects -q "$out/flash-attention" > /dev/null
  sort -u "$out/cutlass.list" | git --git-dir="$cu" pack-objects -q "$out/cutlass" > /dev/null
  rm "$out/fa.list" "$out/cutlass.list" "$out/pins.txt"
  du -sh "$out"; ls "$out"
  ;;
--install)
  mkdir -p "$root"
  for repo in flash-attention cutlass; do
    g="$root/$repo.git"; rm -rf "$g"; git init -q --bare "$g"
    for p in "$out/$repo"-*.pack; do cp "$p" "${p%.pack}.idx" "$g/objects/pack/"; done
  done
  while read -r repo name sha; do
    git --git-dir="$root/$repo.git" update-ref "refs/pins/$name" "$sha"
  done < "$out/refs.txt"
  py=${PY:-python3}
  "$py" - "$local_toml" "$root" <<'EOF'
import sys, tomllib
from pathlib import Path
path, root = Path(sys.argv[1]), sys.argv[2]
clones = tomllib.loads(path.read_text()).get("clones", {}) if path.exists() else {}
clones.update({"flash-attention": f"{root}/flash-attention.git", "cutlass": f"{root}/cutlass.git"})
path.write_text("[clones]\n" + "".join(f'{k} = "{v}"\n' for k, v in sorted(clones.items())))
print(path.read_text())
EOF
  ;;
--build)
  py=${PY:-python3}
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  start=$(date +%s); pids=()
  revs=${REVS:-fa1-v1.0.9 fa2-v2.0.0 fa3-2024-08 fa3-larged-2026-08 probes}
  for rev in $revs; do
    if [ "$rev" = fa1-v1.0.9 ]; then
      # FA1's dense library, then the packed-entry library linked from the same unit objects.
      "$py" -m verifiers.pinned.varlen -j 6 > "/tmp/build-$rev.log" 2>&1 & pids+=($!)
    elif [ "$rev" = fa3-larged-2026-08 ]; then
      # Registered outside build.py's table (verifiers/pinned/larged.py): its own entry point builds it.
      "$py" -m verifiers.pinned.larged -j 6 > "/tmp/build-$rev.log" 2>&1 & pids+=($!)
    elif "$py" -c 'import sys; import verifiers.pinned.owners; from verifiers.pinned.variants import VARIANTS; sys.exit(sys.argv[1] not in VARIANTS)' "$rev"; then
      # kb's variant of a pin (verifiers/pinned/variants.py): derived from the base's objects here, then built.
      "$py" -m verifiers.pinned.variants "$rev" -j 6 > "/tmp/build-$rev.log" 2>&1 & pids+=($!)
    else
      "$py" -m verifiers.pinned.build --rev "$rev" -j 6 > "/tmp/build-$rev.log" 2>&1 & pids+=($!)
    fi
  done
  code=0; for pid in "${pids[@]}"; do wait "$pid" || code=1; done
  for rev in $revs; do echo "== $rev"; tail -4 "/tmp/build-$rev.log"; done
  echo "stage-pinned: builds ended with $code after $(( $(date +%s) - start )) s"
  exit $code
  ;;
*)
  echo "usage: scripts/stage-pinned.sh [--install | --build]" >&2; exit 2 ;;
esac
