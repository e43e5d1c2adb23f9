"""Registers tfx_dist's Keras classes as soon as Keras is imported, with ``import tfx_dist`` only.

A ``.keras`` file names its layers' classes (``tfx_dist>ShardedEmbedding``),
and `keras.models.load_model` finds them only once the module that registers
them has run. ``import tfx_dist`` stays free of TensorFlow (the launcher and
`tfx_dist.cluster` need none), so it cannot import the layers itself: it
registers them when Keras is imported (at once if it already is), by running
``import tfx_dist.layers`` right after the ``keras`` package finishes loading.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

_REGISTERING = "tfx_dist.layers"  # every module whose import registers Keras classes


def _register() -> None:
    importlib.import_module(_REGISTERING)


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Wraps the loader of the top-level ``keras`` package: registers once it has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)  # one registration; and find the real spec without us
        try:
            spec = importlib.util.find_spec("keras")
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _remove_finder()
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterKeras)]


def install() -> None:
    """Registers now if Keras is loaded, else when it is. Idempotent."""
    if "keras" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterKeras) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterKeras())
