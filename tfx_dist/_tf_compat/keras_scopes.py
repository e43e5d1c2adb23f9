"""Which Keras object is creating a variable, read from Keras's private name-scope stack."""

from __future__ import annotations


def creating_layer_weight() -> bool:
    """Whether Keras is creating a variable of a layer: ``Layer.add_weight`` opens a name scope
    whose caller is the layer, ``Optimizer.add_variable`` one whose caller is the optimizer.
    False where Keras keeps its scopes elsewhere (the caller then leaves the variable as it is)."""
    try:
        import keras
        from keras.src.backend.common import global_state
    except ImportError:
        return False
    stack = global_state.get_global_attribute("name_scope_stack") or []
    return bool(stack) and isinstance(getattr(stack[-1], "caller", None), keras.layers.Layer)
