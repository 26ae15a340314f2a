"""code.instance-resources: kb's translation unit is one include, the claim's alias and a named instantiation; claims
data cannot put code there; and (where the FA1 clone is configured) a real compile reports what the claim expects."""

from __future__ import annotations

import pytest

from kb.records.models import Comparison
from kb.verify.expect import judge
from verifiers.pinned import instance as I

BASE = {"entry": "fa1-fwd-loop", "prelude": "using T = FMHA_kernel_traits<256, 128, 16, 1, 4, 0x08u, __nv_bfloat16>;"}


def test_unit_is_include_alias_and_one_instantiation() -> None:
    text = I.unit_text("csrc/flash_attn/src/fmha_fwd_launch_template.h", BASE["prelude"], "fa1-fwd-loop")
    assert text.splitlines()[0] == '#include "fmha_fwd_launch_template.h"'
    assert "using T = FMHA_kernel_traits<256, 128" in text
    assert text.rstrip().endswith("template void run_fmha_fwd_loop<T>(Launch_params<FMHA_fprop_params> &);")


@pytest.mark.parametrize("bad", [
    {"prelude": "using T = X<1>; int main() { return system(\"id\"); }"},   # a statement beside the alias
    {"prelude": "#include <cstdlib>\nusing T = X<1>;"},                       # a preprocessor line
    {"prelude": ""},                                                          # no instance at all
    {"entry": "anything"},                                                    # entries are kb's, by name
    {"flags": ["-Xcompiler", "-fplugin=x.so"]},                               # flags from the allow-list only
])
def test_claims_data_cannot_carry_code(bad: dict) -> None:
    with pytest.raises(ValueError):
        I.InstanceParams.model_validate({**BASE, **bad})


def test_a_changed_count_refutes() -> None:
    """The claim's expectation against the measured B_c = 256 figures, and against figures with no spill."""
    measured = {"registers": 255, "spill_stores": 2484}
    rules = {"registers": Comparison(equals=255), "spill_stores": Comparison(at_least=1)}
    assert judge(measured, rules)[0] == "supports"
    assert judge({**measured, "spill_stores": 0}, rules)[0] == "refutes"
