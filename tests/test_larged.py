"""The large-d pin's runnable build and its GPU checks: what can be checked without a GPU.

The runs are on the H200 (larged.ld.both-traverse-all-kv, larged.hw.p-publish-cost,
larged.math.better-tc-utilization, and the negative controls neg.gpu.larged-* in
tests/test_gpu_negative_controls.py). Here: the revision is served by the pinned builder without entering
build.py's own table (the older builds' code hash stays), parameters are bounded, the checks are planned for
sm_90 only, the harness stales these checks' evidence and no other's, a missing build is a skip naming the
command, and the fp64 reference drops exactly the tile it is asked to.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kb.verify.codehash import CodeHasher
from kb.verify.registry import load_verifiers, requirements_for
from verifiers.gpu import larged as gpu_larged
from verifiers.pinned import build as pinned_build
from verifiers.pinned import larged as pinned_larged

ROOT = Path(__file__).resolve().parents[1]


def test_the_revision_is_served_by_the_builder_but_not_written_into_build_py() -> None:
    rev = pinned_build.revision(pinned_larged.NAME)
    assert rev is pinned_larged.REVISION
    assert rev.sha == "d7e4dba3e568106b0f1b6323b07c1272f53679b3"
    # The pin named in sources/repos.yaml, at the same SHA.
    import yaml

    repos = yaml.safe_load((ROOT / "sources/repos.yaml").read_text())["sources"]
    pins = next(s for s in repos if s["id"] == "flash-attention")["pins"]
    assert pins[rev.pin] == rev.sha
    assert pinned_larged.NAME not in (ROOT / "verifiers/pinned/build.py").read_text()


@pytest.mark.parametrize("kw", [{"batch": 0}, {"seqlen_k": 1 << 15, "seqlen_q": 1 << 15},
                                {"repeats": 0}, {"kv_tile": 0}, {"kv_tile": 1024}, {"drop_tile": 8}])
def test_forward_parameters_are_bounded(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        gpu_larged.LargedParams(**kw)


def test_profile_parameters_are_bounded() -> None:
    with pytest.raises(ValueError):
        gpu_larged.ProfileParams(batch=64, heads=64, seqlen_q=8192, seqlen_k=8192)
    with pytest.raises(ValueError):
        gpu_larged.LargedParams(config="256")  # the build holds the 64x512 and 128 units only


def test_checks_are_planned_for_sm90_only() -> None:
    reg = load_verifiers(ROOT / "verifiers")
    for name in ("gpu.larged-fwd", "gpu.larged-profile"):
        req = requirements_for(reg[name], {})
        assert (req.cuda, req.min_cc, req.max_cc) == (True, 90, 90), name


def test_the_harness_is_in_the_code_hash_of_these_checks_only() -> None:
    hasher = CodeHasher("verifiers")
    for fn in ("larged_fwd", "larged_profile"):
        parts = set(hasher.parts(gpu_larged.__name__, fn))
        assert {"file:fa3_larged.cu", "file:kb_attn_abi.h"} <= parts, fn
    from verifiers.gpu import attention, varlen

    assert "file:fa3_larged.cu" not in set(hasher.parts(attention.__name__, "kernel_run"))
    assert "file:fa3_larged.cu" not in set(hasher.parts(varlen.__name__, "varlen_rows"))


def test_missing_build_is_a_skip_reason_naming_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path))
    pinned_build._LOADED.pop(pinned_larged.NAME, None)
    why = gpu_larged._unavailable()
    assert why and f"--rev {pinned_larged.NAME}" in why


def test_the_reference_leaves_out_exactly_the_named_tile() -> None:
    torch = pytest.importorskip("torch")
    p = gpu_larged.LargedParams(config="128", batch=1, heads=1, seqlen_q=4, seqlen_k=8, kv_tile=2)
    g = torch.Generator().manual_seed(0)
    x = {"q": torch.randn(1, 4, 1, 128, generator=g), "k": torch.randn(1, 8, 1, 128, generator=g)}
    # V is zero except on K/V rows 2 and 3 (tile 1): leaving that tile out must give exactly zero.
    v = torch.zeros(1, 8, 1, 128)
    v[:, 2:4] = 1.0
    x["v"] = v
    assert float(gpu_larged._reference(p, x, 1).abs().max()) == 0.0
    assert float(gpu_larged._reference(p, x, 0).abs().min()) > 0.0
    full = gpu_larged._reference(p, x, None)
    assert 0.0 < float(full.min()) and float(full.max()) < 1.0


def _clones() -> tuple[str, str] | None:
    try:
        return pinned_build.pinned_clones()
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_clones() is None, reason="needs the flash-attention clone (kb sources fetch)")
def test_the_units_exist_at_the_pin() -> None:
    import subprocess

    clone, _ = _clones()  # type: ignore[misc]
    rev = pinned_larged.REVISION
    for f in rev.units.values():
        subprocess.run(["git", "--git-dir", _gitdir(clone), "cat-file", "-e", f"{rev.sha}:{rev.src_dir}/{f}"],
                       check=True)


def _gitdir(path: str) -> str:
    p = Path(path)
    return str(p / ".git") if (p / ".git").exists() else str(p)


@pytest.mark.skipif(not shutil.which("nm"), reason="needs nm")
def test_a_build_here_exports_what_the_loader_binds() -> None:
    folder = pinned_build.build_root() / pinned_larged.NAME
    if not (folder / "current").exists():
        pytest.skip(f"no build of {pinned_larged.NAME} here (python -m verifiers.pinned.larged)")
    import subprocess

    lib = folder / (folder / "current").read_text().strip() / "libkb.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    for fn in ("kb_larged_fwd", "kb_fwd", "kb_bwd", "kb_workspace", "kb_units", "kb_last_error",
               "kb_philox_increment"):
        assert f" T {fn}\n" in syms, fn


def test_metrics_are_chosen_by_what_the_installed_ncu_lists() -> None:
    listed = {n.split(".")[0] for names in gpu_larged.ROLES.values() for n in names[1:]}
    chosen = gpu_larged.choose_metrics(listed)
    assert chosen == {role: names[1] for role, names in gpu_larged.ROLES.items()}
    chosen = gpu_larged.choose_metrics(listed | {gpu_larged.ROLES["tensor_util_pct"][0].split(".")[0]})
    assert chosen["tensor_util_pct"] == gpu_larged.ROLES["tensor_util_pct"][0]
    with pytest.raises(ValueError, match="smem_st_bytes"):
        gpu_larged.choose_metrics(listed - {n.split(".")[0] for n in gpu_larged.ROLES["smem_st_bytes"]})


def test_every_stsm_of_a_build_here_stores_512_bytes_per_warp() -> None:
    """gpu.larged-profile counts 512 bytes per warp-level STSM: true only while the build's STSMs are all .M88.4."""
    import re
    import subprocess

    from kb.verify.hw import find_tool

    folder = pinned_build.build_root() / pinned_larged.NAME
    tool = find_tool("cuobjdump")
    if not (folder / "current").exists() or not tool:
        pytest.skip(f"needs a build of {pinned_larged.NAME} here and cuobjdump")
    lib = folder / (folder / "current").read_text().strip() / "libkb.so"
    sass = subprocess.run([tool, "-sass", str(lib)], capture_output=True, text=True, check=True).stdout
    forms = set(re.findall(r"\bSTSM(?:\.[A-Z0-9]+)*", sass))
    assert forms == {"STSM.16.M88.4"}, forms
    assert gpu_larged.STSM_BYTES == 4 * 8 * 8 * 2 == 512
