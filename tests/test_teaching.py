"""code.teaching-run: kb's fp64 reference, the grid, and a broken teaching implementation that must refute.

The negative control is made at test time from the pinned PeTeRr0 tree (never committed here): the
online-softmax rescale of the FA1 PyTorch forward is removed, the result committed to a temporary git
repository, and kb verify runs the same check against the intact pin and the broken copy.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import tarfile
from pathlib import Path

import pytest

from kb.config import load_config
from tests.conftest import NOTE_ANCHOR, REPO, commit_files, kb_subprocess, trusting, write_claims

torch = pytest.importorskip("torch")

from verifiers.pinned import teaching, teaching_child  # noqa: E402 - after the torch gate

PETERR0 = "peterr0-flashattention-pytorch"
PETERR0_SHA = "353e9c379b42965dac584c6b444de757adea0ed4"
RESCALE = "o_block = torch.exp(m_i - m_new)[:, None] * o_block + torch.matmul(p, v_block)"


# --------------------------------------------------------------------------- the reference itself


@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_autograd_in_fp64(causal: bool) -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(2, 3, 37, 24, generator=g, dtype=torch.float64) for _ in range(4))
    ref = teaching_child.reference(q, k, v, causal, do)
    qa, ka, va = (x.clone().requires_grad_(True) for x in (q, k, v))
    mask = torch.ones(37, 37, dtype=torch.bool).triu(1) if causal else None
    o = torch.nn.functional.scaled_dot_product_attention(qa, ka, va, attn_mask=None if mask is None else ~mask)
    o.backward(do)
    assert float((ref["o"] - o.detach()).abs().max()) < 1e-12
    for name, t in (("dq", qa), ("dk", ka), ("dv", va)):
        assert float((ref[name] - t.grad).abs().max()) < 1e-12, name
    s = q @ k.transpose(-1, -2) / math.sqrt(24)
    if causal:
        s = s.masked_fill(mask, float("-inf"))
    assert float((ref["lse"] - torch.logsumexp(s, -1)).abs().max()) < 1e-12


def test_reference_causal_first_row_sees_only_itself() -> None:
    q, k, v = (torch.randn(1, 1, 5, 4, dtype=torch.float64) for _ in range(3))
    o = teaching_child.reference(q, k, v, True)["o"]
    assert torch.allclose(o[0, 0, 0], v[0, 0, 0], atol=1e-15)


def test_reference_detects_a_wrong_scale() -> None:
    # A reference that forgot 1/sqrt(d) would differ by far more than any tolerance used in the claims.
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 20, 16, generator=g, dtype=torch.float64) for _ in range(3))
    wrong = torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    assert float((teaching_child.reference(q, k, v, False)["o"] - wrong).abs().max()) > 1e-2


def test_grid_is_the_product_in_a_fixed_order() -> None:
    p = teaching.TeachingParams(entry="peterr0-fa1-torch", seqlens=[1, 100], head_dims=[32, 64], causal=[False, True],
                                tiles=[None, [64, 32]])
    pts = teaching.grid(p)
    assert len(pts) == 16 and pts[0] == {"n": 1, "d": 32, "causal": False, "tile": None, "batch": 1, "heads": 2}
    assert pts == teaching.grid(p)


def test_params_refuse_unknown_entries_and_bad_tiles() -> None:
    with pytest.raises(ValueError):
        teaching.TeachingParams(entry="os-system")
    with pytest.raises(ValueError):
        teaching.TeachingParams(entry="peterr0-fa1-torch", tiles=[[0, 64]])


# --------------------------------------------------------------------------- negative control


def _pinned_tree(tmp_path: Path) -> dict[str, str]:
    cfg = load_config(REPO)
    clone = cfg.clones.get(PETERR0) or (str(cfg.clone_cache / f"{PETERR0}.git") if cfg.clone_cache else "")
    if not clone or not Path(clone).exists():
        pytest.skip(f"needs a local clone of {PETERR0} (kb sources fetch, or kb.local.toml)")
    gitdir = Path(clone) / ".git" if (Path(clone) / ".git").exists() else Path(clone)
    res = subprocess.run(["git", f"--git-dir={gitdir}", "archive", "--format=tar", PETERR0_SHA, "src"],
                         capture_output=True, check=True)
    files = {}
    with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".py"):
                files[m.name] = tar.extractfile(m).read().decode()  # type: ignore[union-attr]
    return files


def _check_claim(cid: str, source: str, sha: str) -> dict:
    return {
        "id": cid, "statement": "The FA1 PyTorch forward of this copy computes exact attention (a test).",
        "generation": "FA1", "phase": "forward", "topics": ["numerics"], "label": "source-backed",
        "anchors": [dict(NOTE_ANCHOR), {"source": source, "sha": sha, "path": "src/fa1/torch/impl.py"}],
        "checks": [{"verifier": "code.teaching-run",
                    "params": {"anchor": 1, "entry": "peterr0-fa1-torch", "seqlens": [1, 100, 200, 300], "head_dims": [32, 64],
                               "causal": [False, True], "tol": 1e-4},
                    "expect": {"failing_inputs": {"equals": 0}}}],
        "cause": {"kind": "source", "why": "A deliberately broken copy for the negative control of the test suite."},
    }


def test_broken_online_softmax_refutes_and_the_intact_copy_holds(project: Path, tmp_path: Path) -> None:
    files = _pinned_tree(tmp_path)
    impl = files["src/fa1/torch/impl.py"]
    assert impl.count(RESCALE) == 1, "the pinned forward's rescale line moved: update the negative control"
    intact = commit_files(tmp_path / "intact", files, "intact copy of the pin")
    broken_files = dict(files)
    # Remove the online-softmax rescale: earlier tiles are no longer scaled down when the running max rises.
    broken_files["src/fa1/torch/impl.py"] = impl.replace(RESCALE, "o_block = o_block + torch.matmul(p, v_block)")
    broken = commit_files(tmp_path / "broken", broken_files, "rescale removed")
    (project / "sources" / "teach-test.yaml").write_text(
        "sources:\n"
        f"  - id: intactrepo\n    kind: repo\n    url: https://example.invalid/intact\n    pins:\n      main: {intact}\n"
        f"  - id: brokenrepo\n    kind: repo\n    url: https://example.invalid/broken\n    pins:\n      main: {broken}\n")
    intact_claim = _check_claim("test.teach.intact", "intactrepo", intact)
    intact_claim.pop("cause")
    write_claims(project, "teach", [intact_claim, _check_claim("test.teach.broken", "brokenrepo", broken)])
    env = {**trusting("intactrepo", intact), "KB_CLONE_INTACTREPO": str(tmp_path / "intact"),
           "KB_CLONE_BROKENREPO": str(tmp_path / "broken"), "KB_BUILD_CACHE": str(tmp_path / "build")}
    env["KB_TRUST_PINS"] += f",brokenrepo@{broken}"
    res = kb_subprocess(project, "verify", "--json", "--claim", "test.teach.intact", "--claim", "test.teach.broken",
                        env=env, timeout=900)
    assert res.stdout, res.stderr
    summary = json.loads(res.stdout)
    assert summary["errors"] == [], summary["errors"]
    assert summary["refuted"] == ["test.teach.broken"]
    show = json.loads(kb_subprocess(project, "show", "test.teach.broken", "--json").stdout)
    meas = show["runs"][0]["measurements"]
    first = meas["first_failing"]["value"]
    # n = 1 and n = 100 fit one 128-key tile and have nothing to rescale: the first failing input is the
    # first with two key tiles, where the first tile's sums were never scaled down to the new maximum.
    assert (first["n"], first["d"], first["causal"]) == (200, 32, False) and first["max_abs_err"] > 1e-2
    assert meas["failing_inputs"]["value"] > 0
    ok = json.loads(kb_subprocess(project, "show", "test.teach.intact", "--json").stdout)["runs"][0]["measurements"]
    assert ok["failing_inputs"]["value"] == 0 and ok["max_abs_err"]["value"] < 1e-4
