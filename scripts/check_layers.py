"""Checks the layering of the tree: no import circle in Python, no include that runs back up in C++.

    python scripts/check_layers.py             # exit 1 and one line per problem
    python scripts/check_layers.py --explain   # and the edges (file:line) behind each problem

Python (static, with ``ast``; nothing is imported): an edge A -> B for every
``import`` in a ``tfx_dist`` module A that names a ``tfx_dist`` module B. Imports
at module level and imports inside a function (lazy: they run on the first call)
are told apart. A circle of module-level imports breaks as soon as one of its
modules is imported first, so it is an error. A circle closed by a lazy import
runs, but it is the same tangle postponed, so it counts too, unless each lazy
edge that closes it is in ``ALLOWED_LAZY_EDGES`` with its reason. Imports under
``if TYPE_CHECKING:`` never run and are left out. ``PYTHON_CONFINED`` lists
packages that may import only what the entry names.

C++: every file under ``custom_ops/`` belongs to the layer of the longest entry
of ``LAYERS`` that matches its path (a folder, or a file without its
extension, which also covers the files whose stem extends it with ``_``:
``c_api`` covers ``c_api_inspect.cc``). A file may include its own layer and
the layers below it (earlier in the list); an include of a later layer runs
back up and is an error, named by file and line. A file in no layer is an
error too, so that new code cannot slip past the check: add its folder to the
table. Tests (``TEST_PATTERNS``) may include anything.

The tables are data, here at the top: when folders move, edit them.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import re
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- The tables -------------------------------------------------------------

# C++ layers, lowest first; paths relative to the repository root. One total
# order across the libraries: the parameter server (embedding/server) sits on
# the collective runtime's service.
#
# The collective runtime's core above its base, bottom to top: connections (TCP and
# shared memory, framing, wire protection); the ring, tree and hierarchical
# algorithms over them; request/response calls (the parameter server's wire); the
# one options struct, passed by reference to negotiation and executors; what those
# two both speak (requests, responses, op traits); span events per rank;
# negotiation (which tensors are ready everywhere, fused how), below execution; the
# executors; the Communicator wiring them; its C API.
COMM_CORE_STACK = ("transport", "collectives", "service", "options", "protocol", "timeline",
                   "negotiation", "executors", "communicator", "c_api")
LAYERS = (
    # One Status (TensorFlow's codes) and the C-API error helper, under every library.
    ("common", ("custom_ops/common",)),
    ("comm base", tuple("custom_ops/comm/core/" + name for name in (
        "deadline", "defaults", "dtypes", "interrupt", "spin", "reduce_kernels", "topology"))),
    *((f"comm {name}", (f"custom_ops/comm/core/{name}",)) for name in COMM_CORE_STACK),
    # The embedding store, then the parameter server on it (and on comm's service).
    ("embedding core", ("custom_ops/embedding/core",)),
    ("embedding gpu", ("custom_ops/embedding/cuda",)),
    ("embedding server", ("custom_ops/embedding/server",)),
    # TensorFlow's ops and kernels, over the C APIs (fused_reduce is kernels only).
    ("tensorflow ops", ("custom_ops/comm/cc", "custom_ops/embedding/cc", "custom_ops/fused_reduce/cc")),
)
# Tests and their helpers may include any layer (fnmatch patterns on the path).
TEST_PATTERNS = ("*/tests/*", "*_test.cc", "*_test.h", "custom_ops/testing/*")
CPP_SUFFIXES = (".h", ".cc", ".inc", ".cuh")

# Python: the package checked, and packages that may import only the listed ones.
PYTHON_PACKAGE = "tfx_dist"
PYTHON_CONFINED = {
    # The TensorFlow-free ground floor: resolving a cluster has no side effects.
    "tfx_dist.cluster": ("tfx_dist.cluster", "tfx_dist.settings"),
    # The launcher starts fast and loads no TensorFlow: the standard library and the cluster only.
    "tfx_dist.launcher": ("tfx_dist.launcher", "tfx_dist.cluster"),
    "tfx_dist.run": ("tfx_dist.launcher",),
    # Under everything: the environment variables and the one exception hierarchy.
    "tfx_dist.settings": ("tfx_dist.settings",),
    "tfx_dist.errors": ("tfx_dist.errors",),
    # The one ctypes loader, and the native faces on it (below every strategy).
    "tfx_dist._native": ("tfx_dist._native", "tfx_dist._ops", "tfx_dist.errors"),
    "tfx_dist.embedding": ("tfx_dist.embedding", "tfx_dist._native", "tfx_dist._ops", "tfx_dist.errors"),
    "tfx_dist.comm": ("tfx_dist.comm", "tfx_dist._native", "tfx_dist._ops", "tfx_dist.cluster",
                      "tfx_dist.errors", "tfx_dist.settings"),
}
# Lazy (function-level) imports allowed to close a circle: (importer, imported) -> reason.
ALLOWED_LAZY_EDGES: dict[tuple[str, str], str] = {}


# --- Python -----------------------------------------------------------------

@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    path: str
    line: int
    lazy: bool

    def describe(self) -> str:
        kind = "in a function" if self.lazy else "at module level"
        return f"{self.src} -> {self.dst}  ({self.path}:{self.line}, {kind})"


def python_modules(root: str) -> dict[str, str]:
    """Module name -> path (relative to root) for every module of the package."""
    modules = {}
    base = os.path.join(root, PYTHON_PACKAGE)
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = rel
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """(node, lazy) for every import that can run: inside a function is lazy."""
    def walk(node, lazy):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for orelse in child.orelse:
                    yield from walk(orelse, lazy)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, lazy
            yield from walk(child, lazy or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    yield from walk(tree, False)


def _targets(node, module: str, is_package: bool, modules: dict[str, str]) -> list[str]:
    """The package's modules an import statement names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [_known(name, modules) for name in names if _known(name, modules)]
    if node.level:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    found = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in modules:
            found.append(sub)  # `from package import module`
        elif _known(base, modules):
            found.append(_known(base, modules))
    return found


def _known(name: str, modules: dict[str, str]) -> str | None:
    """The longest prefix of a dotted name that is one of the package's modules."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_edges(root: str) -> list[Edge]:
    modules = python_modules(root)
    edges = set()
    for module, rel in modules.items():
        with open(os.path.join(root, rel)) as f:
            tree = ast.parse(f.read(), rel)
        is_package = rel.endswith("__init__.py")
        for node, lazy in _imports(tree):
            for target in _targets(node, module, is_package, modules):
                if target != module:
                    edges.add(Edge(module, target, rel, node.lineno, lazy))
    return sorted(edges, key=lambda e: (e.src, e.dst, e.line))


def strongly_connected(nodes, edges: list[Edge]) -> list[list[str]]:
    """Tarjan's components with more than one module (iterative: no recursion limit)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        succ.setdefault(e.src, []).append(e.dst)
        succ.setdefault(e.dst, [])
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(succ[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        result.append(sorted(component))
    return sorted(result)


def shortest_circles(edges: list[Edge], members: set[str], limit: int = 10) -> list[list[Edge]]:
    """For each edge inside a component, the shortest circle through it (each circle once)."""
    inside = [e for e in edges if e.src in members and e.dst in members]
    succ: dict[str, list[Edge]] = {}
    for e in inside:
        succ.setdefault(e.src, []).append(e)
    circles, seen = [], set()
    for first in inside:
        back = {first.dst: None}  # breadth-first from first.dst back to first.src
        queue = [first.dst]
        while queue and first.src not in back:
            node = queue.pop(0)
            for e in succ.get(node, []):
                if e.dst not in back:
                    back[e.dst] = e
                    queue.append(e.dst)
        if first.src not in back:
            continue
        path, node = [], first.src
        while back[node] is not None:
            path.append(back[node])
            node = back[node].src
        circle = [first] + path[::-1] if first.src != first.dst else [first]
        key = frozenset((e.src, e.dst) for e in circle)
        if key not in seen:
            seen.add(key)
            circles.append(circle)
    return sorted(circles, key=len)[:limit]


def _confined_package(module: str) -> str | None:
    for package in PYTHON_CONFINED:
        if module == package or module.startswith(package + "."):
            return package
    return None


def _inside(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def check_python(root: str, explain: bool) -> list[str]:
    edges = import_edges(root)
    nodes = python_modules(root)
    problems = []
    counted = [e for e in edges if not (e.lazy and (e.src, e.dst) in ALLOWED_LAZY_EDGES)]
    module_level = [e for e in counted if not e.lazy]
    eager_circles = strongly_connected(nodes, module_level)
    for component in strongly_connected(nodes, counted):
        members = set(component)
        eager = any(set(c) <= members for c in eager_circles)
        kind = "module-level import circle" if eager else "import circle closed by a lazy import"
        text = f"python: {kind} among {', '.join(component)}"
        if explain:
            for circle in shortest_circles(counted, members):
                text += "\n  circle: " + " -> ".join([circle[0].src] + [e.dst for e in circle])
                text += "".join(f"\n    {e.describe()}" for e in circle)
        problems.append(text)
    for e in edges:
        package = _confined_package(e.src)
        if package and not _inside(e.dst, PYTHON_CONFINED[package]):
            problems.append(f"python: {e.path}:{e.line}: {package} may import only "
                            f"{', '.join(PYTHON_CONFINED[package])}, not {e.dst}"
                            + (f"\n    {e.describe()}" if explain else ""))
    return problems


# --- C++ --------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def _matches(path: str, prefix: str) -> bool:
    """A folder's files, or a file's stem and the stems that extend it (c_api -> c_api_inspect.cc)."""
    stem = path.split(".")[0]
    return path.startswith(prefix + "/") or stem == prefix or stem.startswith(prefix + "_")


def layer_of(path: str) -> int | None:
    """Index in LAYERS of the longest entry matching path."""
    best, best_len = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _matches(path, prefix) and len(prefix) > best_len:
                best, best_len = rank, len(prefix)
    return best


def is_test(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in TEST_PATTERNS)


def cpp_files(root: str) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(os.path.join(root, "custom_ops")):
        dirs.sort()
        found += [os.path.relpath(os.path.join(folder, f), root)
                  for f in sorted(files) if f.endswith(CPP_SUFFIXES)]
    return found


def includes(root: str, path: str):
    """(line number, included path relative to root) for each quoted include of the tree."""
    with open(os.path.join(root, path), errors="replace") as f:
        for number, line in enumerate(f, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)
            if not target.startswith("custom_ops/"):
                local = os.path.normpath(os.path.join(os.path.dirname(path), target))
                if not os.path.exists(os.path.join(root, local)):
                    continue  # a header of TensorFlow, a system or a third party
                target = local
            yield number, target


def stale_layer_entries(root: str) -> list[str]:
    """Entries of LAYERS that match no file: a folder that moved or is gone."""
    files = cpp_files(root)
    return [prefix for _, prefixes in LAYERS for prefix in prefixes
            if not any(_matches(path, prefix) for path in files)]


def check_cpp(root: str, explain: bool) -> list[str]:
    problems = [f"c++: LAYERS entry {prefix} matches no file (moved? edit the table in "
                f"scripts/check_layers.py)" for prefix in stale_layer_entries(root)]
    for path in cpp_files(root):
        if is_test(path):
            continue
        rank = layer_of(path)
        if rank is None:
            problems.append(f"c++: {path}: in no layer (add its folder to LAYERS in "
                            f"scripts/check_layers.py)")
            continue
        for line, target in includes(root, path):
            target_rank = layer_of(target)
            if target_rank is None or target_rank <= rank:
                continue
            problems.append(f"c++: {path}:{line}: includes {target}, which runs back up from "
                            f"'{LAYERS[rank][0]}' to '{LAYERS[target_rank][0]}'"
                            + (f"\n    layers: {' < '.join(n for n, _ in LAYERS[rank:target_rank + 1])}"
                               if explain else ""))
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--explain", action="store_true",
                        help="print the import edges and layers behind each problem")
    parser.add_argument("--root", default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    problems = check_python(args.root, args.explain) + check_cpp(args.root, args.explain)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} layering problem(s)", file=sys.stderr)
        return 1
    print("layers: no import circle, no include that runs back up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
