"""Builds the op libraries (see build_ops.py) as part of `pip install`.

From source (`pip install --no-build-isolation .`): the ops are compiled against the installed
TensorFlow. A binary wheel (`make wheels`, scripts/wheels.sh) sets ``TFX_WHEEL_TENSORFLOW`` to the
TensorFlow minor it is built in and ``TFX_WHEEL_PLATFORM`` to its platform tag: the version then
says the minor (``0.1.0+tf2.19``), the extras pin it, and build_info.json names the wheel, so that
the wheel next to another TensorFlow fails at import naming both and the wheel to install.
"""

import json
import os
import re
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
import build_ops  # noqa: E402

WHEEL_TENSORFLOW = os.environ.get("TFX_WHEEL_TENSORFLOW")  # "2.19" when building a binary wheel
WHEEL_PLATFORM = os.environ.get("TFX_WHEEL_PLATFORM")  # e.g. "manylinux_2_34_x86_64"


def _version() -> str:
    with open(os.path.join(ROOT, "tfx_dist", "__init__.py")) as f:
        version = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    return f"{version}+tf{WHEEL_TENSORFLOW}" if WHEEL_TENSORFLOW else version


def _wheel_name() -> str:
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"tfx_dist-{_version()}-{python}-{python}-{WHEEL_PLATFORM or 'linux_x86_64'}.whl"


def _extras() -> dict:
    extras = {"test": ["pytest", "scikit-learn"], "examples": ["scikit-learn", "matplotlib"],
              # mpirun without TF_CONFIG: the ranks exchange their addresses over MPI.
              "mpi": ["mpi4py"]}
    if WHEEL_TENSORFLOW:
        # The minor the op libraries were built against, as an extra rather than a plain
        # requirement: `tensorflow` and `tensorflow-cpu` both install the `tensorflow` package, so
        # requiring one would install it over the other. The import check catches a wrong minor.
        major, minor = WHEEL_TENSORFLOW.split(".")
        pin = f">={WHEEL_TENSORFLOW},<{major}.{int(minor) + 1}"
        extras.update({"tensorflow": [f"tensorflow{pin}"], "cpu": [f"tensorflow-cpu{pin}"]})
    return extras


def _prebuilt_for_this_tensorflow() -> bool:
    """A wheel packs the libraries scripts/wheels.sh already built for this TensorFlow
    (``TFX_WHEEL_PREBUILT=1``), refusing them if they were built for another."""
    if not (WHEEL_TENSORFLOW and os.environ.get("TFX_WHEEL_PREBUILT") == "1"):
        return False
    import tensorflow as tf

    with open(os.path.join(ROOT, build_ops.OPS_DIR, "build_info.json")) as f:
        built_for = json.load(f)["tensorflow_version"]
    if built_for != tf.__version__:
        sys.exit(f"TFX_WHEEL_PREBUILT: the op libraries were built for TensorFlow {built_for}, "
                 f"but {tf.__version__} is installed")
    return True


class BuildWithOps(build_py):
    """Compiles the op libraries into tfx_dist/_ops before packaging."""

    def run(self):
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            sys.exit("tfx_dist builds its ops against the installed TensorFlow, and none was "
                     "found. Install it first (`pip install tensorflow-cpu==2.21.0`, or another "
                     "of 2.16 to 2.21), then `pip install --no-build-isolation .`")
        if not _prebuilt_for_this_tensorflow():
            for path in build_ops.build_all():
                print("built", path)
        if WHEEL_TENSORFLOW:
            info_path = os.path.join(ROOT, build_ops.OPS_DIR, "build_info.json")
            with open(info_path) as f:
                info = json.load(f)
            with open(info_path, "w") as f:
                json.dump(dict(info, wheel=_wheel_name()), f)
        super().run()


class BinaryDistribution(Distribution):
    """The wheel holds shared libraries: tagged for a Python and a platform, not "any"."""

    def has_ext_modules(self):
        return bool(WHEEL_TENSORFLOW)


setup(version=_version(),
      install_requires=["numpy"],
      extras_require=_extras(),
      cmdclass={"build_py": BuildWithOps},
      distclass=BinaryDistribution,
      options={"bdist_wheel": {"plat_name": WHEEL_PLATFORM}} if WHEEL_PLATFORM else {})
