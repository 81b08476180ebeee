"""The user surface: the ``fitplan`` parser, the command handlers and what they print."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fitplan`` entry point (imports the parser only when called, so startup stays fast).

    fitplan uses no pydantic plugins: without this, building the first model reads the entry
    points of every installed distribution (pydantic/plugin/_loader.py ``get_plugins``), about
    a tenth of a cold ``explain`` in a venv with torch and transformers.

    numpy's bundled OpenBLAS starts a pool of one thread per core when numpy is imported, and
    the threads spin waiting for work that never comes: fitplan's physics is elementwise numpy
    (no matmul, dot, linalg or BLAS-backed scipy call on any command's path), so the pool is
    pure CPU cost. Measured on the 2-core VM, whole process, CPU seconds (user + system), median
    of 7: ``python -c "import numpy"`` 0.30 → 0.22, the README's ``explain`` 0.38 → 0.28, its
    ``search`` 0.54 → 0.44. The variable must be set before numpy is first imported (OpenBLAS
    reads it once, when the library loads). Only OpenBLAS's own variable: ``OMP_NUM_THREADS``
    would also cap torch's intra-op pool in ``measure``/``trace``. An explicit setting of either
    variable by the user is kept."""
    import os

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from searcher.cli.parser import main as run

    return run(argv)
