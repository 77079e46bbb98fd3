"""Benchmarks stand on the product, not on the test suite or the CLI's command modules.

A script under benchmarks/ that imports a test module measures with code no release ships and breaks when a test
is renamed; one that imports `hero bench`'s command modules (`verifier.cli.bench`, `verifier.cli.bench_serve`:
argument wiring) breaks when the command's flags move. What the scripts share lives in benchmarks/_common.py, the
statistics in verifier.base.timing, and the figures `hero bench` prints in verifier.cli.bench_figures. Every
import counts, also those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("tests", "verifier.cli.bench", "verifier.cli.bench_serve")


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f"{f}.") for f in FORBIDDEN)


def forbidden_imports(source: str) -> list[str]:
    """The forbidden modules a file imports, anywhere in it: `import m`, `from m import x` (m named), and
    `from verifier.cli import bench` (the module it names)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if _forbidden(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _forbidden(node.module):
                out.add(node.module)
            else:
                out.update(m for a in node.names if _forbidden(m := f"{node.module}.{a.name}"))
    return sorted(out)


def test_no_benchmark_imports_a_test_module_or_the_bench_command():
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(scripts) > 10  # the walk sees the scripts
    bad = {p.name: found for p in scripts if (found := forbidden_imports(p.read_text()))}
    assert bad == {}


def test_the_check_finds_each_kind_of_forbidden_import():
    src = (
        "import json\n"
        "from _common import emit\n"
        "from verifier.cli.bench_figures import decode_figures\n"
        "def main():\n"
        "    from tests.helpers.keys import make_keyset\n"
        "    import tests.provider.test_vllm\n"
        "    from verifier.cli.bench import median_interval\n"
        "    from verifier.cli import bench_serve\n"
    )
    assert forbidden_imports(src) == ["tests.helpers.keys", "tests.provider.test_vllm", "verifier.cli.bench",
                                      "verifier.cli.bench_serve"]
    assert forbidden_imports("from verifier.cli.bench_figures import bench_texts\nimport testsuite\n") == []
