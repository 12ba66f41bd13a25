"""The dpsynth source files a module can import, for dvc.yaml's code dependencies.

Static (``ast``), so a stage's dependencies are known without importing torch: every ``import``
and ``from ... import`` of a ``dpsynth`` module anywhere in a file (function-level imports too,
which the CLI uses to start fast), followed transitively, plus the packages each module sits in
(Python runs their ``__init__``). A method's trainer is loaded by name through the registry
(``MethodSpec.trainer``), which no ``import`` statement shows; ``trainer_modules`` adds them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import dpsynth

PACKAGE_DIR = Path(dpsynth.__file__).resolve().parent  # .../src/dpsynth
SOURCE_ROOT = PACKAGE_DIR.parent  # .../src: dvc.yaml names files relative to the repository as src/dpsynth/...


def module_file(name: str) -> Path | None:
    """``dpsynth.cli.train`` -> its file (a package's ``__init__.py``); None: not a dpsynth module."""
    path = SOURCE_ROOT / Path(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


@cache
def _imports_of(path: Path, module: str) -> tuple[str, ...]:
    """The dpsynth module names ``path`` (module ``module``) imports, absolute."""
    parts = module.split(".")
    package = parts if path.name == "__init__.py" else parts[:-1]
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import name` may import a submodule: module_file() keeps only real ones
            names += [base, *(f"{base}.{a.name}" for a in node.names)]
    return tuple(n for n in names if n == "dpsynth" or n.startswith("dpsynth."))


def imported_files(modules: Iterable[str]) -> set[Path]:
    """Every dpsynth source file the ``modules`` can import, transitively."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        path = module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the enclosing packages
        todo += _imports_of(path, name)
    return seen


def trainer_modules() -> list[str]:
    """The modules a stage that loads trainers by name (the method registry, ``MethodSpec.trainer``) may run: each
    method's trainer and every other module of the methods package (the trivial baselines beside them, and a new
    method's files before it is registered), so such a stage depends on the package as one folder and a file
    added to it re-runs the stage -- the cautious side: an edit there re-trains rather than going unnoticed."""
    from dpsynth.config.methods import METHOD_SPECS

    package = PACKAGE_DIR / "methods"
    everything = {".".join(("dpsynth", *f.relative_to(PACKAGE_DIR).with_suffix("").parts))
                  for f in package.rglob("*.py") if f.name != "__init__.py"}
    return sorted({spec.trainer.partition(":")[0] for spec in METHOD_SPECS.values()} | everything)


def code_deps(modules: Iterable[str]) -> list[str]:
    """dvc.yaml's code dependencies of a stage running ``modules``: repository-relative paths,
    a folder where every source file in it is imported (so a file added to it is covered), else
    the files; sorted."""
    files = imported_files(modules)
    out: set[str] = set()

    def cover(folder: Path) -> bool:
        """Add ``folder`` whole if all its files are imported; else its files and subfolders."""
        sources = sorted(folder.rglob("*.py"))
        if folder != PACKAGE_DIR and sources and all(f in files for f in sources):
            out.add(folder.relative_to(SOURCE_ROOT.parent).as_posix())
            return True
        for f in sorted(folder.glob("*.py")):
            if f in files:
                out.add(f.relative_to(SOURCE_ROOT.parent).as_posix())
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
            cover(sub)
        return False

    cover(PACKAGE_DIR)
    return sorted(out)


#: What can change the privatize stage's output -- and so what its DVC stage depends on (issue 58): every
#: re-run is a new local-DP release of every record, so it must re-run when the records, the mechanism or
#: its parameters, or the code that draws the noise change, and for nothing else. Walked transitively: the
#: local mechanisms, their registry and the secret randomness.
PRIVATIZE_NOISE_MODULES = ("dpsynth.privacy.local_mechanisms", "dpsynth.privacy.local", "dpsynth.privacy.randomness")
#: Taken alone (their imports reach the whole training stack, which cannot change these records): the stage
#: itself, which records it reads (the run's first n: ``config.run``), how they are read, mapped to the record
#: space and written, and the registry lookup that picks the mechanism.
PRIVATIZE_FILES = ("dpsynth.stages.privatize", "dpsynth.config.run", "dpsynth.data.dataset",
                   "dpsynth.methods.entropic_wgan.loss", "dpsynth.io", "dpsynth.privacy.mechanisms")


def privatize_code_deps() -> list[str]:
    """The privatize stage's code dependencies (``PRIVATIZE_NOISE_MODULES`` walked, ``PRIVATIZE_FILES``
    alone), repository-relative, sorted: not every module its command imports (the CLI, the settings
    files, the central mechanisms ...), whose edits would otherwise re-run it -- a second release."""
    files = imported_files(PRIVATIZE_NOISE_MODULES)
    files |= {f for f in (module_file(m) for m in PRIVATIZE_FILES) if f is not None}
    return sorted(f.relative_to(SOURCE_ROOT.parent).as_posix() for f in files)
