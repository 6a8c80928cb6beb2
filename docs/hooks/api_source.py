"""mkdocs hook: lays out the source as the installed package for the API reference.

The repository keeps the folders ``contracts``, ``kernels``, ``evidence``, ``bounds`` and
``verify``, which the installed distribution maps into ``kernel_contracts`` (setuptools'
``package-dir``); mkdocstrings reads source files, not the installed mapping. When mkdocs reads
its settings this hook makes ``build/api-source/kernel_contracts`` (ignored by git): the namespace's
``__init__.py`` and a link to each folder, so ``::: kernel_contracts.contracts`` in
docs/api.md reads the repository's own files.
"""

from __future__ import annotations

import os
import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "kernels", "evidence", "bounds", "verify")


def lay_out() -> None:
    """Make ``build/api-source/kernel_contracts`` afresh."""
    target = ROOT / "build" / "api-source" / "kernel_contracts"
    shutil.rmtree(target.parent, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copyfile(ROOT / "kernel_contracts" / "__init__.py", target / "__init__.py")
    for name in PACKAGES:
        os.symlink(os.path.join("..", "..", "..", name), target / name)


# mkdocs imports a hook while it reads mkdocs.yml, before mkdocstrings sets its search paths
# (which happens before any hook event when the site is built through mkdocs' Python API)
lay_out()
