"""The CPU side of gpu.toolkit-bits and gpu.prefix-plans: SASS normalisation, parameters, and the skip without builds."""

from __future__ import annotations

from verifiers.gpu import toolkits

LISTING = """
\tcode for sm_90
\t\tFunction : _Z4kernPf
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0010*/                   FFMA R2, R2, R3, R4 ;                  /* 0x0000000302027223 */
\t\t..........
\t\tFunction : _Z5otherPf
        /*0000*/                   EXIT ;                                 /* 0x000000000000794d */
"""


def test_normalised_sass_drops_addresses_and_encodings() -> None:
    funcs = toolkits.normalised_sass(LISTING)
    assert funcs == {"_Z4kernPf": "LDC R1, c[0x0][0x28] ;\nFFMA R2, R2, R3, R4 ;", "_Z5otherPf": "EXIT ;"}
    moved = LISTING.replace("/*0010*/", "/*0020*/").replace("0x0000000302027223", "0x1111111302027223")
    assert toolkits.normalised_sass(moved) == funcs  # where code sits and how it is encoded are not the code
    changed = LISTING.replace("FFMA R2, R2, R3, R4", "FFMA R2, R3, R2, R4")
    assert toolkits.normalised_sass(changed)["_Z4kernPf"] != funcs["_Z4kernPf"]


def test_no_second_build_skips_with_the_reason(monkeypatch) -> None:
    monkeypatch.delenv(toolkits.ALT_ENV, raising=False)
    out = toolkits.toolkit_bits(toolkits.ToolkitParams(impl="fa1-v1.0.9", phase="forward"), None)
    assert out.verdict == "skipped" and toolkits.ALT_ENV in out.reason


def test_only_pinned_builds_are_compared(monkeypatch) -> None:
    import pytest

    monkeypatch.setenv(toolkits.ALT_ENV, "/nonexistent")
    with pytest.raises(ValueError, match="compares two builds of a pin"):
        toolkits.toolkit_bits(toolkits.ToolkitParams(impl="sdpa-flash", phase="forward"), None)


def test_prefix_plans_params_need_a_causal_self_attention_prefix() -> None:
    import pytest
    from pydantic import ValidationError

    from verifiers.gpu.plans import PrefixParams

    ok = PrefixParams(impl="fa1-v1.0.9", seqlen_q=256, prefix=128, head_dim=64, causal=True)
    assert ok.prefix == 128 and ok.min_cc == 90  # a pinned build is sm_90 unless the check says otherwise
    for bad, why in (({"causal": False}, "causal"), ({"prefix": 256}, "prefix"), ({"seqlen_k": 512}, "seqlen_k")):
        with pytest.raises(ValidationError, match=why):
            PrefixParams(**{"impl": "fa1-v1.0.9", "seqlen_q": 256, "prefix": 128, "head_dim": 64, "causal": True, **bad})
