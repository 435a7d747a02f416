"""The package's shape: the public API, the modules at its top, and imports that only go down.

Every ``import`` in the package, at module level or inside a function, is an arrow from the
importing package to the imported one. The layers below list the packages from the top down; an
arrow may only point to a lower layer or stay inside its own package, so no two packages import
each other. Numpy belongs to the host-side planning of the kernels, never to a kernel module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import thoughttree as tt

PACKAGE = Path(tt.__file__).resolve().parent

# Top to bottom. A package may import from the packages after it, never from those before it.
LAYERS = [
    "cli",
    "commands",
    "serve",  # the HTTP server, where the package has one: above the search it runs, below the commands
    "search",
    "view",
    "strategies",
    "tasks",
    "sandbox",
    "runtime",
    "kernels",
    "kernels.plan",
    "tree",
    "config",
]

PUBLIC = {
    "LM",
    "Budget",
    "Node",
    "RuntimeConfig",
    "Sampling",
    "SearchError",
    "Speculative",
    "SearchResult",
    "Statistics",
    "Status",
    "ThoughtTree",
    "best_path",
    "search",
    "show",
    "strategies",
    "tasks",
}


def owner(module: str) -> str:
    """The layer a dotted module name (below ``thoughttree``) belongs to."""
    parts = module.split(".")
    if parts[:2] == ["kernels", "plan"]:
        return "kernels.plan"
    return "cli" if parts[0] in ("cli", "__main__", "__init__") else parts[0]


def imports(path: Path) -> list[str]:
    """The thoughttree modules ``path`` imports, as dotted names below ``thoughttree``."""
    return imports_in(path.read_text(), path.relative_to(PACKAGE))


def imports_in(source: str, rel: Path) -> list[str]:
    """The thoughttree modules ``source`` imports, were it the module at ``rel`` in the package."""
    package = list(rel.parts[:-1])
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "thoughttree":
                target = node.module.split(".")[1:]
            else:
                continue
            if not node.module:  # "from . import x": x is a module, or a name of the package itself
                for a in node.names:
                    sub = PACKAGE.joinpath(*target, a.name)
                    is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                    found.append(".".join(target + [a.name]) if is_module else ".".join(target) or "__init__")
            else:
                found.append(".".join(target))
        elif isinstance(node, ast.Import):
            found += [a.name.split(".", 1)[1] for a in node.names if a.name.startswith("thoughttree.")]
    return [f for f in found if f]


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_public_api_is_pinned() -> None:
    assert set(tt.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(tt, name) is not None
    assert callable(tt.search) and tt.search.__module__ == "thoughttree.search.driver"
    assert tt.LM.__module__ == "thoughttree.runtime.lm"
    assert tt.ThoughtTree.__module__ == "thoughttree.tree.thought_tree"
    assert isinstance(tt.__version__, str) and tt.__version__.count(".") == 2


def test_only_entry_points_and_config_sit_at_the_top() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {"__init__", "__main__", "cli", "config"}


def test_every_package_is_in_a_layer() -> None:
    packages = {owner(str(p.relative_to(PACKAGE).with_suffix("")).replace("/", ".")) for p in modules()}
    assert packages <= set(LAYERS), packages - set(LAYERS)


def test_imports_only_go_down_the_layers() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for path in modules():
        here = owner(str(path.relative_to(PACKAGE).with_suffix("")).replace("/", "."))
        for target in imports(path):
            there = owner(target)
            if there != here and rank[there] < rank[here]:
                upward.append(f"{path.relative_to(PACKAGE)} imports thoughttree.{target}")
    assert not upward, "\n".join(upward)


def test_no_two_packages_import_each_other() -> None:
    arrows = set()
    for path in modules():
        here = owner(str(path.relative_to(PACKAGE).with_suffix("")).replace("/", "."))
        arrows |= {(here, owner(t)) for t in imports(path) if owner(t) != here}
    assert not {(a, b) for a, b in arrows if (b, a) in arrows}


@pytest.mark.parametrize("path", sorted((PACKAGE / "kernels").glob("*.py")), ids=lambda p: p.name)
def test_kernel_modules_use_no_numpy(path: Path) -> None:
    tree = ast.parse(path.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "numpy"]


def test_the_layer_check_sees_an_upward_import() -> None:
    # The check can fail: a kernel module that imports the runtime is an arrow up.
    rel = Path("kernels/attention.py")
    source = (PACKAGE / rel).read_text() + "\nfrom ..runtime import LM\n"
    rank = {name: i for i, name in enumerate(LAYERS)}
    assert [t for t in imports_in(source, rel) if rank[owner(t)] < rank["kernels"]] == ["runtime"]
