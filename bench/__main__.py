"""``python -m bench [NAME ...]``: run the benchmarks and print their figures.

Every ``bench/<name>_bench.py`` module is a benchmark. It exposes
``main() -> dict``: its figures, and ``"pass": bool`` when it has a target.
With names, only the benchmarks whose name starts with one of them run
(``python -m bench verify``). Exit status 1 when a benchmark misses its
target, 2 for an unknown name. Results are described in docs/benchmarks.md.
"""

from __future__ import annotations

import importlib
import inspect
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

SUFFIX = "_bench"


def available() -> list[str]:
    return sorted(path.stem[: -len(SUFFIX)] for path in Path(__file__).parent.glob(f"*{SUFFIX}.py"))


def _print(name: str, result: dict[str, Any], seconds: float) -> None:
    verdict = {True: "PASS", False: "MISS", None: "-"}[result.get("pass")]
    print(f"== {name}  {verdict}  ({seconds:.1f} s)")
    width = max((len(key) for key in result), default=0)
    for key, value in result.items():
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        print(f"  {key.ljust(width)}  {shown}")


def main(argv: list[str] | None = None) -> int:
    wanted = sys.argv[1:] if argv is None else argv
    names = available()
    chosen = [n for n in names if not wanted or any(n.startswith(w) for w in wanted)]
    if wanted and not chosen:
        print(f"bench: no benchmark matches {' '.join(wanted)} (have: {', '.join(names)})")
        return 2
    print(
        f"python {platform.python_version()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    missed = []
    for name in chosen:
        module = importlib.import_module(f"bench.{name}{SUFFIX}")
        started = time.perf_counter()
        # A benchmark whose main() takes argv gets none: its own defaults.
        takes_argv = bool(inspect.signature(module.main).parameters)
        result = module.main([]) if takes_argv else module.main()
        _print(name, result, time.perf_counter() - started)
        if result.get("pass") is False:
            missed.append(name)
    if missed:
        print(f"missed target: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
