"""Issue #22 item 7: a derived verdict that rests on a traits instance the KB typed says so.

`kb.index.instance` reads the instance a `code.constexpr` prelude types and the instances
`code.launch-trace` runs recorded the pinned dispatch launching; the index carries the
grade note (kb-instance / dispatch-seen) to `kb claims --json`, `kb show` and STATUS.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from kb.index.instance import Instance, Launch, grade_notes, instances, note, typed_instances
from tests.conftest import claim, write_claims
from tests.test_evidence_trust import _run, _write

FA1 = "6d48e14a6c2f551db96f0badc658a6279a929df3"
TYPED = "using T = FMHA_kernel_traits<128, 128, 16, 1, 4, 0x08u, __half>;"
LAUNCHED = ("void fmha_fwd_loop_kernel<FMHA_kernel_traits<128, 128, 16, 1, 4, 8u, __half>, false, false>"
            "(FMHA_fprop_params)")


def test_instances_are_read_with_hex_flags_and_defaulted_arguments() -> None:
    [typed] = instances(TYPED)
    assert typed == Instance("FMHA_kernel_traits", ("128", "128", "16", "1", "4", "8", "__half"))
    nested = instances("Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t, "
                       "Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t>>")
    short = Instance("Flash_fwd_kernel_traits", ("128", "128", "64", "4", "false", "false", "cutlass::half_t"))
    assert short.covered_by(nested[0])  # the demangled name spells out the defaulted trailing argument
    assert not Instance("Flash_fwd_kernel_traits", ("128", "128", "64", "4", "false", "false",
                                                    "cutlass::bfloat16_t")).covered_by(nested[0])


def test_only_literal_instances_count_as_typed() -> None:
    assert typed_instances({"prelude": TYPED})
    # A prelude naming the dispatch's own alias or a template parameter types no instance.
    assert typed_instances({"prelude": "using T = Kernel_traits;"}) == []
    assert typed_instances({"prelude": "using T = FMHA_kernel_traits<S, D, STEP, 1, 4, F, elem_type>;"}) == []
    assert typed_instances({"prelude": "snip"}, snippet=lambda name: TYPED) == [instances(TYPED)[0]]


def test_the_note_names_the_first_instance_no_trace_shows() -> None:
    seen = Launch(instances(LAUNCHED)[0], "x.trace", "r1", "fa1-v1.0.9 fwd on a virtual A100")
    kind, why = note(instances(TYPED), [seen])
    assert kind == "dispatch-seen" and "x.trace" in why and "virtual A100" in why
    bf16 = Launch(instances(LAUNCHED.replace("__half", "__nv_bfloat16"))[0], "x.trace", "r1", "bf16")
    kind, why = note(instances(TYPED), [bf16])
    assert kind == "kb-instance" and "FMHA_kernel_traits<128, 128, 16, 1, 4, 8, __half>" in why
    # Another derived check deciding the verdict too: no note.
    runs = {"c": [{"verifier": "code.constexpr", "params": {"prelude": TYPED}, "grade": "derived"},
                  {"verifier": "source.structure", "params": {}, "grade": "derived"}],
            "d": [{"verifier": "code.constexpr", "params": {"prelude": TYPED}, "grade": "derived"},
                  {"verifier": "source.lines", "params": {}, "grade": "cited"}]}
    assert set(grade_notes(runs, [])) == {"d"}


def _constexpr_claim() -> dict:
    return claim("test.fa1.traits", generation="FA1", label="source-backed",
                 statement="The FA1 forward traits instance the notes discuss uses 4 warps.",
                 anchors=[dict(source="fa-notes", path="docs/notes/fa1-checkpoint.md", heading="1-the-one-screen-model",
                               sha256="eced106c570d94080651fae83c3ffcced806168691c499c0628391f0b67e7761"),
                          dict(source="flash-attention", sha=FA1, path="csrc/flash_attn/src/fmha_fwd_hdim128.cu",
                               lines=[8, 11], sha256="27552351d2a8b4e4b03af9ea6e6437c7a0a21e7ca98bffd76cf10bac66ae3f2a")],
                 checks=[{"verifier": "code.constexpr",
                          "params": {"anchor": 1, "include": ["csrc/flash_attn/src/fmha/kernel_traits.h"],
                                     "prelude": TYPED, "values": {"warps": "T::Cta_tile_p::WARPS_N"}},
                          "expect": {"warps": {"equals": 4}}}])


def _trace_claim(kernels: str) -> dict:
    c = yaml.safe_load((Path(__file__).resolve().parents[1] / "claims" / "dispatch.yaml").read_text())["claims"][0]
    return {**c, "id": "test.fa1.dispatch"}, kernels


def _overall(project: Path, run_kb, cid: str) -> dict:
    rows = {r["id"]: r for r in json.loads(run_kb("claims", "--json").stdout)}
    return rows[cid]


def test_the_index_marks_a_kb_typed_instance_until_a_trace_shows_the_dispatch(project: Path, run_kb) -> None:
    c = _constexpr_claim()
    t, _ = _trace_claim(LAUNCHED)
    write_claims(project, "inst", [c, t])
    _write(project, [_run(project, c, measurements={"warps": {"value": 4, "unit": ""}})])
    row = _overall(project, run_kb, "test.fa1.traits")
    assert row["strength"] == "derived" and row["grade_note"] == "kb-instance", (row["status"], row["status_reason"])
    assert "typed by the KB" in row["grade_note_why"]

    # A launch trace whose recorded kernels hold the bf16 instance does not show the fp16 one.
    bf16 = {"kernels": {"value": LAUNCHED.replace("__half", "__nv_bfloat16"), "unit": ""},
            "harness_rc": {"value": 0, "unit": ""}}
    _write(project, [_run(project, t, measurements=bf16, verdict="refutes", reason="bf16")], tag="bbbbbbbbbbbb")
    assert _overall(project, run_kb, "test.fa1.traits")["grade_note"] == "kb-instance"

    # The trace of the fp16 input shows the pinned dispatch launching exactly the typed instance.
    meas = {"kernels": {"value": LAUNCHED, "unit": ""}, "harness_rc": {"value": 0, "unit": ""},
            **{f"traits_arg{i}": {"value": v, "unit": ""} for i, v in enumerate([128, 128, 16, 1, 4, 8])},
            "traits": {"value": "FMHA_kernel_traits<128, 128, 16, 1, 4, 8u, __half>", "unit": ""}}
    _write(project, [_run(project, t, measurements=meas, started="2026-11-20T11:00:00+00:00")],
           stamp="20261120T110500Z", tag="cccccccccccc")
    row = _overall(project, run_kb, "test.fa1.traits")
    assert row["grade_note"] == "dispatch-seen" and "test.fa1.dispatch" in row["grade_note_why"], row
    shown = run_kb("show", "test.fa1.traits").stdout
    assert "grade: dispatch-seen" in shown
