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
                            "status_reason", "strength", "rests_on", "rests_via", "file", "line", "cause", "cause_why", "cause_by"}
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
