#!/usr/bin/env bash
# One device call's work on the lent H200, after the staging (README "GPU checks"), from the checkout's root.
#
#   scripts/device-run.sh [GROUP...]     each GROUP is a `./dev gpu` group ("fa1", "hardware large-d rubin", ...)
#
# Environment:
#   CPUV="ID ..."     CPU-class verifiers to run first on the host's 16 cores (code.launch-trace, code.build-sass,
#                     toolchain.sass, ...): they need the pinned builds or the clones that only this host has staged
#   CLAIMS="ID ..."   single claims to verify (every check this host can run)
#   PYTEST="FILE ..." test files to run here (tests/test_gpu_negative_controls.py, ...)
#   OUT               the device's return folder: everything new under evidence/ and the logs go to
#                     $OUT/evidence.tgz (one file: a call brings back at most 8)
#
# Nothing here stages packages or builds pins: that is scripts/stage-pinned.sh (--install, --build) and
# ../shared/gpu/README.md's wheel install, done once per machine.
set -uo pipefail
export PYTHONPATH="$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
logs=$(mktemp -d /tmp/device-run.XXXX)
mark=$(mktemp); sleep 1  # files newer than this are this call's
start=$(date +%s)
if [ -n "${CPUV:-}" ]; then
  args=(); for v in $CPUV; do args+=(--verifier "$v"); done
  "$py" -m kb verify "${args[@]}" -j 12 --fail-on never > "$logs/cpuv.log" 2>&1
  echo "device-run: CPU verifiers exited $? after $(( $(date +%s) - start )) s" | tee -a "$logs/summary.txt"
fi
if [ -n "${CLAIMS:-}" ]; then
  args=(); for c in $CLAIMS; do args+=(--claim "$c"); done
  "$py" -m kb verify "${args[@]}" --fail-on never > "$logs/claims.log" 2>&1
  echo "device-run: claims exited $? after $(( $(date +%s) - start )) s" | tee -a "$logs/summary.txt"
fi
if [ $# -gt 0 ]; then
  # ./dev gpu copies to $OUT file by file; this call returns one archive instead.
  OUT= ./dev gpu "$@" > "$logs/gpu.log" 2>&1
  echo "device-run: ./dev gpu $* exited $? after $(( $(date +%s) - start )) s" | tee -a "$logs/summary.txt"
  grep "dev gpu: group" "$logs/gpu.log" | tee -a "$logs/summary.txt"
fi
if [ -n "${PYTEST:-}" ]; then
  # shellcheck disable=SC2086
  "$py" -m pytest -q -p no:cacheprovider $PYTEST > "$logs/pytest.log" 2>&1
  echo "device-run: pytest exited $? after $(( $(date +%s) - start )) s" | tee -a "$logs/summary.txt"
  tail -3 "$logs/pytest.log" | tee -a "$logs/summary.txt"
fi
if [ -n "${OUT:-}" ]; then
  find evidence -name '*.json' -newer "$mark" > "$logs/new-evidence.txt"
  echo "device-run: $(wc -l < "$logs/new-evidence.txt") new evidence files" | tee -a "$logs/summary.txt"
  tar czf "$OUT/evidence.tgz" -T "$logs/new-evidence.txt" -C "$logs" .
fi
