"""The CPU's integer dot-product instruction sets: onnxruntime's int8 kernels differ between them (AVX2
sums pairs of uint8 x int8 products in int16; VNNI and ARM dot products sum exactly in int32), so parity and
speed figures name the CPU they were measured on."""

from __future__ import annotations

import platform

_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "avx512bw", "avx2", "asimddp", "i8mm")


def cpu_name() -> str:
    """The machine and the dot-product instruction sets its CPU reports (Linux /proc/cpuinfo), e.g.
    "x86_64 avx2" or "x86_64 avx512_vnni avx512bw avx2"."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    return " ".join([platform.machine() or "unknown", *(f for f in _DOT_PRODUCT_FLAGS if f in flags)])
