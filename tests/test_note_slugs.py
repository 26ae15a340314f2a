"""Note-section slugs follow GitHub's: code spans keep underscores, emphasis markers go, duplicates get -1."""

from __future__ import annotations

import pytest

from kb.pinned.notes import sections, slugify


@pytest.mark.parametrize(("title", "slug"), [
    ("Forward `num_splits`", "forward-num_splits"),
    ("12.3 Backward with `num_splits == 1`", "123-backward-with-num_splits--1"),
    ("What about ordinary `d_qk=d_v=512`?", "what-about-ordinary-d_qkd_v512"),
    ("A _stressed_ word and **bold**", "a-stressed-word-and-bold"),
    ("snake_case outside code", "snake_case-outside-code"),
    ("`__init__` stays", "__init__-stays"),
    ("3.1 Occupancy and CTA task assignment", "31-occupancy-and-cta-task-assignment"),
])
def test_slugs_match_github(title: str, slug: str) -> None:
    assert slugify(title) == slug


def test_duplicate_headings_are_numbered_and_fences_ignored() -> None:
    md = "# A `x_y`\n\ntext\n\n```\n# not a heading\n```\n\n# A `x_y`\n"
    assert [s.slug for s in sections(md)] == ["a-x_y", "a-x_y-1"]
