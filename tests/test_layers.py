"""Imports point down only: a table of layers, and every module's imports read with `ast`.

Every import counts: module level, inside a function, under `if TYPE_CHECKING:`, relative or
absolute. The table names packages that do not exist yet (bridges, cli, telemetry), so their
first module is checked by the same rules.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_docs import DOCUMENTS, blocks_of

ROOT = Path(__file__).resolve().parents[1]

# Each source folder and the package it installs as (pyproject's package-dir).
SOURCES = {"agent_state": ROOT / "state", "agent_state.backends": ROOT / "backends"}


@dataclass(frozen=True)
class Layer:
    """A package of the project, the layers it may import, and whether only their public names."""

    prefix: str
    may_import: frozenset[str]
    public_only: bool = False


CORE = "agent_state"
_TOP = frozenset({CORE, "agent_state.backends", "agent_state.jsonpatch"})
LAYERS = {
    layer.prefix: layer
    for layer in [
        Layer("agent_state.backends", frozenset()),  # the storage layer: nothing of turns
        Layer("agent_state.jsonpatch", frozenset()),  # the RFC 6902 engine: stdlib only
        Layer(CORE, frozenset({"agent_state.backends", "agent_state.jsonpatch"})),
        Layer("agent_state.agui", _TOP, public_only=True),
        Layer("agent_state.bridges", _TOP, public_only=True),
        # the command line's import-m365 runs the M365 bridge's data mover
        # and `serve --inspect` the inspector
        Layer(
            "agent_state.cli",
            _TOP | {"agent_state.bridges", "agent_state.inspect"},
            public_only=True,
        ),
        # `python -m agent_state` is the command line's second door
        Layer("agent_state.__main__", frozenset({"agent_state.cli"}), public_only=True),
        # telemetry wraps the public doors it measures, the AG-UI endpoint among them
        Layer("agent_state.telemetry", _TOP | {"agent_state.agui"}, public_only=True),
        # the development state inspector: pages over the public core and storages
        Layer("agent_state.inspect", _TOP, public_only=True),
    ]
}

# Arrows today's code still has, each to be removed by the issue named; the test fails when
# one is gone too, so the list only shrinks.
KNOWN: dict[str, str] = {}


@dataclass(frozen=True)
class Arrow:
    """One import: the importing module, the module imported, and the name taken from it."""

    source: str
    target: str
    name: str | None = None


def layer_of(module: str) -> Layer | None:
    """The layer with the longest prefix that holds `module`; None outside the project."""
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    return None


def arrows_of(module: str, source: str, is_package: bool, known: set[str]) -> list[Arrow]:
    """Every import in `source`, relative ones resolved; `from p import m` of a module is p.m."""
    package = module if is_package else module.rpartition(".")[0]
    arrows: list[Arrow] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            arrows += [Arrow(module, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                arrows.append(
                    Arrow(module, submodule)
                    if submodule in known
                    else Arrow(module, base, alias.name)
                )
    return arrows


def broken_rules(arrow: Arrow) -> str | None:
    """Why `arrow` points the wrong way, or None when the table allows it."""
    home, target = layer_of(arrow.source), layer_of(arrow.target)
    if home is None or target is None or home is target:
        return None
    if target.prefix not in home.may_import:
        return f"{home.prefix} may not import {target.prefix}"
    private = [p for p in arrow.target.split(".")[1:] if p.startswith("_")]
    if home.public_only and (private or (arrow.name or "").startswith("_")):
        return f"{home.prefix} may use only public names of {target.prefix}"
    return None


def project_modules() -> dict[str, Path]:
    """Each module of the installed package and its source file."""
    modules: dict[str, Path] = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def violations(sources: dict[str, tuple[str, bool]]) -> dict[str, str]:
    """`source -> target: rule` for every arrow the table forbids, over {module: (code, is_pkg)}."""
    known = set(sources)
    found: dict[str, str] = {}
    for module, (source, is_package) in sources.items():
        for arrow in arrows_of(module, source, is_package, known):
            rule = broken_rules(arrow)
            if rule is not None:
                found[f"{arrow.source} -> {arrow.target}"] = rule
    return found


def test_the_tree_has_no_upward_arrow_beyond_the_known_ones() -> None:
    modules = project_modules()
    assert "agent_state.backends._memory" in modules and "agent_state.agui" in modules
    sources = {m: (p.read_text(), p.name == "__init__.py") for m, p in modules.items()}
    assert sorted(violations(sources)) == sorted(KNOWN)


def test_every_module_belongs_to_a_layer_of_the_table() -> None:
    assert [m for m in project_modules() if layer_of(m) is None] == []


@pytest.mark.parametrize(
    ("module", "code", "rule"),
    [
        (  # a type-only import counts
            "agent_state.backends._x",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import TurnIds\n",
            "agent_state.backends may not import agent_state",
        ),
        (  # an import inside a function counts
            "agent_state.jsonpatch._x",
            "def f() -> None:\n    from ..backends import Storage\n",
            "agent_state.jsonpatch may not import agent_state.backends",
        ),
        (
            "agent_state._x",
            "import agent_state.telemetry\n",
            "agent_state may not import agent_state.telemetry",
        ),
        (
            "agent_state._x",
            "from .agui import AGUIEndpoint\n",
            "agent_state may not import agent_state.agui",
        ),
        (  # a package that does not exist yet is held to its row of the table
            "agent_state.cli._main",
            "from agent_state._app import AgentApplication\n",
            "agent_state.cli may use only public names of agent_state",
        ),
        (
            "agent_state.bridges._adk",
            "from ..backends import _json\n",
            "agent_state.bridges may use only public names of agent_state.backends",
        ),
        (
            "agent_state.bridges._m365",
            "from agent_state.backends import _unavailable\n",
            "agent_state.bridges may use only public names of agent_state.backends",
        ),
    ],
)
def test_an_upward_or_private_arrow_is_reported(module: str, code: str, rule: str) -> None:
    sources = {module: (code, False), "agent_state.backends._json": ("", False)}
    assert list(violations(sources).values()) == [rule]


@pytest.mark.parametrize(
    ("module", "code"),
    [
        ("agent_state.cli._main", "from agent_state import AgentApplication, open_storage\n"),
        ("agent_state.bridges._adk", "from ..backends import Storage\nfrom .. import TurnIds\n"),
        ("agent_state._x", "from .backends._json import encode_json\nfrom . import jsonpatch\n"),
        ("agent_state.agui._x", "from ._wire import encode\nimport orjson\n"),
    ],
)
def test_a_downward_or_public_arrow_passes(module: str, code: str) -> None:
    assert violations({module: (code, False), "agent_state.jsonpatch": ("", True)}) == {}


def exported_by_its_package(module: str, name: str) -> str | None:
    """The public package above private `module` whose `__all__` holds `name`, if one does."""
    parts = module.split(".")
    if not any(part.startswith("_") for part in parts[1:]):
        return None
    package = ".".join(parts[: next(i for i, p in enumerate(parts) if p.startswith("_") and i)])
    exported = getattr(importlib.import_module(package), "__all__", [])
    return package if name in exported else None


def private_paths_of_public_names(where: str, source: str) -> list[str]:
    """`where: name from module, use package` for each public name taken from a private module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                package = exported_by_its_package(node.module, alias.name)
                if package is not None and node.module.startswith("agent_state"):
                    found.append(f"{where}: {alias.name} from {node.module}, use {package}")
    return found


def test_tests_docs_and_examples_take_public_names_from_public_paths() -> None:
    """A test of a private unit may import it; a public name comes from its one public path."""
    found = []
    for folder in ("tests", "examples", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += private_paths_of_public_names(str(path.relative_to(ROOT)), path.read_text())
    for document in DOCUMENTS:
        for block in blocks_of(document):
            found += private_paths_of_public_names(block.where, block.source)
    assert found == []


def test_a_public_name_from_a_private_path_is_reported() -> None:
    source = (
        "from agent_state.backends._memory import MemoryStorage\nfrom agent_state._x import y\n"
    )
    assert private_paths_of_public_names("t.py", source) == [
        "t.py: MemoryStorage from agent_state.backends._memory, use agent_state.backends"
    ]
