"""gpu.device-props: what the card at hand reports about itself, for claims about one named card.

A hardware sheet states a card's memory or SM count; this check reads the same figures from the card: the
CUDA runtime (torch.cuda.get_device_properties) and the driver (nvidia-smi). It runs only on the card the
claim names, matched on the driver's product name (`name_contains`: every token must occur), and skips
elsewhere with the reason: an H200's 141 GB says nothing about an H100 SXM5's 80 GB.

Sizes are reported in GiB. A card's marketed "80 GB" is 80 GiB of HBM, of which the driver reports slightly
less (a reserved region), so a claim's band says how much it allows below the nominal figure.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from pydantic import Field

from kb.registry import Context, Outcome, Params, Requirements, verifier


class DeviceParams(Params):
    """Which card the claim is about, by tokens of the driver's product name."""

    # e.g. ["H100", "HBM3"]: the SXM5 H100 reports "NVIDIA H100 80GB HBM3"; the PCIe card "NVIDIA H100 PCIe",
    # the NVL card "NVIDIA H100 NVL"
    name_contains: list[str] = Field(min_length=1)
    # the card's architecture, so a machine without it is told so before anything runs (90 for an H100)
    min_cc: int | None = None
    max_cc: int | None = None


def _smi() -> dict[str, str]:
    """nvidia-smi's own view of device 0 (memory.total in MiB, product name, SM clock limit)."""
    if not shutil.which("nvidia-smi"):
        return {}
    fields = "name,memory.total,pci.device_id"
    res = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    vals = [v.strip() for v in res.stdout.strip().splitlines()[0].split(",")] if res.returncode == 0 else []
    return dict(zip(fields.split(","), vals, strict=False))


@verifier("gpu.device-props", kind="gpu-profile", params=DeviceParams,
          requires=Requirements(cuda=True), timeout_s=120)
def device_props(p: DeviceParams, ctx: Context) -> Outcome:
    """Read device 0's name, memory and SM count from the runtime and the driver; skip on another card."""
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = _smi()
    name = smi.get("name") or props.name
    missing = [t for t in p.name_contains if t.lower() not in name.lower()]
    if missing:
        return Outcome(verdict="skipped", reason=(
            f"needs a card whose product name contains {' and '.join(map(repr, p.name_contains))}; "
            f"this one is {name!r}"))
    meas: dict[str, tuple[Any, str]] = {
        "runtime_total_memory_gib": (round(props.total_memory / 2**30, 3), "GiB"),
        "sm_count": (props.multi_processor_count, "SMs"),
        "compute_capability": (props.major * 10 + props.minor, ""),
    }
    if smi.get("memory.total"):
        meas["driver_total_memory_gib"] = (round(float(smi["memory.total"]) / 1024, 3), "GiB")
    env = {"device_name": name, "pci_device_id": smi.get("pci.device_id"),
           "driver_total_memory_mib": smi.get("memory.total"), "runtime_total_memory_bytes": props.total_memory}
    return Outcome(measurements=meas, environment=env,
                   log=f"{name}: {props.total_memory} bytes (runtime), {smi.get('memory.total')} MiB (driver)")
