#!/usr/bin/env bash
# CuPy for the H200 (which reaches no package registry), for the gpu.teaching-cupy checks (teach.mog9.*).
#
#   scripts/stage-cupy.sh                 here: cupy-cuda13x for CPython 3.12 manylinux x86_64 and the runtime
#                                         dependencies its METADATA names (numpy aside: the H200 has it), split
#                                         into parts below one device call's carry limit, into .gpu/cupy/:
#                                           .gpu/cupy/part00/  cupy wheel part 00, the small wheels, SHA256SUMS
#                                           .gpu/cupy/part01/  cupy wheel part 01 (and so on)
#   scripts/stage-cupy.sh --install DIR   on the H200, once every part folder's files are in DIR (one device
#                                         call per part: carry .gpu/cupy/partNN, `mkdir -p DIR; cp
#                                         .gpu/cupy/partNN/* DIR/`): joins the parts, checks every file against
#                                         SHA256SUMS and installs the wheels into /tmp/site (no index, no deps).
#
# The wheel is 69 MB, over one call's 64 MiB carry; PART_MIB (default 34) sets the part size. CuPy 14 needs
# cuda-pathfinder (it locates NVRTC and the CUDA headers) and no longer fastrlock; the dependency list is read
# from the wheel, not assumed. Environment: CUPY_VERSION (14.2.0), CUPY_WHEELS (a folder already holding the
# cupy wheel: no download), CUPY_OUT (.gpu/cupy), SITE (/tmp/site), PIP (python -m pip used here).
set -euo pipefail
version=${CUPY_VERSION:-14.2.0}
out=${CUPY_OUT:-.gpu/cupy}
site=${SITE:-/tmp/site}
part_mib=${PART_MIB:-34}
wheel="cupy_cuda13x-$version-cp312-cp312-manylinux2014_x86_64.whl"
target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)

if [ "${1:-}" = "--install" ]; then
  dir=${2:?usage: stage-cupy.sh --install DIR}
  cd "$dir"
  cat "$wheel".part* > "$wheel"
  sha256sum -c --quiet SHA256SUMS
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheel" $(ls *.whl | grep -v "^$wheel\$")
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
    'import cupy, numpy; print("cupy", cupy.__version__, "numpy", numpy.__version__, "from", cupy.__file__)'
  exit 0
fi

pip=${PIP:-/work/main/.venv/bin/python -m pip}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -n "${CUPY_WHEELS:-}" ] && [ -f "$CUPY_WHEELS/$wheel" ]; then
  cp "$CUPY_WHEELS/$wheel" "$tmp/"
else
  $pip download -q --no-deps "${target[@]}" -d "$tmp" "cupy-cuda13x==$version"
fi
# Runtime requirements (no extras, no numpy) from the wheel's own METADATA.
deps=$(unzip -p "$tmp/$wheel" "cupy_cuda13x-$version.dist-info/METADATA" |
       sed -n 's/^Requires-Dist: *//p' | grep -v ';' | grep -vi '^numpy' | tr -d ' ' || true)
for d in $deps; do $pip download -q --no-deps "${target[@]}" -d "$tmp" "$d"; done
rm -rf "$out"; mkdir -p "$out/part00"
(cd "$tmp" && sha256sum *.whl > SHA256SUMS && split -b "${part_mib}M" -d -a 2 "$wheel" "$wheel.part")
for f in "$tmp/$wheel".part*; do
  n=${f##*.part}; mkdir -p "$out/part$n"; mv "$f" "$out/part$n/"
done
for f in "$tmp"/*.whl; do [ "$(basename "$f")" = "$wheel" ] || mv "$f" "$out/part00/"; done
mv "$tmp/SHA256SUMS" "$out/part00/"
echo "dependencies: ${deps:-none}"; du -sh "$out"/part*; cat "$out/part00/SHA256SUMS"
