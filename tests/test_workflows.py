"""The GitHub workflows: valid YAML, tests run exactly the README's command, one Pages deploy at a time, and locked down.

The lock-down (the project's security issue): every workflow's token is read-only by default; the Pages site is
built and deployed only from `main`, and only its deploy job (which runs no project code) holds a write permission;
no checkout leaves the token in .git/config; every action is pinned to the commit of a release tag, named in a
trailing comment; the self-hosted GPU runner installs only into a throwaway venv under $RUNNER_TEMP. Each rule is
a checker that returns its findings; each is run on the real workflows (no findings) and on mutated copies of
them (a finding each): the negative controls.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

WF = Path(__file__).resolve().parent.parent / ".github" / "workflows"
NAMES = ("pages.yml", "gpu.yml", "tests.yml")
# Majors that still run on the retired Node 20 runtime (GitHub removed it from runners in 2026).
NODE20 = {"actions/checkout": 4, "actions/setup-python": 5, "actions/upload-artifact": 4,
          "actions/upload-pages-artifact": 3, "actions/deploy-pages": 4, "actions/configure-pages": 5}
# The pins the workflows may use: action -> {commit: release tag}. Each commit is the tag's commit, read from the
# action's repository (`git rev-parse 'TAG^{commit}'`); a bump changes the workflow and this table together.
PINS = {
    "actions/checkout": {"fbc6f3992d24b796d5a048ff273f7fcc4a7b6c09": "v5.1.0"},
    "actions/setup-python": {"ece7cb06caefa5fff74198d8649806c4678c61a1": "v6.3.0"},
    "actions/configure-pages": {"45bfe0192ca1faeb007ade9deae92b16b8254a0d": "v6.0.0"},
    "actions/upload-pages-artifact": {"fc324d3547104276b827a68afc52ff2a11cc49c9": "v5.0.0"},
    "actions/deploy-pages": {"cd2ce8fcbc39b97be8ca5fce6e763baed58fa128": "v5.0.0"},
    "actions/upload-artifact": {"bbbca2ddaa5d8feaa63e36b76fdaad77386f024f": "v7.0.0"},
}
MAIN_ONLY = "github.ref == 'refs/heads/main'"
VENV = '"$RUNNER_TEMP/venv"'
VENV_PY = '"$RUNNER_TEMP/venv/bin/python"'
USES_LINE = re.compile(r"^[ \t]*(?:-[ \t]+)?uses:[ \t]*(?P<ref>[^\s#]+)(?:[ \t]+#[ \t]*(?P<version>\S+))?[ \t]*$", re.M)


def _text(name: str) -> str:
    return (WF / name).read_text()


def _load(name: str) -> dict:
    return yaml.safe_load(_text(name))


def _on(wf: dict):
    return wf["on"] if "on" in wf else wf.get(True)  # PyYAML reads the bare key `on` as the boolean True


def _steps(wf: dict) -> Iterator[tuple[str, dict]]:
    for job_name, job in (wf.get("jobs") or {}).items():
        for step in job.get("steps") or []:
            yield job_name, step


def _uses_refs(wf: dict) -> list[str]:
    """Every `uses:` of the parsed workflow: steps' actions and jobs' reusable workflows."""
    refs = [str(step["uses"]) for _, step in _steps(wf) if "uses" in step]
    return refs + [str(job["uses"]) for job in (wf.get("jobs") or {}).values() if "uses" in job]


def _writes(perms) -> set[str]:
    """The scopes a `permissions` value grants write on (`write-all` grants all of them)."""
    if isinstance(perms, str):
        return {"*"} if "write" in perms else set()
    return {scope for scope, level in (perms or {}).items() if level == "write"}


# ---- the checkers: each returns its findings, [] when the workflow keeps the rule ----


def pages_trigger_problems(wf: dict) -> list[str]:
    """Built and deployed only from the default branch: push to main (and manual runs), every job gated on main."""
    on = _on(wf)
    if not isinstance(on, dict):
        return [f"`on` is {on!r}: it must be a mapping of `push: branches: [main]` and `workflow_dispatch`"]
    problems = []
    if extra := sorted(set(on) - {"push", "workflow_dispatch"}):
        problems.append(f"triggers other than push to main and workflow_dispatch: {extra}")
    push = on.get("push")
    if not isinstance(push, dict) or push.get("branches") != ["main"]:
        problems.append(f"push must be limited to `branches: [main]`, not {push!r}")
    elif more := sorted(set(push) - {"branches"}):
        problems.append(f"push has filters besides `branches: [main]`: {more}")
    # workflow_dispatch can be started on any branch: each job must check the ref itself.
    for job_name, job in (wf.get("jobs") or {}).items():
        if str(job.get("if", "")).strip() != MAIN_ONLY:
            problems.append(f"job {job_name} is not gated on `if: {MAIN_ONLY}`")
    return problems


def top_level_permission_problems(wf: dict) -> list[str]:
    """A top-level `permissions` block granting read at most (`contents: read`, or `{}`)."""
    if "permissions" not in wf:
        return ["no top-level `permissions`: the token gets the repository's default, possibly read-write"]
    perms = wf["permissions"]
    if perms == {}:
        return []
    if not isinstance(perms, dict):
        return [f"top-level `permissions: {perms}`: it must be `contents: read` (or {{}})"]
    problems = [f"top-level `{scope}: {level}`: only read (or none) belongs there"
                for scope, level in perms.items() if level not in ("read", "none")]
    if perms.get("contents") != "read":
        problems.append(f"top-level permissions {perms} lack `contents: read`")
    return problems


def write_permission_problems(wf: dict, allowed: dict[str, set[str]]) -> list[str]:
    """Write permissions only where `allowed` names them (job -> scopes); never at the top level."""
    problems = [f"top-level write on {sorted(w)}" for w in [_writes(wf.get("permissions"))] if w]
    for job_name, job in (wf.get("jobs") or {}).items():
        if extra := _writes(job.get("permissions")) - allowed.get(job_name, set()):
            problems.append(f"job {job_name} holds write on {sorted(extra)}")
    return problems


def pages_job_problems(wf: dict) -> list[str]:
    """The build job uploads the artifact; a separate deploy job (needs: build, github-pages) deploys it, nothing else."""
    jobs = wf.get("jobs") or {}
    build, deploy = jobs.get("build"), jobs.get("deploy")
    if not isinstance(build, dict) or not isinstance(deploy, dict):
        return [f"pages.yml needs a `build` and a `deploy` job, has {sorted(jobs)}"]

    def actions(job: dict) -> list[str]:
        return [str(step.get("uses", "")).split("@")[0] for step in job.get("steps") or []]

    problems = []
    if "actions/upload-pages-artifact" not in actions(build):
        problems.append("the build job does not upload the Pages artifact")
    if "actions/deploy-pages" in actions(build):
        problems.append("the build job deploys: deploying is the deploy job's, which alone holds pages: write")
    if actions(deploy) != ["actions/deploy-pages"] or any("run" in step for step in deploy.get("steps") or []):
        problems.append(f"the deploy job must only run actions/deploy-pages, runs {actions(deploy)}")
    needs = deploy.get("needs")
    if "build" not in ([needs] if isinstance(needs, str) else needs or []):
        problems.append(f"the deploy job does not need build (needs: {needs!r})")
    env = deploy.get("environment")
    if (env.get("name") if isinstance(env, dict) else env) != "github-pages":
        problems.append(f"the deploy job's environment is {env!r}, not github-pages")
    if deploy.get("permissions") != {"pages": "write", "id-token": "write"}:
        problems.append(f"the deploy job's permissions are {deploy.get('permissions')!r}: pages and id-token write")
    for job_name, job in jobs.items():
        runs_verify = any("kb verify" in str(step.get("run", "")) for step in job.get("steps") or [])
        if runs_verify and (_writes(job.get("permissions", wf.get("permissions")))):
            problems.append(f"job {job_name} runs `kb verify` with a write permission")
    return problems


def checkout_problems(wf: dict) -> list[str]:
    """Every actions/checkout step has `persist-credentials: false`."""
    return [f"job {job_name}: checkout without `persist-credentials: false`"
            for job_name, step in _steps(wf)
            if str(step.get("uses", "")).startswith("actions/checkout@")
            and (step.get("with") or {}).get("persist-credentials") not in (False, "false")]


def pin_problems(text: str) -> list[str]:
    """Every `uses:` is a full 40-hex commit with its release tag in a trailing comment, one of PINS."""
    problems = []
    lines = list(USES_LINE.finditer(text))
    scanned = {m["ref"].strip("'\"") for m in lines}
    problems += [f"{ref}: a `uses:` the line scan cannot read (no comment)"
                 for ref in _uses_refs(yaml.safe_load(text)) if ref not in scanned]
    for m in lines:
        ref, version = m["ref"].strip("'\""), m["version"]
        if ref.startswith("./"):
            continue  # a local action: part of the same commit
        action, _, sha = ref.partition("@")
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            problems.append(f"{ref}: not pinned to a full 40-hex commit SHA")
        elif not version or not re.fullmatch(r"v\d+(\.\d+)*", version):
            problems.append(f"{ref}: no trailing `# vX.Y.Z` comment naming the release")
        elif PINS.get(action, {}).get(sha) != version:
            problems.append(f"{ref} # {version}: not a verified pin (PINS has {PINS.get(action)})")
    return problems


def node20_problems(text: str) -> list[str]:
    """No action's major (read from the pin's trailing comment, or a tag ref) still runs on Node 20."""
    problems = []
    for m in USES_LINE.finditer(text):
        action, _, ref = m["ref"].strip("'\"").partition("@")
        version = m["version"] if re.fullmatch(r"[0-9a-f]{40}", ref) else ref
        major = re.match(r"v(\d+)", version or "")
        if major and int(major[1]) <= NODE20.get(action, 0):
            problems.append(f"{action}@{version} runs on Node 20")
    return problems


def gpu_venv_problems(wf: dict) -> list[str]:
    """Installs only into a fresh venv under $RUNNER_TEMP (never the runner's Python), removed at the end."""
    problems = []
    for job_name, job in (wf.get("jobs") or {}).items():
        steps = job.get("steps") or []
        created = installed = None
        for i, step in enumerate(steps):
            if str(step.get("uses", "")).startswith("actions/setup-python@"):
                problems.append(f"job {job_name}: setup-python writes a Python into the runner's tool cache")
            for j, line in enumerate(str(step.get("run", "")).splitlines()):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if re.search(r"\bsudo\b", line):
                    problems.append(f"job {job_name}: sudo: {line}")
                if re.search(r"(--user|--system|--break-system-packages|--target|--prefix|--root)(?![\w-])", line):
                    problems.append(f"job {job_name}: installs outside the venv: {line}")
                if re.fullmatch(r'python3 -m venv (--system-site-packages )?' + re.escape(VENV), line):
                    created = (i, j) if created is None else created
                    continue
                # The venv's interpreter is the only Python and the only installer.
                rest = line.replace(f"{VENV_PY} -m pip install", "VENV_PIP_INSTALL").replace(VENV_PY, "VENV_PY")
                if "VENV_PIP_INSTALL" in rest:
                    installed = (i, j) if installed is None else installed
                if re.search(r"\b(python[\d.]*|pip[\d.]*|pipx|uv|conda|mamba|easy_install)\b|\.venv|-m pip", rest):
                    problems.append(f"job {job_name}: a Python or installer other than the job's venv: {line}")
        if created is None:
            problems.append(f"job {job_name}: no `python3 -m venv {VENV}`")
        if installed is None:
            problems.append(f"job {job_name}: nothing installed with `{VENV_PY} -m pip install`")
        elif created is not None and installed < created:
            problems.append(f"job {job_name}: installs before the venv exists")
        last = steps[-1] if steps else {}
        if "always()" not in str(last.get("if", "")) or f"rm -rf {VENV}" not in str(last.get("run", "")):
            problems.append(f"job {job_name}: the last step must be `if: always()` with `rm -rf {VENV}`")
    return problems


# ---- negative controls: mutated copies of the workflows ----


def _replaced(text: str, old: str, new: str) -> str:
    assert old in text, f"negative control does not apply: {old!r} not in the workflow"
    return text.replace(old, new)


def _edited(name: str, edit: Callable[[dict], object]) -> dict:
    wf = copy.deepcopy(_load(name))
    edit(wf)
    assert wf != _load(name), "negative control changed nothing"
    return wf


def _assert_caught(check: Callable[[dict], list[str]], variants: dict[str, dict]) -> None:
    missed = [label for label, wf in variants.items() if not check(wf)]
    assert not missed, f"the checker passes these violations: {missed}"


def test_workflows_parse_and_use_no_node20_majors() -> None:
    names = sorted(p.name for p in WF.glob("*.yml"))
    assert set(NAMES) <= set(names)
    for name in names:
        _load(name)
        assert node20_problems(_text(name)) == [], name
        assert USES_LINE.search(_text(name)), f"{name}: the check read no `uses:`"
    pages = _text("pages.yml")
    sha = next(iter(PINS["actions/deploy-pages"]))
    assert node20_problems(_replaced(pages, f"{sha} # v5.0.0", f"{sha} # v4.0.5"))
    assert node20_problems(_replaced(pages, f"actions/deploy-pages@{sha} # v5.0.0", "actions/deploy-pages@v4"))


def test_tests_workflow_runs_the_readme_command_and_pages_deploys_one_at_a_time() -> None:
    steps = _load("tests.yml")["jobs"]["test"]["steps"]
    assert steps[-1]["run"].strip() == ".ci/run"
    assert (WF.parent.parent / ".ci" / "run").read_text().rstrip().endswith('dev" test')
    pages = _load("pages.yml")
    assert pages["concurrency"]["group"] == "pages" and pages["concurrency"]["cancel-in-progress"] is False


def test_pages_is_built_and_deployed_only_from_main() -> None:
    assert pages_trigger_problems(_load("pages.yml")) == []

    def push(value):
        return lambda wf: _on(wf).update(push=value)

    _assert_caught(pages_trigger_problems, {
        "push on every branch": _edited("pages.yml", push(None)),
        "push on a wildcard": _edited("pages.yml", push({"branches": ["**"]})),
        "push on main and another branch": _edited("pages.yml", push({"branches": ["main", "dev"]})),
        "push except gh-pages": _edited("pages.yml", push({"branches-ignore": ["gh-pages"]})),
        "push on main and tags": _edited("pages.yml", push({"branches": ["main"], "tags": ["v*"]})),
        "pull requests": _edited("pages.yml", lambda wf: _on(wf).update(pull_request=None)),
        "pull_request_target": _edited("pages.yml", lambda wf: _on(wf).update(pull_request_target=None)),
        "bare `on: push`": _edited("pages.yml", lambda wf: wf.update({True: "push"})),
        "deploy not gated": _edited("pages.yml", lambda wf: wf["jobs"]["deploy"].pop("if")),
        "build not gated": _edited("pages.yml", lambda wf: wf["jobs"]["build"].pop("if")),
        "gate weakened": _edited("pages.yml", lambda wf: wf["jobs"]["deploy"].update({"if": f"{MAIN_ONLY} || true"})),
    })


@pytest.mark.parametrize("name", NAMES)
def test_top_level_permissions_are_read_only(name: str) -> None:
    assert top_level_permission_problems(_load(name)) == []
    _assert_caught(top_level_permission_problems, {
        "no block": _edited(name, lambda wf: wf.pop("permissions")),
        "write-all": _edited(name, lambda wf: wf.update(permissions="write-all")),
        "read-all": _edited(name, lambda wf: wf.update(permissions="read-all")),
        "contents: write": _edited(name, lambda wf: wf.update(permissions={"contents": "write"})),
        "pages: write": _edited(name, lambda wf: wf["permissions"].update(pages="write")),
        "id-token: write": _edited(name, lambda wf: wf["permissions"].update({"id-token": "write"})),
        "no contents: read": _edited(name, lambda wf: wf.update(permissions={"actions": "read"})),
    })


def test_write_permissions_only_on_the_pages_deploy_job() -> None:
    deploy_only = {"deploy": {"pages", "id-token"}}
    assert write_permission_problems(_load("pages.yml"), deploy_only) == []
    assert pages_job_problems(_load("pages.yml")) == []
    for name in ("gpu.yml", "tests.yml"):
        assert write_permission_problems(_load(name), {}) == [], name
    jobs = lambda wf: wf["jobs"]  # noqa: E731
    _assert_caught(lambda wf: write_permission_problems(wf, deploy_only), {
        "pages: write at the top": _edited("pages.yml", lambda wf: wf["permissions"].update(pages="write")),
        "build writes contents": _edited("pages.yml", lambda wf: jobs(wf)["build"]["permissions"].update(contents="write")),
        "build writes pages": _edited("pages.yml", lambda wf: jobs(wf)["build"]["permissions"].update(pages="write")),
        "build write-all": _edited("pages.yml", lambda wf: jobs(wf)["build"].update(permissions="write-all")),
        "deploy writes contents": _edited("pages.yml", lambda wf: jobs(wf)["deploy"]["permissions"].update(contents="write")),
        "gpu job write-all": _edited("gpu.yml", lambda wf: jobs(wf)["verify"].update(permissions="write-all")),
        "tests job writes contents": _edited("tests.yml", lambda wf: jobs(wf)["test"].update(permissions={"contents": "write"})),
    })
    # The GPU and tests workflows allow no write at all, whatever the scope.
    for name, job in (("gpu.yml", "verify"), ("tests.yml", "test")):
        variant = _edited(name, lambda wf, job=job: jobs(wf)[job].update(permissions={"pages": "write"}))
        assert write_permission_problems(variant, {}), name
    deploy_step = lambda wf: jobs(wf)["deploy"]["steps"][0]  # noqa: E731
    _assert_caught(pages_job_problems, {
        "one job": _edited("pages.yml", lambda wf: jobs(wf).pop("deploy")),
        "deploy without needs": _edited("pages.yml", lambda wf: jobs(wf)["deploy"].pop("needs")),
        "deploy outside github-pages": _edited("pages.yml", lambda wf: jobs(wf)["deploy"].pop("environment")),
        "deploy without pages: write": _edited("pages.yml", lambda wf: jobs(wf)["deploy"].pop("permissions")),
        "deploy runs project code": _edited("pages.yml", lambda wf: jobs(wf)["deploy"]["steps"].insert(0, {"run": "kb verify"})),
        "build deploys": _edited("pages.yml", lambda wf: jobs(wf)["build"]["steps"].append(copy.deepcopy(deploy_step(wf)))),
        "build does not upload": _edited("pages.yml", lambda wf: jobs(wf)["build"]["steps"].pop()),
        "kb verify with write": _edited("pages.yml", lambda wf: jobs(wf)["build"]["permissions"].update(statuses="write")),
    })


@pytest.mark.parametrize("name", NAMES)
def test_every_checkout_drops_its_credentials(name: str) -> None:
    wf = _load(name)
    assert any(str(step.get("uses", "")).startswith("actions/checkout@") for _, step in _steps(wf)), "no checkout to check"
    assert checkout_problems(wf) == []

    def checkout(wf: dict) -> dict:
        return next(step for _, step in _steps(wf) if str(step.get("uses", "")).startswith("actions/checkout@"))

    _assert_caught(checkout_problems, {
        "no with": _edited(name, lambda wf: checkout(wf).pop("with")),
        "persisted": _edited(name, lambda wf: checkout(wf)["with"].update({"persist-credentials": True})),
        "persisted, as a string": _edited(name, lambda wf: checkout(wf)["with"].update({"persist-credentials": "true"})),
        "other inputs only": _edited(name, lambda wf: checkout(wf).update({"with": {"fetch-depth": 0}})),
    })


@pytest.mark.parametrize("name", NAMES)
def test_every_action_is_pinned_to_a_verified_commit(name: str) -> None:
    text = _text(name)
    assert pin_problems(text) == []
    sha = next(iter(PINS["actions/checkout"]))
    pinned = f"actions/checkout@{sha} # v5.1.0"
    variants = {
        "a tag": _replaced(text, pinned, "actions/checkout@v5"),
        "a branch": _replaced(text, pinned, "actions/checkout@main"),
        "a short SHA": _replaced(text, pinned, f"actions/checkout@{sha[:7]} # v5.1.0"),
        "no version comment": _replaced(text, pinned, f"actions/checkout@{sha}"),
        "a comment that is not a version": _replaced(text, pinned, f"actions/checkout@{sha} # pinned"),
        "the comment names another release": _replaced(text, pinned, f"actions/checkout@{sha} # v5.0.0"),
        "an unverified commit": _replaced(text, pinned, f"actions/checkout@{'0' * 40} # v5.1.0"),
        "a quoted tag": _replaced(text, pinned, '"actions/checkout@v5"'),
        "a flow-style step the line scan misses": _replaced(
            text, f"      - uses: {pinned}\n        with:\n          persist-credentials: false\n",
            "      - {uses: actions/checkout@v5, with: {persist-credentials: false}}\n"),
    }
    missed = [label for label, variant in variants.items() if not pin_problems(variant)]
    assert not missed, f"the checker passes these violations: {missed}"


def test_gpu_workflow_installs_only_into_a_venv_under_runner_temp() -> None:
    assert gpu_venv_problems(_load("gpu.yml")) == []
    text = _text("gpu.yml")
    install = f'{VENV_PY} -m pip install -q -e ".[test]" flash-attn-4'
    create = f"python3 -m venv --system-site-packages {VENV}"
    variants = {
        "the runner's pip": _replaced(text, install, 'python3 -m pip install -q -e ".[test]" flash-attn-4'),
        "pip3": _replaced(text, install, 'pip3 install -q -e ".[test]" flash-attn-4'),
        "--user": _replaced(text, install, install + " --user"),
        "sudo pip": _replaced(text, install, f"sudo {install}"),
        "--break-system-packages": _replaced(text, install, install + " --break-system-packages"),
        "uv into the system": _replaced(text, install, 'uv pip install --system -e ".[test]"'),
        "a venv in the workspace": _replaced(text, "$RUNNER_TEMP/venv", ".venv"),
        "no venv": _replaced(text, create, "true"),
        "the runner's Python runs kb": _replaced(text, f"{VENV_PY} -m kb hw", "python3 -m kb hw"),
        "the installer pointed elsewhere": _replaced(text, install, '/usr/bin/python3 -m pip install -e .'),
    }
    cases = {label: yaml.safe_load(variant) for label, variant in variants.items()}
    steps = lambda wf: wf["jobs"]["verify"]["steps"]  # noqa: E731
    cases |= {
        "no install (the rule would be vacuous)": _edited("gpu.yml", lambda wf: steps(wf).pop(2)),
        "install before the venv": _edited("gpu.yml", lambda wf: steps(wf).insert(1, steps(wf).pop(2))),
        "no cleanup": _edited("gpu.yml", lambda wf: steps(wf).pop()),
        "cleanup only on success": _edited("gpu.yml", lambda wf: steps(wf)[-1].pop("if")),
        "setup-python on the runner": _edited("gpu.yml", lambda wf: steps(wf).insert(1, {"uses": "actions/setup-python@v6"})),
    }
    _assert_caught(gpu_venv_problems, cases)
