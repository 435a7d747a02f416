"""Fetch FlashInfer's wheels for an offline GPU host and drop the kernel sources it never builds here.

    python3 benchmarks/flashinfer_wheels.py DIR

Downloads flashinfer-python 0.7.2 and the apache-tvm-ffi it requires (CPython 3.12, manylinux
x86-64) into DIR, then rewrites the FlashInfer wheel without the CUDA sources of the kernels the
tree-attention benchmark does not JIT-compile (MoE, GEMM, sampling, ... under ``data/csrc/*/``,
CUTLASS/CCCL examples, tests and Python bindings). Everything Python stays, so ``import
flashinfer`` is unchanged; the wheel shrinks from 65 MB to about 30 MB. Install on the host with

    python3 -m pip install --no-index --no-deps --target /tmp/site DIR/*.whl
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

FLASHINFER = "flashinfer-python==0.7.2"
TVM_FFI = "apache-tvm-ffi>=0.1.11,<0.2"  # flashinfer-python 0.7.2's Requires-Dist
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
DROP_PREFIXES = tuple(
    "flashinfer/data/" + p
    for p in ("cutlass/examples/", "cutlass/python/", "cutlass/test/", "cccl/benchmarks/", "cccl/ci/", "cccl/docs/", "cccl/python/")
)


def keep(name: str) -> bool:
    """Whether a wheel member is needed to import FlashInfer and JIT its attention kernels."""
    if name.startswith(DROP_PREFIXES):
        return False
    if name.startswith("flashinfer/data/csrc/"):
        return "/" not in name[len("flashinfer/data/csrc/"):]  # top-level sources: decode, prefill, cascade, page
    return True


def slim(wheel: Path) -> tuple[int, int]:
    """Rewrite ``wheel`` in place keeping only ``keep`` members; regenerate RECORD. (old, new) bytes."""
    before = wheel.stat().st_size
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in src.infolist():
            if info.filename == record_name or not keep(info.filename):
                continue
            data = src.read(info)
            dst.writestr(info, data, zipfile.ZIP_DEFLATED)
            if not info.is_dir():
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                lines.append(f"{info.filename},sha256={digest},{len(data)}")
        lines.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(lines) + "\n")
    tmp.replace(wheel)
    return before, wheel.stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="folder to put the wheels in")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(args.dir), FLASHINFER, TVM_FFI]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    if subprocess.run(cmd).returncode != 0:
        print("error: pip download failed; check that PyPI is reachable", file=sys.stderr)
        return 1
    wheels = sorted(args.dir.glob("flashinfer_python-0.7.2-*.whl"))
    if not wheels:
        print(f"error: no flashinfer_python-0.7.2 wheel in {args.dir}", file=sys.stderr)
        return 1
    before, after = slim(wheels[0])
    print(f"{wheels[0].name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
