"""The C parts (the parse, tracedb/parse/_fastparse.c; self time,
tracedb/_selftime.c; the Parquet writer on Arrow's threads,
tracedb/_pqwriter.cpp), and the SQL inside the package of a wheel. The C
parts are optional: where they do not compile, the install goes on and
tracedb parses every piece in Python, solves self time with numpy and
writes with pyarrow's writer, slower."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


def _pqwriter() -> list[Extension]:
    """The writer builds against the C++ headers and libraries in pyarrow's
    wheel (pyproject.toml's build requirements); none without pyarrow. It
    links to the libraries by name (libarrow.so.2600): importing pyarrow
    loads them, so it loads with the pyarrow it was built against and fails
    to import (store.py then uses pyarrow's writer) with any other."""
    try:
        import pyarrow
    except ImportError:
        return []
    lib_dir = Path(pyarrow.__file__).parent
    libs = [str(p) for name in ("arrow", "parquet") for p in sorted(lib_dir.glob(f"lib{name}.so.*"))[:1]]
    if len(libs) != 2:  # not a Linux wheel's layout
        return []
    return [Extension("tracedb._pqwriter", ["tracedb/_pqwriter.cpp"], optional=True, language="c++",
                      include_dirs=[pyarrow.get_include()], extra_compile_args=["-O2", "-std=c++20"],
                      extra_link_args=libs)]


class BuildPy(build_py):
    """queries/ and migrations/ into a wheel's tracedb/ (catalog.resource_dir
    finds them there; an editable install reads them from the checkout), and
    the CUDA sample traces that `tracedb demo` ingests into tracedb/samples/."""

    def run(self):
        super().run()
        if not self.editable_mode:
            pkg = Path(self.build_lib) / "tracedb"
            for name in ("queries", "migrations"):
                shutil.copytree(name, pkg / name, dirs_exist_ok=True)
            shutil.copytree("tests/fixtures/cuda", pkg / "samples" / "cuda", dirs_exist_ok=True)


setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[Extension("tracedb.parse._fastparse", ["tracedb/parse/_fastparse.c"],
                           depends=["tracedb/parse/_fastjson.h"], optional=True, extra_compile_args=["-O3"]),
                 Extension("tracedb._selftime", ["tracedb/_selftime.c"], optional=True, extra_compile_args=["-O3"]),
                 *_pqwriter()],
)
