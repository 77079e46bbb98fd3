"""Every module path and code name the reference docs write in backticks resolves in the tree.

The docs (README.md and docs/*.md, not the dated history in docs/research/) name files (`verifier/engine/verdicts.py`),
dotted modules and their names (`verifier.lm.TokenizerCache`, `engine.fused.new_generator`), and a name right after
a file (`gpu/scoring.py` `ReadFilter`, `jobs/recovery.py::recovery_loop`). A move or a rename that leaves one of
them behind fails here, with the doc and the name. Names are resolved statically (each module's AST: its top-level
definitions, assignments and imports, and a class's members), so nothing is imported and no extra is needed.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/*.md"))]
DOCS = [d for d in DOCS if "research" not in d.relative_to(ROOT).parts]
# top-level folders whose paths docs name; `engine/x.py`-style paths are read under verifier/ too
TOP = ("verifier", "gpu", "workers", "migrations", "policies", "scripts", "benchmarks", "research", "tests", "deploy",
       "docs", "evaluation", "hero_eval")
PACKAGES = {"verifier": ROOT / "verifier", "gpu": ROOT / "gpu", "workers": ROOT / "workers",
            "hero_eval": ROOT / "evaluation" / "hero_eval"}
SHORT = ("engine", "api", "verify", "jobs", "keys", "audit", "auth", "registry", "provider", "cli", "base", "console")

SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?P<path>[A-Za-z0-9_./-]+\.(?:py|md|yaml|yml|json|jsonl|sh|c|ini|toml))"
                  r"(?:(?:::|:)(?P<name>[A-Za-z_][\w.]*))?$")
DOTTED = re.compile(r"^(?P<dotted>(?:verifier|gpu|workers|hero_eval)(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")
SHORT_DOTTED = re.compile(rf"^(?P<dotted>(?:{'|'.join(SHORT)})\.[a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")
IDENT = re.compile(r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\(.*\))?$")


def _file(path: str) -> Path | None:
    """The file a doc's path means: from the root, or (a short `engine/x.py`) under verifier/."""
    for cand in (ROOT / path, ROOT / "verifier" / path, ROOT / "evaluation" / path):
        if cand.exists():
            return cand
    return None


def _module_file(parts: list[str]) -> tuple[Path, int] | None:
    """The longest prefix of `parts` that is a module or package: (its file, how many parts it took)."""
    base = PACKAGES.get(parts[0])
    if base is None:
        return None
    for n in range(len(parts), 0, -1):
        folder = base.joinpath(*parts[1:n])
        for cand in (folder.with_suffix(".py"), folder / "__init__.py"):
            if cand.is_file() and (n > 1 or cand.name == "__init__.py"):
                return cand, n
    return None


@cache
def _names(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names of a module: definitions (with their node, for class members), assignments, imports."""
    tree = ast.parse(path.read_text())
    out: dict[str, ast.AST | None] = {}
    for node in tree.body:
        for sub in ([node] if not isinstance(node, ast.If | ast.Try) else ast.walk(node)):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out[sub.name] = sub
            elif isinstance(sub, ast.Assign | ast.AnnAssign):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            out.setdefault(n.id, None)
            elif isinstance(sub, ast.Import | ast.ImportFrom):
                for a in sub.names:
                    out.setdefault((a.asname or a.name).split(".")[0], None)
    return out


def _members(cls: ast.ClassDef) -> set[str]:
    out = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            out.add(node.attr)
    return out


def _resolve_in(path: Path, dotted: str) -> bool:
    """`Name`, `Class.member` or `module_attr.x` inside the module at `path`."""
    if path.suffix != ".py":
        return True
    first, *rest = dotted.split(".")
    names = _names(path)
    if first not in names:
        return False
    node = names[first]
    if rest and isinstance(node, ast.ClassDef):
        return rest[0] in _members(node)
    return True  # a module-level value's attributes are not resolved statically


NATIVE = {"gpu._hero_kernels": ROOT / "gpu" / "_native" / "hero_kernels.c"}  # built at first use (gpu/cpu_kernel.py)


def _resolve_dotted(dotted: str) -> bool:
    if dotted in NATIVE:
        return NATIVE[dotted].is_file()
    parts = dotted.split(".")
    found = _module_file(parts)
    if found is None:
        return False
    path, n = found
    return n == len(parts) or _resolve_in(path, ".".join(parts[n:]))


def problems(doc: Path, text: str) -> list[str]:
    out = []
    spans = list(SPAN.finditer(text))
    for i, m in enumerate(spans):
        s = m.group(1).strip()
        where = f"{doc.relative_to(ROOT)}: `{s}`"
        if (pm := PATH.match(s)) and "/" in pm.group("path") and pm.group("path").split("/")[0] in (*TOP, *SHORT):
            path = _file(pm.group("path"))
            if path is None:
                out.append(f"{where}: no such file")
                continue
            name = pm.group("name")
            if name is None and i + 1 < len(spans) and text[m.end():spans[i + 1].start()].strip() == "":
                nm = IDENT.match(spans[i + 1].group(1).strip())  # `file.py` `Name`
                name = nm.group("name") if nm else None
            if name is not None and not _resolve_in(path, name):
                out.append(f"{where}: {name} is not defined there")
        elif (pm := re.match(r"^(?P<dir>[A-Za-z0-9_./-]+)/$", s)) and pm.group("dir").split("/")[0] in (*TOP, *SHORT):
            if _file(pm.group("dir")) is None:
                out.append(f"{where}: no such folder")
        elif dm := DOTTED.match(s):
            if not _resolve_dotted(dm.group("dotted")):
                out.append(f"{where}: does not resolve")
        elif dm := SHORT_DOTTED.match(s):
            dotted = dm.group("dotted")
            if not (_resolve_dotted(f"verifier.{dotted}") or _resolve_dotted(f"hero_eval.{dotted}")):
                out.append(f"{where}: does not resolve (read as verifier.{dotted})")
    return out


def test_every_code_name_in_the_docs_resolves():
    bad = [p for doc in DOCS for p in problems(doc, doc.read_text())]
    assert bad == [], "\n".join(bad)


def test_the_checker_finds_a_moved_module_and_a_missing_name():
    doc = ROOT / "docs" / "architecture.md"
    text = ("`verifier/engine/verdicts.py` `no_such_rule_here` and `verifier.settings.Settings` and "
            "`verifier/base/settings.py::Settings` and `gpu/nowhere.py` and `verifier.lm.TokenizerCache.for_profile` "
            "and `engine.fused.new_generator` and `verifier.lm.TokenizerCache.nope`")
    assert problems(doc, text) == [
        "docs/architecture.md: `verifier/engine/verdicts.py`: no_such_rule_here is not defined there",
        "docs/architecture.md: `verifier.settings.Settings`: does not resolve",
        "docs/architecture.md: `gpu/nowhere.py`: no such file",
        "docs/architecture.md: `verifier.lm.TokenizerCache.nope`: does not resolve",
    ]
