"""Builds the optional C evidence kernel (gpu/_native/hero_kernels.c) during `pip install`.

Everything else is declared in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and gpu/cpu_kernel.py builds it on first use or falls back to the torch path.
"""

import hashlib
import sys
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "gpu/_native/hero_kernels.c"
# gpu/cpu_kernel.py compares this with the source it sits beside: an edited kernel is never run from a stale build
SOURCE_SHA = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

if sys.platform == "win32":
    compile_args: list[str] = ["/O2"]
else:
    compile_args = ["-O3", "-std=c99", "-fno-strict-aliasing", "-pthread"]

setup(
    ext_modules=[
        Extension(
            "gpu._hero_kernels",
            sources=[SOURCE],
            define_macros=[("HERO_SOURCE_SHA", f'"{SOURCE_SHA}"')],
            extra_compile_args=compile_args,
            extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
            optional=True,
        )
    ]
)
