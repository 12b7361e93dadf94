"""The one build step pyproject.toml cannot declare: an editable install (``pip install -e .``)
also writes gymflow's bytecode into the source tree, as pip does for the files of any other
install. Without it, where ``PYTHONDONTWRITEBYTECODE`` is set (as in many container images),
every command compiles each gymflow module it imports again: 0.1-0.2 s of every command's
start. A module edited later is compiled again when imported, as always."""

from __future__ import annotations

import compileall
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

SOURCES = ("gymflow", "flows", "tasks")
"""The package directories of the source tree (pyproject's ``package-dir``)."""


class BuildExtAndBytecode(build_ext):
    def run(self) -> None:
        super().run()
        if self.inplace or getattr(self, "editable_mode", False):
            root = Path(__file__).resolve().parent
            for name in SOURCES:
                if not compileall.compile_dir(str(root / name), quiet=1):
                    raise SystemExit(f"could not compile the bytecode of {root / name}")


setup(cmdclass={"build_ext": BuildExtAndBytecode})
