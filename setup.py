"""The C parts (the parse, tracedb/parse/_fastparse.c; self time,
tracedb/_selftime.c), and the SQL inside the package of a wheel. The C parts
are optional: where they do not compile, the install goes on and tracedb
parses every piece in Python and solves self time with numpy, slower."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


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
                 Extension("tracedb._selftime", ["tracedb/_selftime.c"], optional=True, extra_compile_args=["-O3"])],
)
