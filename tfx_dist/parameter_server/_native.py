"""ctypes bindings of the parameter server's C API (custom_ops/embedding/server/ps_c_api.h).

The server and client live in libtfx_embedding, beside the table store they
serve; the TensorFlow kernels (`_ps_ops.so`) link the same library and find a
client by the id created here.
"""

from __future__ import annotations

import ctypes
import functools

from tfx_dist import _native as native
from tfx_dist import errors
from tfx_dist.embedding import _native as store
from tfx_dist.embedding import store as store_rules

_i64_p = ctypes.POINTER(ctypes.c_int64)
_f32_p = ctypes.POINTER(ctypes.c_float)
_err = [ctypes.c_char_p, ctypes.c_int32]
ERR_LEN = native.ERR_LEN

_SIGNATURES = {
    "tfx_ps_serve": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.c_int32, ctypes.c_double] + _err),
    "tfx_ps_server_create": (ctypes.c_int64, [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                              ctypes.c_double]),
    "tfx_ps_server_begin": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                                             ctypes.c_char_p, ctypes.c_int32]),
    "tfx_ps_server_serve": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64] + _err),
    "tfx_ps_server_version": (ctypes.c_int64, [ctypes.c_int64]),
    "tfx_ps_server_destroy": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_ps_client_create": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]),
    "tfx_ps_client_rejoin": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int64]
                             + _err),
    "tfx_ps_client_destroy": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_ps_client_commit": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64] + _err),
    "tfx_ps_client_rollback": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64] + _err),
    "tfx_ps_create_table": (ctypes.c_int32, [ctypes.c_int64, ctypes.POINTER(store.TableConfig)] + _err),
    "tfx_ps_set_optimizer": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64,
                                              ctypes.POINTER(store.OptimizerConfig)] + _err),
    "tfx_ps_lookup": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, _i64_p, ctypes.c_int64,
                                       _f32_p] + _err),
    "tfx_ps_push": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p,
                                     ctypes.c_float] + _err),
    "tfx_ps_step_done": (ctypes.c_int32, [ctypes.c_int64] + _err),
    "tfx_ps_steps": (ctypes.c_int64, [ctypes.c_int64]),
    "tfx_ps_save": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, _i64_p] + _err),
    "tfx_ps_restore": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.c_int32, ctypes.c_int64] + _err),
    "tfx_ps_assign": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p,
                                       ctypes.c_int64, ctypes.c_int64] + _err),
}


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    so = store.lib()
    native.declare(so, _SIGNATURES)
    return so


class ParameterServerError(errors.TfxError):
    """A parameter-server request failed; the message names the server, table and worker.
    Also an instance of the ``tfx_dist.errors`` class of its code (e.g. UnavailableError)."""


PS_ERRORS = errors.ErrorFamily(ParameterServerError)


def call(fn, *args) -> None:
    """Calls a parameter-server C function with an error buffer; a failure raises ParameterServerError."""
    native.call(fn, *args, raise_as=PS_ERRORS.error)


def set_optimizer(client_id: int, table_id: int, rule) -> None:
    """Tells every server that ``rule`` (an ``embedding.store`` optimizer) trains the table."""
    call(lib().tfx_ps_set_optimizer, client_id, table_id, ctypes.byref(store_rules.optimizer_config(rule)))
