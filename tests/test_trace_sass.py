"""The traced FA3 variant's machine code: its clock reads bracket what the trace says they bracket.

A clock read can only time an interval if the compiler left the interval's work between the reads. This test
compiles the traced fp16 d128 unit (kb's variant fa3-2024-08-trace, about a minute on 2 cores) and reads the
SASS of the kernel the paper's shape runs (non-causal, cluster 2, static persistent scheduler): of its seven
clock reads, the issue turn must follow the scheduler's BAR.SYNC, S-ready the wait for one outstanding WGMMA
group, PV-done the wait for none, and every MUFU.EX2 between the first and the last read must sit between
S-ready and softmax-done. Needs nvcc, cuobjdump and the clones (kb.local.toml); skipped without them.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from kb.verify.hw import find_tool
from verifiers.pinned import build as pinned_build
from verifiers.pinned import variants
from verifiers.pinned.compiled import gitlink


def test_trace_clock_reads_bracket_their_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if not nvcc or not cuobjdump:
        pytest.skip("needs nvcc and cuobjdump")
    try:
        clone, cut = pinned_build.pinned_clones()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    v = variants.variant("fa3-2024-08-trace")
    rev = pinned_build.revision(v.name)
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path / "build"))
    variants.derive(v, clone)
    repo = variants._repo(clone)
    src, cut_src = tmp_path / "src", tmp_path / "cut"
    cut_commit = gitlink(str(repo), v.sha, rev.cutlass_path)
    for git_dir, sha, dirs, dest in ((repo, v.sha, ["hopper"], src), (Path(cut), cut_commit, list(rev.cutlass_dirs), cut_src)):
        gd = git_dir / ".git" if (git_dir / ".git").exists() else git_dir
        data = subprocess.run(["git", f"--git-dir={gd}", "archive", sha, "--", *dirs], capture_output=True,
                              check=True).stdout
        with tarfile.open(fileobj=BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
    unit = src / "hopper" / rev.units["fwd:fp16:128"]
    obj = tmp_path / "unit.o"
    flags = [f for f in rev.flags if not f.startswith("--ptxas-options")]
    subprocess.run([nvcc, "-gencode", rev.gencode, *flags, f"-I{src / 'hopper'}",
                    *[f"-I{cut_src / d}" for d in rev.cutlass_dirs], "-c", str(unit), "-o", str(obj)],
                   check=True, capture_output=True, timeout=900)
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    funcs = re.split(r"\n\s+Function : ", sass)
    # non-causal (Is_causal false: ...ELb0ENS_29StaticPersistent...), cluster 2 (the 7th traits argument)
    kernel = next(f for f in funcs if "Li176ELi12ELi2ELb0ELi2E" in f.split("\n")[0]
                  and "StaticPersistentTileScheduler" in f.split("\n")[0])
    ins = [ln for ln in kernel.split("\n") if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    at = {k: [i for i, ln in enumerate(ins) if re.search(p, ln)] for k, p in {
        "clock": r"CS2R R\d+, SR_CLOCKLO", "ex2": r"MUFU\.EX2", "bar": r"BAR\.SYNC",
        "wait1": r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1", "wait0": r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0"}.items()}
    clk = at["clock"]
    assert len(clk) == len(variants.TRACE_EVENTS) == 7
    start, k_ready, turn, issued, s_ready, soft_done, pv_done = clk
    assert any(k_ready < b < turn for b in at["bar"])  # the scheduler barrier sits before the issue-turn read
    assert any(issued < w < s_ready for w in at["wait1"])  # S ready: one WGMMA group may still be in flight
    assert any(soft_done < w < pv_done for w in at["wait0"])  # PV done: none in flight
    loop_ex2 = [i for i in at["ex2"] if start < i < pv_done]
    assert loop_ex2 and all(s_ready < i < soft_done for i in loop_ex2)
