"""CLI conventions on listings: filters that combine, exact errors with suggestions, formats for scripts."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tests.conftest import claim, kb_subprocess, write_claims


def _corpus(project: Path) -> None:
    write_claims(project, "more", [
        claim("test.fa2.one", generation="FA2", topics=["memory"], statement="An FA2 fact, with a, comma; for CSV."),
        claim("test.fa3.one", generation="FA3", topics=["atomics"]),
        claim("test.fa4.long", generation="FA4", statement="A long statement " + "x" * 300 + " END"),
    ])


def _ids(out: str) -> set[str]:
    return {json.loads(line)["id"] for line in out.splitlines()}


def test_filters_combine_and_accept_any_case(project: Path) -> None:
    _corpus(project)
    r = kb_subprocess(project, "claims", "-g", "fa2", "-g", "FA3", "--nl")
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == {"test.fa2.one", "test.fa3.one"}  # OR within one filter, any case
    r = kb_subprocess(project, "claims", "-g", "fa2", "-g", "fa3", "-t", "atomics", "--nl")
    assert _ids(r.stdout) == {"test.fa3.one"}  # AND across filters
    r = kb_subprocess(project, "claims", "-t", "memory", "-t", "atomics", "--nl")
    assert _ids(r.stdout) == {"test.fa2.one", "test.fa3.one"}


def test_unknown_values_are_errors_with_a_suggestion(project: Path) -> None:
    _corpus(project)
    r = kb_subprocess(project, "claims", "--source", "fa-note")
    assert r.returncode == 2 and r.stdout == ""
    assert "no such source" in r.stderr and "did you mean fa-notes" in r.stderr
    r = kb_subprocess(project, "claims", "-g", "fa9")
    assert r.returncode == 2 and "fa9" in r.stderr
    r = kb_subprocess(project, "show", "test.fa2.on")
    assert r.returncode == 2 and "did you mean test.fa2.one" in r.stderr
    r = kb_subprocess(project, "claims", "--json", "--tsv")
    assert r.returncode == 2 and "one output format" in r.stderr


def test_csv_tsv_and_full_width_when_piped(project: Path) -> None:
    _corpus(project)
    rows = list(csv.DictReader(io.StringIO(kb_subprocess(project, "claims", "--csv").stdout)))
    by_id = {r["id"]: r for r in rows}
    assert by_id["test.fa2.one"]["statement"] == "An FA2 fact, with a, comma; for CSV."  # quoted, not split
    assert by_id["test.fa2.one"]["topics"] == "memory"
    tsv = list(csv.DictReader(io.StringIO(kb_subprocess(project, "claims", "--tsv").stdout), dialect="excel-tab"))
    assert {r["id"] for r in tsv} == set(by_id)
    table = kb_subprocess(project, "claims", "-g", "fa4").stdout  # stdout is a pipe here
    assert "END" in table and "…" not in table  # nothing cut when piped


def test_a_cut_search_says_so(project: Path) -> None:
    _corpus(project)
    full = kb_subprocess(project, "search", "two plus", "--nl")
    n = len(full.stdout.splitlines())
    assert n >= 3 and "showing" not in full.stderr  # nothing cut, nothing said
    r = kb_subprocess(project, "search", "two plus", "--limit", "1", "--nl")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1
    assert f"showing 1 of {n} matching claims" in r.stderr


def test_verify_says_which_results_it_reused(project: Path) -> None:
    """A second run (or a fresh clone with committed evidence) says it reused results and where they came from."""
    first = json.loads(kb_subprocess(project, "verify", "--json").stdout)
    assert first["ran"] >= 2 and first["cached_from"] == []
    again = kb_subprocess(project, "verify")
    assert "checked here: nothing - no check ran on this machine" in again.stderr
    assert f"reused, not re-run: {first['ran']} result(s) recorded earlier (committed or imported evidence): " \
           f"{first['ran']} on cpu (" in again.stderr
    info = json.loads(kb_subprocess(project, "verify", "--json").stdout)["cached_from"]
    assert [(o["hardware_class"], o["runs"]) for o in info] == [("cpu", first["ran"])]


def test_piped_table_keeps_its_headers(project: Path) -> None:
    """A short last column does not cut the header when piped ("claims", not "cla…")."""
    out = kb_subprocess(project, "verify").stdout
    assert out.splitlines()[0].split() == ["status", "claims"]


def test_every_command_has_an_example_and_every_option_help() -> None:
    """`kb CMD --help` shows what each option does and one example invocation (issue #16)."""
    import click

    from kb.cli import cli

    def walk(cmd: click.Command, prefix: str = ""):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, f"{prefix} {name}".strip())
        else:
            yield prefix, cmd

    for name, cmd in walk(cli):
        assert "Example" in (cmd.help or "") or "`kb " in (cmd.help or ""), f"kb {name}: no example in its help"
        for p in cmd.params:
            if isinstance(p, click.Option):
                assert p.help, f"kb {name} {p.opts[0]}: no help text"


def test_verify_repeated_generation_filters_combine() -> None:
    """`kb verify -g fa1 -g fa3` plans the checks of both generations (it kept only the last one before)."""
    from kb.config import load_config
    from kb.index.store import open_index
    from kb.verify.session import select_claims

    root = Path(__file__).resolve().parent.parent
    corpus = open_index(load_config(root)).corpus()
    both = select_claims(corpus, generation=("FA1", "FA3"))
    assert set(select_claims(corpus, generation="FA1")) | set(select_claims(corpus, generation="FA3")) == set(both)
    assert {corpus.claims[c].generation for c in both} == {"FA1", "FA3"}
    tops = select_claims(corpus, topic=("dropout", "atomics"))
    assert all({"dropout", "atomics"} & set(corpus.claims[c].topics) for c in tops)
