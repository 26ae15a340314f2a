"""Query commands: stable JSON shapes, filters, data on stdout, messages on stderr, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, claim, write_claims


def test_claims_json_shape_and_filters(run_kb) -> None:
    rows = json.loads(run_kb("claims", "--json").output)
    assert {r["id"] for r in rows} == {"test.arith.four", "test.arith.wrong", "test.review.only"}
    assert set(rows[0]) == {"id", "statement", "generation", "phase", "label", "topics", "status",
                            "status_reason", "strength", "rests_on", "rests_via", "file", "line", "cause", "cause_why", "cause_by",
                            "grade_note", "grade_note_why"}
    only = json.loads(run_kb("claims", "--status", "review-only", "--json").output)
    assert [r["id"] for r in only] == ["test.review.only"]
    assert json.loads(run_kb("claims", "--generation", "FA3", "--json").output) == []
    assert run_kb("claims", "--topic", "not-a-topic").exit_code == 2


def test_show_and_unknown_id(run_kb) -> None:
    rec = json.loads(run_kb("show", "test.review.only", "--json").output)
    assert rec["depends_on"] == ["test.arith.four"]
    assert rec["status"][0]["status"] == "review-only"
    missing = run_kb("show", "no.such.claim")
    assert missing.exit_code == 2 and "no claim with id" in missing.output


def test_sources_lists_pins(run_kb) -> None:
    rows = json.loads(run_kb("sources", "--json").output)
    fa = next(r for r in rows if r["id"] == "flash-attention")
    assert fa["pins"]["v2.0.0"] == "4f285b354796fb17df8636485b9a04df3ebbb7dc"


def test_export_status_check(project: Path, run_kb) -> None:
    assert run_kb("export", "status").exit_code == 0
    assert run_kb("export", "status", "--check").exit_code == 0
    status = project / "STATUS.md"
    status.write_text(status.read_text() + "\nhand edit\n")
    res = run_kb("export", "status", "--check")
    assert res.exit_code == 1 and "out of date" in res.output


def test_export_prov_is_prov_json(run_kb) -> None:
    doc = json.loads(run_kb("export", "prov").output)
    assert "kb:test.arith.four" in doc["entity"]
    assert any(d["prov:usedEntity"] == "src:fa-notes" for d in doc["wasDerivedFrom"].values())


def test_cli_start_does_not_import_torch() -> None:
    code = ("import sys; from click.testing import CliRunner; from kb.cli import cli; "
            "r = CliRunner().invoke(cli, ['--help']); "
            "r2 = CliRunner().invoke(cli, ['claims', '--json']); "
            "assert r.exit_code == 0 and r2.exit_code == 0, r2.output; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_committed_status_is_current(tmp_path: Path) -> None:
    """STATUS.md in the repository matches a fresh export of the committed files."""
    res = subprocess.run([sys.executable, "-m", "kb", "--db", str(tmp_path / "kb.db"),
                          "export", "status", "--check"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr


def test_every_command_is_documented_in_the_readme() -> None:
    """The README's command table names every CLI command (docs checked against the code)."""
    import click

    from kb.cli import cli

    readme = (REPO / "README.md").read_text()
    names = []
    for name, cmd in cli.commands.items():
        if isinstance(cmd, click.Group):
            names += [f"kb {name} {sub}" for sub in cmd.commands]
        else:
            names.append(f"kb {name}")
    missing = [n for n in names if f"`{n}" not in readme]
    assert not missing, f"commands missing from README.md: {missing}"


def test_arch_filter(project: Path, run_kb) -> None:
    from tests.conftest import claim, write_claims

    write_claims(project, "arch", [claim("test.arch.hopper", scope={"arch": "sm_90 (H200)"})])
    rows = json.loads(run_kb("claims", "--arch", "sm_90", "--json").output)
    assert [r["id"] for r in rows] == ["test.arch.hopper"]


def test_prov_relations_resolve_and_namespaces_are_real(run_kb, project: Path) -> None:
    """Every used/associated id is declared; runs of removed claims are left out; the base IRI is the publisher's."""
    run_kb("verify")
    write_claims(project, "good", [claim("test.arith.four")])  # two claims with runs removed
    doc = json.loads(run_kb("export", "prov", "--base", "https://example.org/kb/").output)
    assert doc["prefix"]["kb"] == "https://example.org/kb/claim/"
    assert not any("github.com/kb" in v for v in doc["prefix"].values())
    declared = set(doc["entity"]) | set(doc["activity"]) | set(doc["agent"])
    for rel in ("used", "wasAssociatedWith", "wasGeneratedBy", "wasDerivedFrom"):
        for r in doc[rel].values():
            for key in ("prov:entity", "prov:activity", "prov:agent", "prov:usedEntity"):
                if key in r:
                    assert r[key] in declared, (rel, r)
    assert {u["prov:entity"] for u in doc["used"].values()} == {"kb:test.arith.four"}
    assert all(" " not in a for a in doc["agent"])


# --- Filters that answer real questions (#27) ---------------------------------------------------------------

def _ids(run_kb, *args: str) -> list[str]:
    res = run_kb("claims", *args, "--json")
    assert res.exit_code == 0, res.output
    return sorted(r["id"] for r in json.loads(res.stdout))


def _arch_claims(project: Path) -> None:
    write_claims(project, "arch", [
        claim("t.a100", scope={"arch": "sm_80"}),
        claim("t.h200", scope={"arch": "sm_90 (H200)"}),
        claim("t.hopper-a", scope={"arch": "sm_90a"}),
        claim("t.b200", scope={"arch": "sm_100"}),
        claim("t.named", scope={"arch": "the A100 branch"}),
        claim("t.wait-a100", checks=[], experiment={"hardware": "sm_80 (A100)",
                                                    "method": "time the forward on the GPU named, twice"}),
        claim("t.wait-hopper", checks=[], experiment={"hardware": "sm_90a",
                                                      "method": "compare with an sm_80 run of the same kernel"}),
        claim("t.wait-any", checks=[], experiment={"hardware": "a CUDA GPU", "method": "run it once and look"}),
    ])


def test_arch_resolves_gpu_names_through_the_hardware_sheets(project: Path, run_kb) -> None:
    _arch_claims(project)
    assert _ids(run_kb, "--arch", "A100") == ["t.a100", "t.named"] == _ids(run_kb, "--arch", "sm_80")
    assert _ids(run_kb, "--arch", "a100-sxm4-80gb") == ["t.a100", "t.named"]  # a SKU starts with the sheet id
    assert _ids(run_kb, "--arch", "H100") == ["t.h200", "t.hopper-a"] == _ids(run_kb, "--arch", "Hopper")
    assert _ids(run_kb, "--arch", "H200") == ["t.h200", "t.hopper-a"]
    assert _ids(run_kb, "--arch", "sm_90a") == ["t.hopper-a"]  # an explicit suffix is asked for as such
    assert _ids(run_kb, "--arch", "B200") == ["t.b200"] == _ids(run_kb, "--arch", "10.0")
    # The sheets decide, not a list in kb: say the A100 sheet were an sm_90 part.
    sheet = project / "sources" / "hardware.yaml"
    sheet.write_text(sheet.read_text().replace("compute_capability: 80", "compute_capability: 90", 1))
    assert _ids(run_kb, "--arch", "A100") == ["t.h200", "t.hopper-a", "t.named"]


def test_unknown_arch_and_gpu_are_refused_with_suggestions(project: Path, run_kb) -> None:
    _arch_claims(project)
    for flag in ("--arch", "--waiting-for", "--not-arch"):
        res = run_kb("claims", flag, "A10")
        assert res.exit_code == 2, res.output
        assert "did you mean A100" in res.output and flag in res.output
    res = run_kb("claims", "--arch", "nonsense")
    assert res.exit_code == 2 and "known: A100" in res.output


def test_waiting_for_reads_the_needs_hardware_requirement(project: Path, run_kb) -> None:
    _arch_claims(project)
    # t.wait-hopper's method mentions sm_80, but its requirement is sm_90a: it does not wait for an A100.
    assert _ids(run_kb, "--waiting-for", "A100") == ["t.wait-a100"]
    assert _ids(run_kb, "--waiting-for", "H200") == ["t.wait-hopper"]  # hardware: sm_90a code runs on an H200
    assert _ids(run_kb, "--waiting-for", "any") == ["t.wait-any"]
    assert _ids(run_kb, "--waiting-for", "A100", "--waiting-for", "H100") == ["t.wait-a100", "t.wait-hopper"]
    assert _ids(run_kb, "--waiting-for", "B200") == []


def test_requirement_text_of_pending_checks() -> None:
    from kb.index.arch import Arch, named_in, names, requirement_text

    req = requirement_text("check 0 (gpu.bitwise-repeat) needs CUDA sm_100..sm_103, package flash_attn")
    assert req == "CUDA sm_100..sm_103, package flash_attn"
    assert names(named_in(req, []), Arch(101)) and not names(named_in(req, []), Arch(90))
    verified = "check 0: holds (also pending: check 1 (gpu.benchmark) needs CUDA sm_80..newer, package torch)"
    assert names(named_in(requirement_text(verified), []), Arch(90))
    assert requirement_text("needs sm_90 (H100/H200): launch it on sm_80 too") == "sm_90 (H100/H200)"


def test_negations(project: Path, run_kb) -> None:
    _arch_claims(project)
    everything = _ids(run_kb)
    assert _ids(run_kb, "--not-status", "needs-hardware") == sorted(
        set(everything) - {"t.wait-a100", "t.wait-hopper", "t.wait-any"})
    assert _ids(run_kb, "--not-arch", "H100", "--arch", "sm_80") == ["t.a100", "t.named"]
    assert "t.h200" not in _ids(run_kb, "--not-arch", "H200")
    assert _ids(run_kb, "--not-waiting-for", "A100", "--status", "needs-hardware") == ["t.wait-any", "t.wait-hopper"]
    assert _ids(run_kb, "--not-source", "fa-notes") == []
    assert _ids(run_kb, "--not-generation", "cross") == []
    assert _ids(run_kb, "--not-topic", "numerics") == []
    assert _ids(run_kb, "--not-label", "mathematical") == [] == _ids(run_kb, "--not-phase", "n/a")
    assert _ids(run_kb, "--not-strength", "cited") == everything  # no verdict yet: no strength to leave out
    # test.review.only rests on test.arith.four, which has not run: unchecked
    assert _ids(run_kb, "--rests-on", "unchecked") == ["test.review.only"]
    assert _ids(run_kb, "--not-rests-on", "unchecked") == sorted(set(everything) - {"test.review.only"})
    res = run_kb("claims", "--not-source", "fa-note")
    assert res.exit_code == 2 and "did you mean fa-notes" in res.output


def test_status_values_come_from_the_vocabulary_and_are_explained(run_kb) -> None:
    from kb.records.vocab import STATUS_MEANINGS, STATUSES

    res = run_kb("claims", "--status", "verifed")
    assert res.exit_code == 2 and "did you mean verified" in res.output
    helptext = run_kb("claims", "--help").output
    assert all(s in helptext for s in STATUSES)
    # Before any verify run the fixture's checked claims are unverified (the status is real, if transient) ...
    assert [r["id"] for r in json.loads(run_kb("claims", "--status", "unverified", "--json").stdout)] == [
        "test.arith.four", "test.arith.wrong"]
    assert run_kb("verify").exit_code == 1
    # ... and none is once they have run; an empty answer says what the status means.
    res = run_kb("claims", "--status", "unverified")
    assert res.exit_code == 0 and f"no claim is unverified here (unverified: {STATUS_MEANINGS['unverified']}" in res.output
    res = run_kb("claims", "--topic", "tilling")
    assert res.exit_code == 2 and "did you mean tiling" in res.output


def test_search_passes_fts_syntax_and_takes_the_filters(project: Path, run_kb) -> None:
    write_claims(project, "search", [
        claim("s.accum", statement="The backward pass keeps dq_accum in fp32."),
        claim("s.atomic", statement="Each CTA does an atomic add into dQ.", generation="FA2"),
        claim("s.add", statement="An add that is atomic in another sense."),
    ])

    def found(*args: str) -> list[str]:
        res = run_kb("search", *args, "--json")
        assert res.exit_code == 0, res.output
        return sorted(r["id"] for r in json.loads(res.stdout))

    assert found('dq_accum OR "atomic add"') == ["s.accum", "s.atomic"]
    assert found('"atomic add"') == ["s.atomic"]  # a phrase
    assert found("atomic add") == ["s.add", "s.atomic"]  # both words, any order
    assert found('dq_accum OR "atomic add"', "-g", "fa2") == ["s.atomic"]
    assert found('dq_accum OR "atomic add"', "--not-generation", "fa2") == ["s.accum"]
    assert found("dq_accum OR atomic", "--quote") == []  # OR read as a word no statement holds
    assert found("s.accum", "--quote") == ["s.accum"]
    res = run_kb("search", "s.accum")
    assert res.exit_code == 2 and "--quote" in res.output


def test_claims_limit_says_how_many_matched(run_kb) -> None:
    res = run_kb("claims", "--limit", "1", "--json")
    assert res.exit_code == 0 and len(json.loads(res.stdout)) == 1
    assert "showing 1 of 3 matching claims" in res.stderr
    assert run_kb("claims", "--limit", "0").exit_code == 2


def test_table_fits_columns_and_wide_keeps_one_line(project: Path) -> None:
    long = ("A statement long enough to need several lines on a narrow terminal, with every word of it kept "
            "in the table rather than cut off after thirty-odd characters as before.")
    write_claims(project, "long", [claim("t.long.statement.with.a.long.id", statement=long)])
    args = ["--root", str(project), "--db", str(project / ".kb" / "kb.db"), "claims", "-t", "numerics"]
    from click.testing import CliRunner

    from kb.cli import cli

    for cols in ("100", "160", "60"):
        out = CliRunner().invoke(cli, args, env={"COLUMNS": cols}).stdout
        # Ids are never cut, so on 60 columns only the statement lines (under their rows) have to fit.
        lines = [ln for ln in out.splitlines() if cols != "60" or ln.startswith("    ")]
        assert max(len(line) for line in lines) <= int(cols), out
        assert " ".join(out.split()).count(long) == 1  # wrapped, never cut
    wide = CliRunner().invoke(cli, [*args, "--wide"], env={"COLUMNS": "100"}).stdout
    assert any(line.endswith(long) for line in wide.splitlines()) and len(wide.splitlines()) == 2 + 4


def test_verify_verifier_filter_selects_checks_by_verifier_id(run_kb) -> None:
    import json

    plan = json.loads(run_kb("verify", "--plan", "--json", "--verifier", "arith.eval").stdout)
    assert plan and {r["check"].split("#")[0] for r in plan} == {"test.arith.four", "test.arith.wrong"}
    assert json.loads(run_kb("verify", "--plan", "--json", "--verifier", "source.lines").stdout) == []
    res = run_kb("verify", "--plan", "--verifier", "arith.evl")
    assert res.exit_code == 2 and "no such verifier" in res.output and "arith.eval" in res.output
