"""The floor plan, checked: imports run down the layers and never in a circle.

Layers, top to bottom (docs/ARCHITECTURE.md)::

    assay                 the CLI, the API, the Python client, the eval harness
    scheduler, notifier   fleet-side services
    workers.fleet         Celery app and task, dispatch, store, recovery, timers, broker
    workers.engine        evaluating one run: engine, model client, budgets, toolsets
    workers.policy_engine CEL probes and imported policies (zero model tokens)
    schemas, prompts      contracts and prompt texts

A module may import its own layer or any layer below it, never one above. Every
import counts, wherever it is written (module top, inside a function, under
``TYPE_CHECKING``): an upward import hidden in a function is still upward. Cycles
are checked on the imports that run (``TYPE_CHECKING`` ones do not). The imports
are read with ``ast`` from the source, so nothing is imported to check them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "prompts", "workers", "scheduler", "notifier", "assay")

# (module prefix, layer); the longest matching prefix wins.
LAYERS: tuple[tuple[str, int], ...] = (
    ("schemas", 0),
    ("prompts", 0),
    ("workers", 1),  # the package itself (its __init__ imports nothing)
    ("workers.engine", 1),
    ("workers.policy_engine", 1),
    ("workers.fleet", 2),
    ("scheduler", 3),
    ("notifier", 3),
    ("assay", 4),
)
LAYER_NAMES = {
    0: "schemas/prompts",
    1: "workers.engine/workers.policy_engine",
    2: "workers.fleet",
    3: "scheduler/notifier",
    4: "assay",
}

# assay.eval runs the engine in-process; one module is its door into workers.
EVAL_PACKAGE = "assay.eval"
EVAL_SEAM = "assay.eval.seam"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    runs: bool  # False for imports under ``if TYPE_CHECKING:``


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_party_modules(root: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(path, root)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def read_imports(name: str, path: Path, known: set[str]) -> list[Import]:
    """First-party imports of one module; ``from a import b`` names ``a.b`` when it is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, node: ast.stmt, runs: bool) -> None:
        imp = Import(name, target, node.lineno, runs)
        if target.split(".")[0] in PACKAGES and imp not in found:
            found.append(imp)

    def visit(node: ast.AST, runs: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_runs = runs and not (isinstance(child, ast.If) and _is_type_checking(child.test))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child, runs)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in child.names:
                    submodule = f"{base}.{alias.name}" if base else alias.name
                    add(submodule if submodule in known else base, child, runs)
            else:
                visit(child, child_runs)

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for prefix, layer in LAYERS:
        matches = module == prefix or module.startswith(prefix + ".")
        if matches and (best is None or len(prefix) > best[0]):
            best = (len(prefix), layer)
    return None if best is None else best[1]


def all_imports(root: Path) -> list[Import]:
    modules = first_party_modules(root)
    known = set(modules)
    return [i for name, path in modules.items() for i in read_imports(name, path, known)]


def upward_imports(imports: list[Import]) -> list[str]:
    problems = []
    for imp in imports:
        low, high = layer_of(imp.importer), layer_of(imp.target)
        if low is not None and high is not None and high > low:
            problems.append(
                f"{imp.importer}:{imp.line} imports {imp.target} "
                f"({LAYER_NAMES[low]} must not import {LAYER_NAMES[high]})"
            )
    return problems


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), on imports that run."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.runs and imp.target != imp.importer:
            graph.setdefault(imp.importer, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def eval_doors(imports: list[Import]) -> list[str]:
    """Modules of assay.eval other than its seam that import workers directly."""
    return [
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in imports
        if (imp.importer == EVAL_PACKAGE or imp.importer.startswith(EVAL_PACKAGE + "."))
        and imp.importer != EVAL_SEAM
        and imp.target.split(".")[0] == "workers"
    ]


@pytest.fixture(scope="module")
def project_imports() -> list[Import]:
    return all_imports(ROOT)


def test_every_first_party_module_has_a_layer() -> None:
    unplaced = [m for m in first_party_modules(ROOT) if layer_of(m) is None]
    assert unplaced == []


def test_no_module_imports_a_higher_layer(project_imports: list[Import]) -> None:
    assert upward_imports(project_imports) == []


def test_no_import_cycles_among_first_party_modules(project_imports: list[Import]) -> None:
    assert import_cycles(project_imports) == []


def test_eval_reaches_workers_only_through_its_seam(project_imports: list[Import]) -> None:
    assert eval_doors(project_imports) == []
    assert any(i.importer == EVAL_SEAM and i.target.startswith("workers.") for i in project_imports)


ENGINE_PACKAGES = ("engine", "policy_engine")


def modules_named_alike(root: Path) -> list[str]:
    """Modules of the fleet named like one of the engines': two files of one name, one the
    engine's seam and one the fleet's implementation, leave a reader guessing which is which."""
    engines = {
        path.name
        for package in ENGINE_PACKAGES
        for path in (root / "workers" / package).rglob("*.py")
    }
    return sorted(
        str(path.relative_to(root))
        for path in (root / "workers" / "fleet").rglob("*.py")
        if path.name in engines and path.name != "__init__.py"
    )


def test_no_fleet_module_is_named_like_an_engine_one(tmp_path: Path) -> None:
    assert modules_named_alike(ROOT) == []
    root = _tree(
        tmp_path,
        {
            "workers/engine/spend_guard.py": "",
            "workers/fleet/spend_guard.py": "",
            "workers/policy_engine/probes/runner.py": "",
            "workers/fleet/runner.py": "",
        },
    )
    assert modules_named_alike(root) == ["workers/fleet/runner.py", "workers/fleet/spend_guard.py"]


@pytest.mark.parametrize("engine", ["workers.engine.", "workers.policy_engine."])
def test_the_fleet_is_built_on_the_engines(project_imports: list[Import], engine: str) -> None:
    # the split means something only if the fleet really uses each engine below it
    assert any(
        i.importer.startswith("workers.fleet.") and i.target.startswith(engine)
        for i in project_imports
    )


# --- the checks themselves catch what they are for, on a synthetic tree ---------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if str(parent) != ".":
                (tmp_path / parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "text", "where"),
    [
        ("workers/engine/engine.py", "from workers.fleet.store import VerdictStore\n", "top"),
        ("workers/engine/engine.py", "def f():\n    import scheduler.timers\n", "function"),
        (
            "workers/fleet/checkpoints.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from scheduler import timers\n",
            "type checking",
        ),
        ("schemas/report.py", "from workers.engine import engine\n", "top"),
        ("scheduler/service.py", "from assay.client import Client\n", "top"),
        ("workers/engine/engine.py", "from ..fleet import store\n", "relative"),
        ("workers/policy_engine/probes/runner.py", "from workers.fleet import store\n", "top"),
    ],
)
def test_an_upward_import_is_caught(tmp_path: Path, module: str, text: str, where: str) -> None:
    root = _tree(
        tmp_path,
        {
            module: text,
            "workers/fleet/store.py": "",
            "workers/engine/engine.py": "",
            "workers/policy_engine/probes/runner.py": "",
            "scheduler/timers.py": "",
            "assay/client.py": "",
        }
        | {module: text},
    )
    problems = upward_imports(all_imports(root))
    assert problems, where
    assert all(module.replace("/", ".").removesuffix(".py") in p for p in problems)


def test_a_downward_import_is_allowed(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "assay/cli.py": "from scheduler import service\nfrom workers.fleet import store\n",
            "scheduler/service.py": "from workers.fleet.store import VerdictStore\n",
            "workers/fleet/store.py": "from workers.engine.toolsets import redaction\n",
            "workers/engine/toolsets/redaction.py": "from schemas.verdict import Verdict\n",
            "schemas/verdict.py": "",
        },
    )
    assert upward_imports(all_imports(root)) == []


def test_a_cycle_is_caught_but_not_through_type_checking(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "workers/fleet/celery_app.py": "from workers.fleet import tasks\n",
            "workers/fleet/tasks.py": "from workers.fleet.runtime import x\n",
            "workers/fleet/runtime.py": "def f():\n    from workers.fleet.celery_app import app\n",
            "workers/fleet/store.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from workers.fleet.dispatch import Dispatcher\n",
            "workers/fleet/dispatch.py": "from workers.fleet.store import VerdictStore\n",
        },
    )
    assert import_cycles(all_imports(root)) == [
        ["workers.fleet.celery_app", "workers.fleet.runtime", "workers.fleet.tasks"]
    ]


def test_an_eval_module_going_around_the_seam_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "assay/eval/seam.py": "from workers.engine.engine import evaluate\n",
            "assay/eval/runner.py": "from workers.engine.llm import LiteLLMClient\n",
            "workers/engine/engine.py": "",
            "workers/engine/llm.py": "",
        },
    )
    assert eval_doors(all_imports(root)) == ["assay.eval.runner:1 imports workers.engine.llm"]


def direct_store_constructions(root: Path) -> list[str]:
    """``VerdictStore(...)`` calls outside the store's own module (``from_settings`` is the way)."""
    found = []
    for folder in (*PACKAGES, "tests", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == root / "workers" / "fleet" / "store.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "VerdictStore"
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_verdict_store_is_built_from_settings(tmp_path: Path) -> None:
    # one way, so no component runs the store with another's key prefix or limits
    assert direct_store_constructions(ROOT) == []
    root = _tree(tmp_path, {"scheduler/x.py": "s = VerdictStore(client, prefix='p')\n"})
    (root / "tests").mkdir()
    (root / "bench").mkdir()
    assert direct_store_constructions(root) == ["scheduler/x.py:1"]


BROKER_MODULE = "workers.fleet.broker"
# the queue is f"{prefix}.evaluations"; kombu's priority separator and unacked hash; the task
BROKER_SUFFIXES = (".evaluations",)
BROKER_NAMES = ("\x06\x16", "unacked", "assay.evaluate")


def broker_names_outside_the_broker(root: Path) -> list[str]:
    """First-party string constants spelling the broker's names anywhere but its module."""
    found = []
    for name, path in first_party_modules(root).items():
        if name == BROKER_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and (node.value.endswith(BROKER_SUFFIXES) or node.value in BROKER_NAMES)
            ):
                found.append(f"{name}:{node.lineno} {node.value!r}")
    return found


def test_the_broker_names_are_written_once(tmp_path: Path) -> None:
    assert broker_names_outside_the_broker(ROOT) == []
    root = _tree(tmp_path, {"workers/fleet/recovery.py": 'KEY = "unacked"\n'})
    assert broker_names_outside_the_broker(root) == ["workers.fleet.recovery:1 'unacked'"]
