"""The layers of docs/architecture.md hold: no import cycle, no import from a higher layer.

Every import counts, also those inside functions and under TYPE_CHECKING, and the modules a file loads by name
(`importlib.import_module` over a table of module names: the CLI's commands, the SDK's lazy names, the KEK
providers), so a lazy import cannot hide a cycle or an upward dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# top-level package -> its folder: the evaluation harness is its own distribution (evaluation/pyproject.toml)
PACKAGES = {"gpu": ROOT / "gpu", "verifier": ROOT / "verifier", "workers": ROOT / "workers",
            "hero_eval": ROOT / "evaluation" / "hero_eval"}

SERVICES = ("audit", "keys", "auth", "verify", "jobs", "registry")
# The composition roots: what builds a process's objects. Only the entry points (and, for the process builder,
# the api layer) import them; nothing imports up into one.
ROOTS = {"verifier.api.app": {"entry"}, "verifier.process": {"api", "entry"}}

# layer -> the layers it may import (besides itself)
MAY_IMPORT: dict[str, set[str]] = {
    "gpu": set(),
    "base": set(),
    "engine": {"gpu", "base"},
    "lm": {"base", "engine"},  # engine: the profile whose tokenizer it checks (TokenizerCache.for_profile)
    "audit": {"base"},
    "keys": {"base", "engine", "audit"},
    "auth": {"base", "engine", "audit"},  # engine: the profile's depth bounds a grant
    "verify": {"base", "engine", "lm", "audit", "keys", "auth"},
    "jobs": {"base", "engine", "lm", "audit", "keys", "auth", "verify"},
    "evaluation": {"gpu", "base", "engine", "lm", "sdk"},  # sdk: the transformers generation adapter
    "sdk": {"gpu", "engine", "lm"},  # verifier.provider (provider SDK), verifier.client: no service import
    "registry": {"base", "engine", "audit", "keys", "sdk"},  # the provider registry
    "process": {"base", "engine", "lm", "audit", "keys", "auth", "verify", "jobs"},  # verifier.process: the builder
    "api": {"base", "engine", "lm", "audit", "keys", "auth", "verify", "jobs", "registry", "sdk", "process"},
    "entry": {"gpu", "base", "engine", "lm", "audit", "keys", "auth", "verify", "jobs", "evaluation", "api",
              "registry", "sdk", "process"},
}


def layer(module: str) -> str:
    if module == "gpu" or module.startswith("gpu."):
        return "gpu"
    if module.startswith(("verifier.cli", "workers")) or module == "verifier.offline":  # offline: the CLI's API
        return "entry"
    if module == "verifier.api" or module.startswith("verifier.api."):  # the app, routes and console
        return "api"
    if module in ("verifier", "verifier.base") or module.startswith("verifier.base."):
        return "base"
    if module in ("verifier.provider", "verifier.client") or module.startswith("verifier.provider."):
        return "sdk"
    if module == "hero_eval" or module.startswith("hero_eval."):  # the harness (evaluation/hero_eval/)
        return "evaluation"
    for name in ("engine", *SERVICES):
        if module == f"verifier.{name}" or module.startswith(f"verifier.{name}."):
            return name
    if module in ("verifier.lm", "verifier.process"):
        return module.split(".")[1]
    raise AssertionError(f"{module} is in no layer: add it to docs/architecture.md and this test")


def module_name(path: Path) -> str:
    """The name a file imports as: from its package's folder (evaluation/hero_eval/x.py is `hero_eval.x`)."""
    for pkg, top in PACKAGES.items():
        if path.is_relative_to(top):
            parts = [pkg, *path.relative_to(top).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(f"{path} is in none of {sorted(PACKAGES)}")


def modules() -> dict[str, Path]:
    return {module_name(p): p for top in PACKAGES.values() for p in top.rglob("*.py")}


def _loads_by_name(tree: ast.AST) -> bool:
    """The file calls `import_module` (or `__import__`): the modules it names in strings are imports too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if called in ("import_module", "__import__"):
                return True
    return False


def imports_of(name: str, path: Path, known: set[str], source: str | None = None) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(source if source is not None else path.read_text())
    by_name = _loads_by_name(tree)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif by_name and isinstance(node, ast.Constant) and isinstance(node.value, str):
            mod = node.value.partition(":")[0]  # "module" or "module:factory"
            targets = [mod] if mod in known else []
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a module: the longest known prefix
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_real_imports():
    g = graph()
    assert "verifier.verify.runner" in g["verifier.jobs.drain"]
    assert "verifier.jobs.queue" in g["verifier.jobs.dispatch"]  # a function-local import counts
    assert "verifier.lm" in g["verifier.offline"]
    # modules loaded by name through importlib.import_module: the four sites
    assert "verifier.cli.serve" in g["verifier.cli"]  # the CLI's command table
    assert "verifier.provider.sampling" in g["verifier.provider"]  # the SDK's lazy names
    assert "verifier.keys.kek_openbao" in g["verifier.keys.kek"]  # "module:factory" of the KEK providers
    # the harness is walked under its import name, and the CLI's `hero eval` reaches it
    assert module_name(PACKAGES["hero_eval"] / "baselines" / "mpac.py") == "hero_eval.baselines.mpac"
    assert "hero_eval.baselines.synthid" in g["hero_eval.methods"] and "hero_eval.runner" in g["verifier.cli.evaluate"]
    assert not any(m.startswith(("evaluation", "verifier.evaluation")) for m in g)
    allowed = {"verifier.base.resources", "verifier.base.errors", "verifier.base.settings", "verifier.base.logs",
               "verifier.engine.profile"}
    assert not {d for d in g["verifier.lm"] if d.startswith("verifier.")} - allowed


def test_a_module_loaded_by_name_is_an_import():
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    src = "import importlib\nTABLE = {'x': 'pkg.a', 'y': 'pkg.b:make'}\nimportlib.import_module(TABLE['x'])\n"
    assert imports_of("pkg.c", ROOT / "pkg" / "c.py", known, src) == {"pkg.a", "pkg.b"}
    # strings name nothing in a file that loads no module by name
    assert imports_of("pkg.c", ROOT / "pkg" / "c.py", known, "TABLE = {'x': 'pkg.a'}\n") == set()


def test_no_import_cycles():
    assert cycles(graph()) == []


def folder(module: str) -> str:
    """The folder a module lives in (`verifier.jobs`, `gpu`, `workers`, `hero_eval`); one directly under verifier/
    is its own."""
    parts = module.split(".")
    return parts[0] if parts[0] in ("gpu", "workers", "hero_eval") else ".".join(parts[:2])


def folder_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in g.items():
        mine = folder(mod)
        out.setdefault(mine, set()).update(f for f in map(folder, deps) if f != mine)
    return out


def test_no_folder_cycles():
    """Modules without a cycle can still make their folders one (an endpoint in jobs/ importing the composition
    root that imports jobs/): the folders must show the layers too."""
    assert cycles(folder_graph(graph())) == []


def test_folder_cycle_detection_can_fail():
    g = {"verifier.jobs.api": {"verifier.context"}, "verifier.context": {"verifier.jobs.drain"},
         "verifier.jobs.drain": set()}
    assert cycles(g) == [] and cycles(folder_graph(g)) == [["verifier.context", "verifier.jobs"]]


def into_roots(g: dict[str, set[str]]) -> list[str]:
    return [f"{mod} -> {dep}" for mod, deps in g.items() for dep in deps
            if dep in ROOTS and layer(mod) not in ROOTS[dep]]


def test_nothing_imports_up_into_a_composition_root():
    assert into_roots(graph()) == []


def test_an_import_into_a_composition_root_is_found():
    g = {"verifier.jobs.drain": {"verifier.process"}, "verifier.api.jobs": {"verifier.process"},
         "verifier.cli.serve": {"verifier.api.app"}, "verifier.api.keys": {"verifier.api.app"}}
    assert into_roots(g) == ["verifier.jobs.drain -> verifier.process", "verifier.api.keys -> verifier.api.app"]


def test_cycle_detection_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in g.items():
        mine = layer(mod)
        for dep in deps:
            theirs = layer(dep)
            if theirs != mine and theirs not in MAY_IMPORT[mine]:
                bad.append(f"{mod} ({mine}) -> {dep} ({theirs})")
    return bad


def test_no_upward_imports():
    assert upward(graph()) == []


def test_an_upward_import_is_found():
    g = {"verifier.engine.decoder": {"gpu.step", "verifier.keys.cache"}, "verifier.provider.step": {"verifier.base.db"},
         "verifier.verify.runner": {"hero_eval.corpus"}, "hero_eval.runner": {"verifier.engine.decoder"}}
    assert upward(g) == ["verifier.engine.decoder (engine) -> verifier.keys.cache (keys)",
                         "verifier.provider.step (sdk) -> verifier.base.db (base)",
                         "verifier.verify.runner (verify) -> hero_eval.corpus (evaluation)"]


def test_schema_modules_load_without_the_engine():
    """Alembic (migrations/env.py) imports the ORM models: that must not pull torch or scipy."""
    code = (
        "import sys, verifier.audit.models, verifier.jobs.models, verifier.keys.models, verifier.registry.models, "
        "verifier.base.db, "
        "verifier.base.settings; heavy = {'torch', 'scipy', 'transformers'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
