"""Builds the optional C evidence kernel (gpu/_native/hero_kernels.c) during `pip install`.

Everything else is declared in pyproject.toml. The extension is optional: without a C compiler the
install still succeeds and gpu/cpu_kernel.py builds it on first use or falls back to the torch path.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    compile_args: list[str] = ["/O2"]
else:
    compile_args = ["-O3", "-std=c99", "-fno-strict-aliasing", "-pthread"]

setup(
    ext_modules=[
        Extension(
            "gpu._hero_kernels",
            sources=["gpu/_native/hero_kernels.c"],
            extra_compile_args=compile_args,
            extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
            optional=True,
        )
    ]
)
