"""Drives a pinned build's host code once against kb's virtual-device runtime (kb's own code).

Started by verifiers/pinned/launch.py as `python -I -S launch_child.py ROOT` in the sandbox, with
LD_LIBRARY_PATH naming the stand-in libcudart.so.13 / libcuda.so.1 and KB_VDEV / KB_VDEV_TRACE set. Reads
one JSON task on stdin (library path, phase, the ABI's argument values) and prints one JSON line: the
return code and error text of the harness call. The launches themselves are in the trace file. No device
memory exists: tensors are distinct fake addresses that the host code passes on but never dereferences.
"""

import ctypes
import json
import sys


def main() -> None:
    """Fill the ABI from the task, size the workspace, call the forward or backward once."""
    sys.path.insert(0, sys.argv[1])  # the project root, for the ABI struct (a stdlib-only module)
    from verifiers.pinned.build import KbAttnArgs

    task = json.loads(sys.stdin.read())
    lib = ctypes.CDLL(task["library"])
    for fn in ("kb_fwd", "kb_bwd"):
        getattr(lib, fn).argtypes = [ctypes.POINTER(KbAttnArgs), ctypes.c_void_p]
        getattr(lib, fn).restype = ctypes.c_int
    lib.kb_workspace.argtypes = [ctypes.POINTER(KbAttnArgs), ctypes.c_int]
    lib.kb_workspace.restype = ctypes.c_int
    lib.kb_last_error.restype = ctypes.c_char_p
    a = KbAttnArgs()
    for name, value in task["args"].items():
        setattr(a, name, value)
    fake = 0x7F0000000000
    for i, name in enumerate(("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv")):
        setattr(a, name, fake + (i << 32))
    phase = 0 if task["phase"] == "fwd" else 1
    rc = lib.kb_workspace(ctypes.byref(a), phase)
    if rc == 0:
        for i in range(4):
            a.ws[i] = fake + ((16 + i) << 32) if a.ws_bytes[i] else None
        rc = (lib.kb_fwd if phase == 0 else lib.kb_bwd)(ctypes.byref(a), None)
    print(json.dumps({"rc": rc, "error": lib.kb_last_error().decode(errors="replace") if rc else "",
                      "ws_bytes": [int(a.ws_bytes[i]) for i in range(4)]}))


if __name__ == "__main__":
    main()
