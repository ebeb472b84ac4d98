"""The layout's rules, checked on the source (DESIGN.md, "Layout"; docs/layout.md).

Every import statement counts, those inside functions included; only imports under
``if TYPE_CHECKING:`` are left out, since they never run.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "app")
MAX_LINES = 400
MAX_FUNCTION_LINES = 80   # engine/: a function longer than this is two jobs
MAX_ENGINE_TOP = 8        # modules at engine/'s top level, besides __init__ and __main__
QT = ("PySide6", "shiboken6")
# The window's feature packages: each may use app.core, app.bridge, app.ui and the others,
# never the window that holds them.
FEATURES = ("app.chat", "app.library", "app.settings_ui", "app.performance", "app.voice")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _walk_runtime(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports_of(name: str, *, typing_too: bool = False) -> set[str]:
    """The names ``name`` imports at run time (with ``typing_too``, under ``if TYPE_CHECKING:`` as
    well): modules of this tree where they resolve to one, else the top-level name (``PySide6`` ...)."""
    path = MODULES[name]
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (ast.walk(tree) if typing_too else _walk_runtime(tree)):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.add(_resolve(a.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in MODULES else _resolve(mod))
    out.discard(name)
    return out


def _resolve(mod: str) -> str:
    while mod and mod not in MODULES:
        if "." not in mod:
            return mod
        mod = mod.rpartition(".")[0]
    return mod


GRAPH = {m: {i for i in imports_of(m) if i in MODULES} for m in MODULES}


def _cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), in ``graph`` (GRAPH's default)."""
    graph = GRAPH if graph is None else graph
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_reader_sees_lazy_relative_and_package_imports():
    # The rules below are only as good as this reader: check it on modules whose imports are known.
    assert "engine.models.catalogue" in imports_of("engine.loading.request")  # lazy and relative
    assert "app.core.paths" in imports_of("app.library.library_view")  # draft_choices imports inside the function
    assert "engine.sizing" in imports_of("app.library.speech_list")    # probe, imported inside a function
    assert "PySide6" in imports_of("app.ui.theme")


def test_no_import_cycles_in_engine_or_app():
    assert _cycles() == []


@pytest.mark.parametrize("tree", ["app", "engine"])
def test_no_file_circle_even_through_type_only_imports(tree):
    # A circle that only type hints close (``if TYPE_CHECKING:``) still makes a reader go round it:
    # a part that names the whole window to reach two of its methods, compaction naming the Engine
    # that calls it. The parts get what they use (a small Protocol, the schema, a record of their own).
    mine = {m for m in MODULES if m.startswith(tree + ".")}
    graph = {m: {i for i in imports_of(m, typing_too=True) if i in mine} for m in mine}
    assert _cycles(graph) == []


def test_the_type_only_reader_sees_a_circle_in_app():
    # and the reader sees a circle closed only by a type-only import
    assert "app.window.replies" in imports_of("app.window.chats", typing_too=True)
    assert "app.window.replies" not in imports_of("app.window.chats")


def test_no_source_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_app_top_level_holds_at_most_three_files():
    top = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert len(top) <= 3, top


def test_app_core_imports_no_qt_and_nothing_of_the_window():
    for name in MODULES:
        if name == "app.core" or name.startswith("app.core."):
            bad = {i for i in imports_of(name)
                   if i.split(".")[0] in QT or (i.startswith("app.") and not i.startswith("app.core"))}
            assert bad == set(), f"{name} imports {sorted(bad)}"


def _backend_checks(tree: ast.AST) -> list[str]:
    """Comparisons that guess what an engine can do from its backend's name: anything named ``backend``
    (``m.backend``, ``m.get("backend")``, ``m["backend"]``) against "remote", or a loaded model's
    ``.backend`` against any name. (Settings' own ``backend`` choice, "llama_cpp" or "hf", is the
    user's choice of engine, not a question to one.)"""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [ast.unparse(x) for x in sides if not isinstance(x, ast.Constant)]
        words = {x.value for x in sides if isinstance(x, ast.Constant) and isinstance(x.value, str)}
        about_backend = [n for n in names if n.endswith((".backend", "'backend')", "'backend']"))]
        if about_backend and ("remote" in words or any("model" in n for n in about_backend) and words):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_app_asks_a_capability_never_the_backends_name():
    # The reader finds the checks this rule replaced, and leaves Settings' own choice alone.
    assert _backend_checks(ast.parse('if model.backend == "remote": pass')) != []
    assert _backend_checks(ast.parse('x = m.get("backend") != "remote"')) != []
    assert _backend_checks(ast.parse('y = win.host.model.backend in ("llama_cpp",)')) == []  # a tuple: not a word
    assert _backend_checks(ast.parse('z = self.host.model.backend == "llama_cpp"')) != []
    assert _backend_checks(ast.parse('if s.backend == "hf": pass')) == []
    bad = {name: found for name in MODULES if name.startswith("app")
           if (found := _backend_checks(ast.parse(MODULES[name].read_text())))}
    assert bad == {}, "ask ModelInfo.capabilities instead"


# The engine's face: the only engine modules app/ imports, and only the names in their __all__
# (docs/layout.md, "The engine's face"). Each public package imports a name from its module when it is asked.
PUBLIC = (
    ("engine", "the engine, its interface (ChatEngine, ModelInfo), config, types, errors, a reply's record, "
               "atomic writes, the data folders"),
    ("engine.library", "the models on disk, their files and downloads, each model's own settings"),
    ("engine.loading", "one load: what the user chose, its plan, the open, the GPU guard, threads, the disk cache"),
    ("engine.sizing", "whether a model fits: this machine, a plan and its words, why a load failed"),
    ("engine.prompt", "a message and its parts, what of a long conversation the model sees"),
    ("engine.inputs", "the documents and images a user attaches"),
    ("engine.reply_formats", "what a model family writes: the Think control, a tool and its schema"),
    ("engine.remote", "a model on a server: open it, list its models, its address, its pinned certificates"),
    ("engine.workers", "other machines' devices: add one, check it, open a model on them"),
    ("engine.voice", "dictation and read-aloud, their models"),
    ("engine.serve", "the local server, its metrics, the coding agents pointed at it"),
    ("engine.tuning", '"Benchmark this model" and the exactness check'),
)


def _public_all(module: str) -> list[str]:
    """A public module's ``__all__``, read from its source (a literal list)."""
    for node in ast.parse(MODULES[module].read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _off_the_face(tree: ast.AST) -> list[str]:
    """The engine imports in a file that reach past the face: every ``import engine.x`` and ``from engine.x
    import y`` (under ``if TYPE_CHECKING:`` too) of a module not in PUBLIC or a name not in its ``__all__``,
    and every ``alias.name`` read through ``import engine.x as alias`` that is not in its ``__all__``."""
    public = {name: set(_public_all(name)) for name, _ in PUBLIC}
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "engine":
                    if a.name not in public:
                        found.append(f"{node.lineno}: import {a.name}")
                    elif a.asname:
                        aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "engine":
            if node.module not in public:
                found.append(f"{node.lineno}: from {node.module}")
            else:
                found += [f"{node.lineno}: {node.module}.{a.name}" for a in node.names
                          if a.name not in public[node.module]]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases and \
                node.attr not in public[aliases[node.value.id]]:
            found.append(f"{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_the_app_uses_the_engines_public_face_only():
    # The reader catches each way past the face: an internal module (type-only too), a name outside
    # __all__ (a submodule), an internal name read through a public module's alias.
    assert _off_the_face(ast.parse("from engine.kv.disk_store import store_usage")) != []
    assert _off_the_face(ast.parse("if TYPE_CHECKING:\n    from engine.interface import ChatEngine")) != []
    assert _off_the_face(ast.parse("import engine.backends.openmp")) != []
    assert _off_the_face(ast.parse("from engine.library import model_store")) != []
    assert _off_the_face(ast.parse("import engine.loading as p\np.request_plan.machine()")) != []
    assert _off_the_face(ast.parse("import engine.loading as p\nfrom engine import ChatEngine\np.machine()")) == []
    bad = {name: found for name in MODULES if name.startswith("app")
           if (found := _off_the_face(ast.parse(MODULES[name].read_text())))}
    assert bad == {}, "import it from engine or a public package (PUBLIC), adding it to that package's __all__"


def test_each_public_name_exists_and_a_lazy_one_comes_from_where_it_says():
    import importlib
    import importlib.util

    for name, _ in PUBLIC:
        module = importlib.import_module(name)
        names = _public_all(name)
        assert names and sorted(names) == sorted(module.__all__) and len(set(names)) == len(names), name
        for n in names:
            assert getattr(module, n) is not None, f"{name}.{n}"
        where = getattr(module, "_WHERE", {})
        # a submodule of the same name, once imported, would hide a lazy export
        assert not {f"{name}.{n}" for n in where} & set(MODULES), name
        # the lazy table, the TYPE_CHECKING imports mypy reads and __all__ say the same
        typed = {}
        for node in ast.walk(ast.parse(MODULES[name].read_text())):
            if isinstance(node, ast.If) and _is_type_checking(node):
                for imp in (x for x in node.body if isinstance(x, ast.ImportFrom)):
                    for a in imp.names:
                        typed[a.asname or a.name] = (importlib.util.resolve_name("." * imp.level + (imp.module or ""),
                                                                                 name), a.name)
        table = {}
        for n, loc in where.items():
            mod, _, attr = loc.partition(":")
            table[n] = (importlib.util.resolve_name(mod, name), attr or n)
        assert typed == table and set(table) <= set(names), name
        for n, (mod, attr) in table.items():
            assert getattr(module, n) is getattr(importlib.import_module(mod), attr), f"{name}.{n}"


def test_a_public_packages_lazy_exports_keep_the_ladder():
    """A lazy export is an import the package makes when asked: with them, the ladder still has no circle."""
    graph = unit_graph()
    for name, _ in PUBLIC:
        if name != "engine":  # the face itself stands above every rung
            graph[name] |= {v for d in imports_of(name, typing_too=True) if (v := unit_of(d)) and v != name}
    assert _circles(graph) == []


def test_feature_packages_never_import_the_window():
    for name in MODULES:
        if name.startswith(FEATURES):
            bad = {i for i in imports_of(name) if i == "app.window" or i.startswith("app.window.")}
            assert bad == set(), f"{name} imports {sorted(bad)}"


def test_engine_never_imports_qt_or_the_app():
    for name in MODULES:
        if name.startswith("engine"):
            bad = {i for i in imports_of(name) if i.split(".")[0] in QT or i.split(".")[0] == "app"}
            assert bad == set(), f"{name} imports {sorted(bad)}"


def test_shipped_code_imports_no_benchmark():
    for name in MODULES:
        if name.startswith(("engine.bench", "engine.cli")) or name == "engine.__main__":
            continue            # the benchmarks themselves, and the command line that runs them
        bad = {i for i in imports_of(name) if i.startswith("engine.bench")}
        assert bad == set(), f"{name} imports {sorted(bad)}"


def test_the_main_window_composes_controllers_instead_of_mixing_them_in():
    # Controllers hold the window's parts (issue #21): no mixin is left, and none is defined in app/window.
    from PySide6.QtWidgets import QMainWindow

    from app.window.main_window import MainWindow

    assert MainWindow.__bases__ == (QMainWindow,)
    mixins = [f"{name}.{node.name}" for name, path in MODULES.items() if name.startswith("app.window")
              for node in ast.walk(ast.parse(path.read_text(), str(path)))
              if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")]
    assert mixins == []


def test_feature_packages_define_no_window_mixin():
    # The wiring that knows the window lives in app/window/; app/chat and app/performance hold widgets.
    found = []
    for name, path in MODULES.items():
        if name.startswith(("app.chat", "app.performance")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and (node.name.endswith("Mixin") or node.name == "MainWindow"):
                    found.append(f"{name}.{node.name}")
    assert found == []


# -- the engine's shape (issue #41) -------------------------------------------------------

def unit_of(module: str) -> str | None:
    """The unit of the engine's ladder a module belongs to: a package under engine/ or a
    top-level module (``engine.engine``, ``engine.config``); ``engine`` itself for its face."""
    parts = module.split(".")
    if parts[0] != "engine":
        return None
    return ".".join(parts[:2])


def unit_graph() -> dict[str, set[str]]:
    """Which units of engine/ import which (lazy imports count, TYPE_CHECKING ones do not)."""
    out: dict[str, set[str]] = {}
    for m, deps in GRAPH.items():
        u = unit_of(m)
        if u is None:
            continue
        out.setdefault(u, set())
        for d in deps:
            v = unit_of(d)
            if v is not None and v != u:
                out[u].add(v)
    return out


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_unit_reader_sees_a_circle_between_packages():
    # The rule below is only as good as this reader: a hand-made circle must be found.
    assert _circles({"engine.a": {"engine.b"}, "engine.b": {"engine.c"}, "engine.c": {"engine.a"}}) == \
        [["engine.a", "engine.b", "engine.c"]]
    assert unit_of("engine.decode.stream") == "engine.decode" and unit_of("engine.engine") == "engine.engine"
    g = unit_graph()
    assert "engine.backends" in g["engine.engine"] and "engine.engine" in g["engine.loading"]


def test_no_import_cycle_between_the_engines_packages():
    """The packages and top-level modules of engine/ form a ladder: none imports one that imports it back."""
    assert _circles(unit_graph()) == []


def test_nothing_in_the_engine_imports_its_own_face():
    # engine/__init__ imports the engine itself: a module inside that imported it back would be a circle.
    bad = {m for m, deps in GRAPH.items() if m.startswith("engine.") and "engine" in deps}
    assert bad == set()


def test_the_engines_top_level_holds_few_modules():
    top = sorted(p.stem for p in (ROOT / "engine").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= MAX_ENGINE_TOP, top


def test_no_engine_function_is_over_80_lines():
    long = []
    for name, path in MODULES.items():
        if name.startswith("engine"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNCTION_LINES:
                        long.append(f"{name}.{node.name}: {n}")
    assert long == []


def public_names() -> dict[str, list[str]]:
    """Every public class and function defined at a module's top level in engine/, by name."""
    out: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if not name.startswith("engine"):
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    not node.name.startswith("_"):
                out.setdefault(node.name, []).append(name)
    return out


def test_no_two_engine_modules_define_the_same_public_name():
    twice = {k: v for k, v in public_names().items() if len(v) > 1}
    assert twice == {}


def _calls(name: str, attr: str) -> list[int]:
    """Lines of module ``name`` that call some object's ``attr(...)``."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr]


def _shipped_engine() -> list[str]:
    return [m for m in MODULES if m.startswith("engine.") and not m.startswith(("engine.bench", "engine.tuning"))]


def test_generation_has_one_call_site_the_engine_cores_step():
    # Every request's tokens are computed in the engine core's one batch per step. Besides the step, a
    # pool's batch is run only by a sequence seen as a backend (SeqView: a draft model's own sequence,
    # a measurement between steps) and by the pool of a one-sequence backend.
    batch = {m: _calls(m, "batch") for m in _shipped_engine()}
    assert {m for m, lines in batch.items() if lines} == {"engine.core.step", "engine.backends.base",
                                                          "engine.backends.llama.backend"}
    assert len(batch["engine.core.step"]) == 1
    # A backend's single-sequence forward: the draft model drafting, one-off measurements, the one-sequence
    # pool, a vision projector's image rows, and drive() (a step generator on a backend of its own:
    # benchmarks and tests).
    forward = {m for m in _shipped_engine() if _calls(m, "forward")}
    assert forward <= {"engine.backends.base", "engine.speculative.drafts", "engine.speculative.costs",
                       "engine.decode.generate", "engine.backends.hf.backend"}, forward


def test_one_llama_context_per_model():
    # No second context beside the model's own (the pool holds every request's sequence).
    made = {m for m in _shipped_engine() if "llama_init_from_model" in MODULES[m].read_text()}
    assert made == {"engine.backends.llama.backend"}
    assert not any("open_batch" in MODULES[m].read_text() for m in MODULES if m.startswith(("engine", "app")))


# Modules that share a name because they do the same job in parallel places.
SAME_JOB = {
    "backend": "each backend's Backend: backends/llama and backends/hf",
    "load": "a model's load: the planned one (loading/) and transformers' own (backends/hf/)",
    "engine": "the ChatEngine implementations: the local engine and the remote one",
    "errors": "each package's error types",
    "paths": "where files go: the engine's and the window's",
    "model_defaults": "a model's own settings: the engine's and the window's side of them",
    "connect": "open one and measure it: a server (remote/) and a machine (workers/)",
    "step": "one step of generation: the engine core's batch and a speculative round in it",
    "images": "images: decoded for a prompt (inputs/) and read from an API body (serve/protocols/)",
}
# Different jobs under one name, still to be renamed (each named here with why it waits).
NOT_YET = {
    "metrics": "the server's registry and a reply's figures: serve/metrics.py is being changed on another branch",
    "devices": "llama.cpp's GPU devices and the window's microphone and speaker (app/voice/devices.py)",
    "drafts": "a draft model on disk (sizing/) and the drafts a speculative round makes (speculative/)",
}
# bench/, tuning/ and cli/ modules are named for what they measure or the command they run.
NAMED_FOR = ("engine.bench.", "engine.tuning.", "engine.cli.")


def _shared_names() -> dict[str, list[str]]:
    by: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.name != "__init__.py" and not name.startswith(NAMED_FOR) and path.stem != "__main__":
            by.setdefault(path.stem, []).append(name)
    return {stem: mods for stem, mods in by.items() if len(mods) > 1}


def test_no_two_modules_share_a_name_for_different_jobs():
    shared = _shared_names()
    assert set(shared) - set(SAME_JOB) - set(NOT_YET) == set(), {s: shared[s] for s in set(shared) - set(SAME_JOB)}
    # the allow-lists hold only names still shared, and the ones #60 named are gone
    assert set(SAME_JOB) | set(NOT_YET) <= set(shared)
    assert not {"wire", "plan", "listen", "audio"} & set(shared)


def test_worker_means_a_machine_and_a_qt_objects_job_is_a_runner():
    # "worker" is a machine that takes a model's layers (engine/workers/, `engine worker`); an object the
    # window moves to a thread of its own is a runner (app/bridge/load_runner.py, generation_runner.py ...).
    named = [n for n in MODULES if n.startswith("app.") and "worker" in n.rpartition(".")[2]]
    classes = [f"{n}.{c.name}" for n in MODULES if n.startswith("app.")
               for c in ast.walk(ast.parse(MODULES[n].read_text())) if isinstance(c, ast.ClassDef)
               and "Worker" in c.name and any(ast.unparse(b).endswith("QObject") for b in c.bases)]
    assert named == [] and classes == []
