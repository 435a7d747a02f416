"""Build deft_ws's kernel for sm_90 without a GPU and print what each build takes, as JSON.

Run as a script, outside the Triton interpreter (which the CPU tests turn on, and which cannot
compile): ``python ws_build.py``. One line per build: rows, flat, early, dtype, shared bytes,
warps, whether it signals a dependent launch, how many mbarriers it initialises, and its
per-thread stack (register spills; null where Triton ships no cuobjdump to read it).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from thoughttree.kernels import deft_ws
from thoughttree.kernels.plan.workplan import ITEM_FIELDS

BUILDS = [(rows, flat, early, dtype) for rows in sorted(deft_ws.TILES) for flat, early, dtype in ((True, False, "bf16"), (False, True, "fp16"))]


def build(rows: int, flat: bool, early: bool, dtype: str) -> triton.compiler.CompiledKernel:
    tile = deft_ws.TILES[rows]
    fn = deft_ws.ws_partial_kernel
    pointers = {"Q": dtype, "K": dtype, "V": dtype, "PO": "fp32", "PLSE": "fp32",
                **{n: "i32" for n in ("SLOTS", "ITEMS", "QPERM", "QNODE", "QVIS")}}
    constants = dict(HQ=32, G=4, D=128, BLOCK_N=deft_ws.BLOCK_N, NFIELDS=ITEM_FIELDS, FLAT=flat, STAGES=tile.stages,
                     PW=deft_ws.PRODUCER_WARPS, C_REGS=tile.consumer_regs, P_REGS=tile.producer_regs, EARLY=early,
                     NC=tile.consumers)
    signature = {n: "*" + pointers[n] if n in pointers else "constexpr" if n in constants else
                 "fp32" if n == "scale_log2" else "i32" for n in fn.arg_names}
    # As Triton specialises a launch on 16-byte-aligned pointers and strides divisible by 16.
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
               if n in pointers or n.startswith("stride") or n == "page_size"}
    source = GluonASTSource(fn, signature, constants, aligned)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": tile.max_regs})


def stack_bytes(kernel: triton.compiler.CompiledKernel) -> int | None:
    import triton.backends.nvidia as nvidia

    tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
    if not os.path.exists(tool):
        return None
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return int(out.split("STACK:")[1].split()[0])


if __name__ == "__main__":
    for rows, flat, early, dtype in BUILDS:
        k = build(rows, flat, early, dtype)
        print(json.dumps(dict(rows=rows, flat=flat, early=early, dtype=dtype, shared=k.metadata.shared,
                              warps=k.metadata.num_warps, dependents="griddepcontrol.launch_dependents" in k.asm["ptx"],
                              barriers=k.asm["ptx"].count("mbarrier.init"), stack=stack_bytes(k))))
