"""No import cycles between our modules (run by `make lint`).

A cycle is a set of modules that import each other, directly or through
others: none of them can be read, tested or moved without the rest, and the
order they happen to be imported in decides whether a name exists yet. An
import inside a function counts (it runs, and only hides the cycle); an
import made only under ``if TYPE_CHECKING:`` does not (it never runs).

Prints each cycle as a chain ``a -> b -> a``, with the line of each import,
and exits 1; exits 0 when there is none. Usage::

    python .ci/import_cycles.py [package ...]   (default: the packages below)
"""

from __future__ import annotations

import itertools
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

PACKAGES = ("guardd", "agents_runtime", "audit", "client_sdk", "guard_mcp")

Graph = Mapping[str, frozenset[str]]


def import_graph(packages: Iterable[str]) -> tuple[grimp.ImportGraph, dict[str, frozenset[str]]]:
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: frozenset(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    return graph, edges


def strongly_connected(edges: Graph) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion
    limit to hit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _shortest_path(edges: Graph, start: str, goal: str, within: set[str]) -> list[str]:
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (prev := came_from[path[-1]]) is not None:
                path.append(prev)
            return path[::-1]
        for succ in sorted(edges[node] & within):
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    raise AssertionError(f"{goal} unreachable from {start} in one component")


def cycles(edges: Graph) -> list[list[str]]:
    """For each import inside a component, the shortest cycle through it: every
    import that keeps a component together is shown in at least one chain.
    A chain starts and ends at its smallest module name."""
    chains: set[tuple[str, ...]] = set()
    for component in strongly_connected(edges):
        members = set(component)
        for importer in component:
            for imported in sorted(edges[importer] & members):
                loop = [importer, *_shortest_path(edges, imported, importer, members)[:-1]]
                start = loop.index(min(loop))
                chains.add(tuple(loop[start:] + loop[:start]))
    return [[*chain, chain[0]] for chain in sorted(chains)]


def describe(graph: grimp.ImportGraph, chain: list[str]) -> list[str]:
    lines = [" -> ".join(chain)]
    for importer, imported in itertools.pairwise(chain):
        details = graph.get_import_details(importer=importer, imported=imported)
        for detail in details[:1]:
            lines.append(f"    {importer}:{detail['line_number']}: {detail['line_contents']}")
    return lines


def main(argv: list[str]) -> int:
    # Run as a script, this file's directory is first on sys.path, not the
    # checkout whose packages it reads.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    graph, edges = import_graph(argv or PACKAGES)
    found = cycles(edges)
    for chain in found:
        print("\n".join(describe(graph, chain)))
    if found:
        print(f"{len(found)} import cycle(s); break each (move what both need lower down)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
