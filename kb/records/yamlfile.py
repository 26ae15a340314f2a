"""YAML reading that remembers where every value came from.

Mappings load as `LineDict` and sequences as `LineList`; both carry the line
of each key or item, so a validation error deep in a record can be reported
as `file:line`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class LineDict(dict):
    """A dict that knows the line of itself and of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class LineList(list):
    """A list that knows the line of itself and of each item."""

    line: int = 0
    item_lines: list[int]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, located as precisely as known."""

    path: str
    line: int
    message: str
    claim_id: str | None = None
    field: str | None = None
    # False for rules about how well a claim is tied to its checks (binding): `kb validate` fails on them,
    # but they do not stop the index from being built, since the records themselves are sound.
    blocking: bool = True

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        who = f" claim {self.claim_id}" if self.claim_id else ""
        what = f" field {self.field}:" if self.field else ""
        return f"{where}:{who}{what} {self.message}".replace(":  ", ": ")


# libyaml's parser when PyYAML was built with it: the pure-Python one takes ~2 s for
# the corpus, which would break the cold-index budget. Both give node marks.
_Base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


_RESOLVED: dict[tuple[Any, Any, Any], str] = {}


class _Loader(_Base):  # type: ignore[valid-type,misc]
    duplicate_keys: list[tuple[int, str]]

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        """The tag of a node, memoised for short scalars: keys and enum values repeat thousands of times.

        Resolution depends only on (kind, value, implicit) and the loader's fixed resolver table, so the
        cache cannot change a result; long strings (statements) are resolved directly and not kept.
        """
        if value is not None and (not isinstance(value, str) or len(value) > 48):
            return super().resolve(kind, value, implicit)
        key = (kind, value, implicit)
        tag = _RESOLVED.get(key)
        if tag is None:
            tag = _RESOLVED[key] = super().resolve(kind, value, implicit)
        return tag


_STR = "tag:yaml.org,2002:str"


def _item(loader: _Loader, node: yaml.Node) -> Any:
    """A child's value; a plain string scalar is its text (what SafeConstructor would return, minus the
    per-node bookkeeping that dominated reading 10,000 claims)."""
    if node.__class__ is yaml.ScalarNode and node.tag == _STR:
        return node.value
    return loader.construct_object(node, deep=True)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = _item(loader, key_node)
        if not isinstance(key, str | int | float | bool) or key is None:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain scalar (a name)",
                                                     key_node.start_mark)
        if key in out:
            loader.duplicate_keys.append((key_node.start_mark.line + 1, str(key)))
        out[key] = _item(loader, value_node)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(_item(loader, child) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    if len(node.value) > 40:  # no count in this KB has 40 digits; Python refuses > 4300 anyway
        raise yaml.constructor.ConstructorError(None, None, f"the number {node.value[:20]}... is too long",
                                                node.start_mark)
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
# Dates stay strings: a claim's "2026-07-22" is text, and pydantic parses dates where wanted.
_Loader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


MAX_EXPANDED = 2_000_000  # nodes after aliases are expanded: the corpus's largest file has ~150k
MAX_DEPTH = 64


def _tree_bounded(root: Any, display: str) -> Problem | None:
    """`_bounded` for a document without anchors: a plain tree, so one top-down walk counts and measures it."""
    stack = [(root, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            return Problem(display, node.start_mark.line + 1, f"nests deeper than {MAX_DEPTH} levels")
        if count > MAX_EXPANDED:
            return Problem(display, node.start_mark.line + 1,
                           f"expands to more than {MAX_EXPANDED} YAML nodes (aliases inside aliases?)")
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((c, depth + 1) for c in node.value)
    return None


def _bounded(root: Any, display: str, may_alias: bool = True) -> Problem | None:
    """Refuse documents whose alias expansion or nesting is unbounded in practice (billion laughs, deep nests).

    Aliases (`*name`) are fine for small reuse; the expanded size is computed per
    node with memoisation, so measuring a bomb costs no more than parsing it.
    """
    if root is None:
        return None
    if not may_alias:
        return _tree_bounded(root, display)
    size: dict[int, int] = {}
    depth_of: dict[int, int] = {}
    order: list[Any] = []
    stack = [(root, False)]
    while stack:  # iterative post-order over the node graph (a DAG: the composer forbids recursive aliases)
        node, done = stack.pop()
        if id(node) in size:
            continue
        children = ([c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode)
                    else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            size[id(node)] = min(1 + sum(size[id(c)] for c in children), MAX_EXPANDED + 1)
            depth_of[id(node)] = 1 + max((depth_of[id(c)] for c in children), default=0)
            order.append(node)
            if size[id(node)] > MAX_EXPANDED:
                return Problem(display, node.start_mark.line + 1,
                               f"expands to more than {MAX_EXPANDED} YAML nodes (aliases inside aliases?)")
            if depth_of[id(node)] > MAX_DEPTH:
                return Problem(display, node.start_mark.line + 1, f"nests deeper than {MAX_DEPTH} levels")
            continue
        stack.append((node, True))
        stack += [(c, False) for c in children if id(c) not in size]
    return None


def read_yaml(path: Path, display: str) -> tuple[Any, list[Problem]]:
    """Parse one YAML file; returns (data, problems). Data is None on failure."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [Problem(display, line, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})")]
    if not text.strip():
        return None, [Problem(display, 1, "is empty; expected a mapping with a top-level list")]
    loader = _Loader(text)
    loader.duplicate_keys = []
    try:
        node = loader.get_single_node()
        bounded = _bounded(node, display, may_alias="&" in text)  # no anchor, no alias: a tree
        if bounded:
            return None, [bounded]
        if node is None:
            return None, [Problem(display, 1, "holds no YAML document (only comments or an empty document)")]
        data = loader.construct_document(node)
        if data is None:
            return None, [Problem(display, node.start_mark.line + 1, "holds an empty document (null); expected a mapping")]
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else 1
        return None, [Problem(display, line, f"is not valid YAML: {exc.reason} (character {exc.character!r})")]
    except RecursionError:
        return None, [Problem(display, 1, "nests too deeply to read")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else 0
        problem = getattr(exc, "problem", None) or str(exc)
        ctx = getattr(exc, "context_mark", None)
        if ctx is not None and ctx.line + 1 != line:
            problem += f" (in what {getattr(exc, 'context', 'started')} at line {ctx.line + 1})"
        return None, [Problem(display, line, f"is not valid YAML: {problem}")]
    finally:
        loader.dispose()
    problems = [Problem(display, ln, f"key {key!r} appears twice in one mapping") for ln, key in loader.duplicate_keys]
    return data, problems


def line_of(data: Any, loc: tuple[Any, ...]) -> int:
    """Best line for a pydantic error location inside `data`."""
    line = getattr(data, "line", 0)
    node = data
    for part in loc:
        if isinstance(node, LineDict) and part in node:
            line = node.key_lines.get(part, line)
            node = node[part]
        elif isinstance(node, LineList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        else:
            break
    return line
