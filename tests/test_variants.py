"""kb's variants of a pinned build (verifiers/pinned/variants.py) on a small real git repository: edits that must
match once, a derived commit that is the same on every machine and differs from the base only where edited."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import commit_files, git
from verifiers.pinned import build as pinned_build
from verifiers.pinned import variants

HEADER = """#pragma once
template <int kHeadDim, int kBits>
struct Mainloop {
    static constexpr bool UseBarrier =
        kBits == 8 ? kHeadDim >= 128
                   : kHeadDim <= 128;
};
"""


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sha_recorded: str = "0" * 40) -> tuple[Path, str, variants.Variant]:
    repo = tmp_path / "up"
    base_sha = commit_files(repo, {"src/mainloop.hpp": HEADER, "src/other.h": "int x;\n"}, "base")
    base = dataclasses.replace(pinned_build.revision("fa3-2024-08"), name="test-base", sha=base_sha)
    monkeypatch.setitem(pinned_build.REVISIONS, "test-base", base)
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path / "build"))
    line = HEADER.split("\n")[5]
    v = variants.Variant(name="test-base-nobar", base="test-base", about="test", sha=sha_recorded, edits=(
        variants.Edit("src/mainloop.hpp", 6, hashlib.sha256(line.encode()).hexdigest(), "replace",
                      "                   : false;", "no barrier for 16-bit types"),
        variants.Edit("src/mainloop.hpp", 2, hashlib.sha256(HEADER.split("\n")[1].encode()).hexdigest(),
                      "insert_after", "// kb: inserted", "an inserted line")))
    return repo, base_sha, v


def test_derived_commit_is_recorded_reproducible_and_edits_only_the_named_file(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    repo, base_sha, v = _setup(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="derive") as err:
        variants.derive(v, str(repo))
    derived = str(err.value).split("derive ")[1].split(",")[0]
    v = dataclasses.replace(v, sha=derived)
    assert variants.derive(v, str(repo)) == derived
    # another build root (another machine's) derives the same commit
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path / "build2"))
    assert variants.derive(v, str(repo)) == derived
    kb_repo = tmp_path / "build2" / "pinned" / "variants.git"
    names = subprocess.run(["git", f"--git-dir={kb_repo}", "diff", "--name-only", base_sha, derived],
                           capture_output=True, text=True, check=True).stdout.split()
    assert names == ["src/mainloop.hpp"]
    text = subprocess.run(["git", f"--git-dir={kb_repo}", "show", f"{derived}:src/mainloop.hpp"],
                          capture_output=True, text=True, check=True).stdout
    assert ": false;" in text and "kHeadDim <= 128" not in text and "kHeadDim >= 128" in text
    assert text.split("\n")[2] == "// kb: inserted" and len(text.split("\n")) == len(HEADER.split("\n")) + 1
    # the clone itself was not written to: the derived commit lives only in kb's repository
    assert subprocess.run(["git", "-C", str(repo), "cat-file", "-e", derived], capture_output=True).returncode != 0
    assert git(repo, "rev-parse", "HEAD") == base_sha


def test_an_edit_whose_line_drifted_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, _, v = _setup(tmp_path, monkeypatch)
    drifted = dataclasses.replace(v, edits=(dataclasses.replace(v.edits[0], line=5),))  # the line above it
    with pytest.raises(ValueError, match=r"mainloop\.hpp:5: the line hashes"):
        variants.derive(drifted, str(repo))
    gone = dataclasses.replace(v, edits=(dataclasses.replace(v.edits[0], line=99),))
    with pytest.raises(ValueError, match="no such line"):
        variants.derive(gone, str(repo))


def test_variants_register_as_revisions_of_their_base() -> None:
    for v in variants.VARIANTS.values():
        rev, base = pinned_build.revision(v.name), pinned_build.revision(v.base)
        assert rev.sha == v.sha != base.sha
        assert (rev.units, rev.flags, rev.harness, rev.gencode) == (base.units, base.flags, base.harness, base.gencode)


def test_the_recorded_fa3_variant_derives_from_the_pin_here() -> None:
    try:
        clone, _ = pinned_build.pinned_clones()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    v = variants.variant("fa3-2024-08-nosched")
    assert variants.derive(v, clone) == v.sha


def test_a_missing_build_is_reported_with_the_command_that_makes_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_BUILD_CACHE", str(tmp_path / "empty"))
    why = variants.unavailable("fa3-2024-08-trace", "fa3-2024-08")
    assert why and "python -m verifiers.pinned.variants fa3-2024-08-trace" in why
    why = variants.unavailable("fa3-2024-08")
    assert why and "python -m verifiers.pinned.build --rev fa3-2024-08" in why and "variants" not in why
