"""ctypes bindings of libtfx_embedding's C API (custom_ops/embedding/core/c_api.h),
and the errors of the embedding store."""

from __future__ import annotations

import ctypes
import functools

from tfx_dist import _native as native
from tfx_dist import errors

# Keep in step with c_api.h (TFX_EMB_ABI_VERSION and the structs); checked on load.
ABI_VERSION = 4
ERR_LEN = native.ERR_LEN

INITIALIZERS = {"zeros": 0, "constant": 1, "uniform": 2, "normal": 3, "truncated_normal": 4}
OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2, "ftrl": 3, "rmsprop": 4, "adadelta": 6, "adamax": 7,
              "lion": 8, "nadam": 9}

_i64_p = ctypes.POINTER(ctypes.c_int64)
_f32_p = ctypes.POINTER(ctypes.c_float)
_err = [ctypes.c_char_p, ctypes.c_int32]


class EmbeddingStoreError(errors.TfxError):
    """An error of the embedding store; ``code`` is its canonical code, and the error is
    also an instance of that code's class in ``tfx_dist.errors``."""


class InvalidArgumentError(EmbeddingStoreError, errors.InvalidArgumentError):
    pass


class NotFoundError(EmbeddingStoreError, errors.NotFoundError):
    pass


class FailedPreconditionError(EmbeddingStoreError, errors.FailedPreconditionError):
    pass


class OutOfRangeError(EmbeddingStoreError, errors.OutOfRangeError):
    pass


class DataLossError(EmbeddingStoreError, errors.DataLossError):
    """A checkpoint file is truncated or corrupt."""


STORE_ERRORS = errors.ErrorFamily(EmbeddingStoreError, InvalidArgumentError, NotFoundError,
                                  FailedPreconditionError, OutOfRangeError, DataLossError)


class OptimizerConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("nesterov", ctypes.c_int32), ("amsgrad", ctypes.c_int32),
                ("centered", ctypes.c_int32), ("momentum", ctypes.c_double),
                ("initial_accumulator_value", ctypes.c_double), ("epsilon", ctypes.c_double),
                ("beta_1", ctypes.c_double), ("beta_2", ctypes.c_double),
                ("learning_rate_power", ctypes.c_double),
                ("l1_regularization_strength", ctypes.c_double),
                ("l2_regularization_strength", ctypes.c_double),
                ("l2_shrinkage_regularization_strength", ctypes.c_double), ("beta", ctypes.c_double),
                ("rho", ctypes.c_double), ("weight_decay", ctypes.c_double)]


class TableConfig(ctypes.Structure):
    _fields_ = [("table_id", ctypes.c_int64), ("name", ctypes.c_char_p), ("dim", ctypes.c_int64),
                ("num_rows", ctypes.c_int64), ("shard_index", ctypes.c_int32),
                ("num_shards", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("initializer", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("init_a", ctypes.c_double), ("init_b", ctypes.c_double),
                ("optimizer", OptimizerConfig)]


class TableInfo(ctypes.Structure):
    _fields_ = [("dim", ctypes.c_int64), ("num_slots", ctypes.c_int64),
                ("record_floats", ctypes.c_int64), ("num_rows", ctypes.c_int64),
                ("stored_rows", ctypes.c_int64)]


# Every function returns a status code (0 = OK).
_ARGTYPES = {
    "tfx_emb_abi": [_i64_p, ctypes.c_int32],
    "tfx_emb_create": [ctypes.POINTER(TableConfig), _i64_p] + _err,
    "tfx_emb_destroy": [ctypes.c_int64] + _err,
    "tfx_emb_info": [ctypes.c_int64, ctypes.POINTER(TableInfo)] + _err,
    "tfx_emb_lookup": [ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p] + _err,
    "tfx_emb_apply": [ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p, ctypes.c_float,
                      ctypes.c_int64] + _err,
    "tfx_emb_read_record": [ctypes.c_int64, ctypes.c_int64, _f32_p, ctypes.c_int64] + _err,
    "tfx_emb_read_records": [ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p, ctypes.c_int64] + _err,
    "tfx_emb_write_records": [ctypes.c_int64, _i64_p, ctypes.c_int64, _f32_p, ctypes.c_int64] + _err,
    "tfx_emb_save": [ctypes.c_int64, ctypes.c_char_p] + _err,
    "tfx_emb_restore": [ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int32] + _err,
    "tfx_emb_shard_file_shape": [ctypes.c_char_p, _i64_p, _i64_p] + _err,
    "tfx_emb_read_shard_file": [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, _i64_p, _f32_p] + _err,
    "tfx_emb_set_optimizer": [ctypes.c_int64, ctypes.POINTER(OptimizerConfig)] + _err,
    "tfx_emb_shard_of": [_i64_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
                         ctypes.POINTER(ctypes.c_int32)] + _err,
}
_SIGNATURES = {name: (ctypes.c_int32, argtypes) for name, argtypes in _ARGTYPES.items()}


def check_abi(so: ctypes.CDLL, path: str) -> None:
    """Raises OpLibraryError unless the library's structs are the ones declared here."""
    ours = {"ABI version": ABI_VERSION, "sizeof(tfx_emb_optimizer)": ctypes.sizeof(OptimizerConfig),
            "sizeof(tfx_emb_table_config)": ctypes.sizeof(TableConfig),
            "sizeof(tfx_emb_table_info)": ctypes.sizeof(TableInfo)}
    native.check_abi(f"embedding store {path}", "tfx_dist/embedding/_native.py", ours,
                     native.abi_array(so.tfx_emb_abi, list(ours)))


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    so = native.load("libtfx_embedding", "embedding store", _SIGNATURES)
    check_abi(so, so._name)
    return so


def call(fn, *args) -> None:
    """Calls a libtfx_embedding function with an error buffer; a failure raises the store's error."""
    native.call(fn, *args, raise_as=STORE_ERRORS.error)
