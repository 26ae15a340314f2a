"""The GitHub workflows: valid YAML, tests run exactly the README's command, one Pages deploy at a time."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

WF = Path(__file__).resolve().parent.parent / ".github" / "workflows"
# Majors that still run on the retired Node 20 runtime (GitHub removed it from runners in 2026).
NODE20 = {"actions/checkout": 4, "actions/setup-python": 5, "actions/upload-artifact": 4,
          "actions/upload-pages-artifact": 3, "actions/deploy-pages": 4, "actions/configure-pages": 5}


def _load(name: str) -> dict:
    return yaml.safe_load((WF / name).read_text())


def test_workflows_parse_and_use_no_node20_majors() -> None:
    names = sorted(p.name for p in WF.glob("*.yml"))
    assert {"pages.yml", "gpu.yml", "tests.yml"} <= set(names)
    for name in names:
        _load(name)
        for action, major in re.findall(r"uses:\s*([\w./-]+)@v(\d+)", (WF / name).read_text()):
            assert int(major) > NODE20.get(action, 0), f"{name}: {action}@v{major} runs on Node 20"


def test_tests_workflow_runs_the_readme_command_and_pages_deploys_one_at_a_time() -> None:
    steps = _load("tests.yml")["jobs"]["test"]["steps"]
    assert steps[-1]["run"].strip() == ".ci/run"
    assert (WF.parent.parent / ".ci" / "run").read_text().rstrip().endswith('dev" test')
    pages = _load("pages.yml")
    assert pages["concurrency"]["group"] == "pages" and pages["concurrency"]["cancel-in-progress"] is False
