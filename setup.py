"""Builds the op libraries (see build_ops.py) as part of `pip install`."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_ops  # noqa: E402


class BuildWithOps(build_py):
    """Compiles the op libraries into tfx_dist/_ops before packaging."""

    def run(self):
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            sys.exit("tfx_dist builds its ops against the installed TensorFlow, and none was "
                     "found. Install it first (`pip install tensorflow-cpu==2.21.0`), then "
                     "`pip install --no-build-isolation .`")
        for path in build_ops.build_all():
            print("built", path)
        super().run()


setup(cmdclass={"build_py": BuildWithOps})
