"""Files to validated records: read claims/ and sources/, report every problem.

Loading never stops at the first problem: every file is read and every error
collected, so one `kb validate` run shows everything that is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kb.records.models import Claim, Source
from kb.records.yamlfile import LineDict, LineList, Problem, line_of, read_yaml


@dataclass
class Located:
    """Where a record was defined."""

    path: str
    line: int


@dataclass
class Corpus:
    """Everything loaded from the text files, plus what was wrong with them."""

    claims: dict[str, Claim] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    claim_at: dict[str, Located] = field(default_factory=dict)
    source_at: dict[str, Located] = field(default_factory=dict)
    claim_data: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validate(model: type[BaseModel], data: Any, display: str, kind: str) -> tuple[BaseModel | None, list[Problem]]:
    rid = data.get("id") if isinstance(data, dict) else None
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "is not a known field"
            elif err["type"] == "missing":
                msg = "is required"
            problems.append(
                Problem(
                    display,
                    line_of(data, loc),
                    msg,
                    claim_id=rid if kind == "claim" else None,
                    field=_field_path(loc) or None,
                )
            )
        if kind == "source":
            problems = [Problem(p.path, p.line, f"source {rid}: {p.message}", field=p.field) for p in problems]
        return None, problems


def _records(data: Any, key: str, display: str) -> tuple[list[Any], list[Problem]]:
    if not isinstance(data, LineDict) or key not in data:
        return [], [Problem(display, getattr(data, "line", 1) or 1, f"expected a mapping with a top-level '{key}:' list")]
    items = data[key]
    if not isinstance(items, LineList):
        return [], [Problem(display, data.key_lines[key], f"'{key}' must be a list")]
    extra = [k for k in data if k != key]
    probs = [Problem(display, data.key_lines[k], f"top-level key {k!r} is not known") for k in extra]
    return list(zip(items, items.item_lines, strict=True)), probs


def yaml_files(root: Path, folder: str) -> list[Path]:
    """The YAML files of a folder, in a stable order."""
    base = root / folder
    if not base.is_dir():
        return []
    return sorted(p for p in base.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_corpus(root: Path) -> Corpus:
    """Read and validate every source and claim file under `root`."""
    corpus = Corpus()
    for kind, folder, key, model in (
        ("source", "sources", "sources", Source),
        ("claim", "claims", "claims", Claim),
    ):
        for path in yaml_files(root, folder):
            display = str(path.relative_to(root))
            data, problems = read_yaml(path, display)
            corpus.problems += problems
            if data is None:
                continue
            items, problems = _records(data, key, display)
            corpus.problems += problems
            for item, line in items:
                if not isinstance(item, dict):
                    corpus.problems.append(Problem(display, line, f"each entry of '{key}' must be a mapping, not "
                                                   f"{type(item).__name__ if item is not None else 'null'}"))
                    continue
                record, problems = _validate(model, item, display, kind)
                corpus.problems += problems
                if record is None:
                    continue
                rid = record.id  # type: ignore[attr-defined]
                store = corpus.claims if kind == "claim" else corpus.sources
                at = corpus.claim_at if kind == "claim" else corpus.source_at
                if rid in store:
                    first = at[rid]
                    corpus.problems.append(
                        Problem(display, line, f"duplicate {kind} id {rid!r}; first defined at {first.path}:{first.line}",
                                claim_id=rid if kind == "claim" else None, field="id")
                    )
                    continue
                store[rid] = record  # type: ignore[assignment]
                at[rid] = Located(display, line)
                if kind == "claim":
                    corpus.claim_data[rid] = item
    return corpus
