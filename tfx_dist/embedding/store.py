"""One shard of a sharded embedding table, in this process (numpy in, numpy out).

A thin wrapper of libtfx_embedding (``custom_ops/embedding``): the rows and
their optimizer slots live in C++; lookups and updates release the GIL and may
run from many threads at once. The parameter server holds these; tests use
them directly.

Example:

    import numpy as np
    from tfx_dist.embedding import store

    shards = [store.TableShard(dim=4, num_rows=10, shard_index=s, num_shards=2,
                               optimizer=store.Adagrad()) for s in range(2)]
    ids = np.array([2, 4, 2])                      # all on shard 0 (id % 2)
    rows = shards[0].lookup(ids)                   # (3, 4) float32
    shards[0].apply_gradients(ids, np.ones((3, 4), np.float32), learning_rate=0.1)
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from typing import Sequence, Union

import numpy as np

from tfx_dist.embedding import _native
# The store's errors, defined beside the binding that raises them; importable from here as before.
from tfx_dist.embedding._native import (DataLossError, EmbeddingStoreError,  # noqa: F401
                                        FailedPreconditionError, InvalidArgumentError, NotFoundError,
                                        OutOfRangeError)


# Initializers (Keras's names and defaults; values are deterministic per row,
# not Keras's random streams).
@dataclasses.dataclass(frozen=True)
class Uniform:
    minval: float = -0.05
    maxval: float = 0.05


@dataclasses.dataclass(frozen=True)
class Normal:
    mean: float = 0.0
    stddev: float = 0.05


@dataclasses.dataclass(frozen=True)
class TruncatedNormal:
    """Normal, redrawn until within two standard deviations of the mean."""

    mean: float = 0.0
    stddev: float = 0.05


@dataclasses.dataclass(frozen=True)
class Zeros:
    pass


@dataclasses.dataclass(frozen=True)
class Constant:
    value: float = 0.0


Initializer = Union[Uniform, Normal, TruncatedNormal, Zeros, Constant]
_INITIALIZER_CODES = {Zeros: ("zeros", ()), Constant: ("constant", ("value",)),
                      Uniform: ("uniform", ("minval", "maxval")), Normal: ("normal", ("mean", "stddev")),
                      TruncatedNormal: ("truncated_normal", ("mean", "stddev"))}
_INITIALIZER_NAMES = {"zeros": Zeros, "ones": lambda: Constant(1.0), "uniform": Uniform,
                      "random_uniform": Uniform, "normal": Normal, "random_normal": Normal,
                      "truncated_normal": TruncatedNormal}


# The optimizer rules (tfx_dist.embedding.rules), importable from here as before.
from tfx_dist.embedding.rules import (NATIVE_RULES, NOT_ROW_BY_ROW, SGD, Adadelta,  # noqa: E402,F401
                                      Adagrad, Adam, Adamax, Ftrl, Lion, Nadam, Optimizer, RMSprop,
                                      optimizer_from_keras)

_OPTIMIZER_CODES = {SGD: "sgd", Adagrad: "adagrad", Adam: "adam", Ftrl: "ftrl", RMSprop: "rmsprop",
                    Adadelta: "adadelta", Adamax: "adamax", Lion: "lion", Nadam: "nadam"}


def initializer_from_keras(initializer) -> Initializer:
    """The store's initializer with the distribution of a Keras initializer.

    The store's values are a function of the row id (the same whatever the
    number of shards), not Keras's random stream: same distribution, other
    numbers. A Keras ``seed`` becomes the table's seed (see `table_config`).

    Raises:
      ValueError: an initializer the store has no counterpart for.
    """
    import keras  # the store itself does not need Keras

    config = initializer.get_config()
    if isinstance(initializer, keras.initializers.RandomUniform):
        return Uniform(config["minval"], config["maxval"])
    if isinstance(initializer, keras.initializers.TruncatedNormal):
        return TruncatedNormal(config["mean"], config["stddev"])
    if isinstance(initializer, keras.initializers.RandomNormal):
        return Normal(config["mean"], config["stddev"])
    if isinstance(initializer, keras.initializers.Zeros):
        return Zeros()
    if isinstance(initializer, keras.initializers.Ones):
        return Constant(1.0)
    if isinstance(initializer, keras.initializers.Constant):
        return Constant(float(config["value"]))
    raise ValueError(f"Embedding tables are initialized by the store with uniform, normal, "
                     f"truncated normal, zeros, ones or constant values. Received: "
                     f"initializer={type(initializer).__name__}")


def _initializer(init) -> Initializer:
    if isinstance(init, str):
        if init not in _INITIALIZER_NAMES:
            raise ValueError(f"Expected an initializer among {sorted(_INITIALIZER_NAMES)}. "
                             f"Received: initializer={init!r}")
        return _INITIALIZER_NAMES[init]()
    if type(init) not in _INITIALIZER_CODES:
        raise TypeError(f"Expected a tfx_dist.embedding.store initializer (Uniform, Normal, "
                        f"TruncatedNormal, Zeros, Constant) or its name. Received: {init!r}")
    return init


def optimizer_config(optimizer: Optimizer) -> _native.OptimizerConfig:
    """The C struct of a store optimizer (c_api.h's tfx_emb_optimizer)."""
    if type(optimizer) not in _OPTIMIZER_CODES:
        raise TypeError(f"Expected a tfx_dist.embedding.store optimizer "
                        f"({', '.join(c.__name__ for c in _OPTIMIZER_CODES)}). Received: {optimizer!r}")
    # Fields of other optimizers stay 0: the C++ side reads only its kind's.
    opt = _native.OptimizerConfig(kind=_native.OPTIMIZERS[_OPTIMIZER_CODES[type(optimizer)]])
    for field in dataclasses.fields(optimizer):
        setattr(opt, field.name, type(getattr(opt, field.name))(getattr(optimizer, field.name)))
    return opt


def table_config(dim, num_rows, shard_index, num_shards, name, table_id, seed, initializer,
                 optimizer) -> _native.TableConfig:
    """The C struct of a table (c_api.h's tfx_emb_table_config)."""
    init_name, init_fields = _INITIALIZER_CODES[type(initializer)]
    params = [float(getattr(initializer, f)) for f in init_fields] + [0.0, 0.0]
    opt = optimizer_config(optimizer)
    return _native.TableConfig(
        table_id=table_id, name=name.encode(), dim=dim, num_rows=num_rows or 0,
        shard_index=shard_index, num_shards=num_shards, seed=seed & (2**64 - 1),
        initializer=_native.INITIALIZERS[init_name], init_a=params[0], init_b=params[1],
        optimizer=opt)


def _ids(ids) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu" and arr.size:  # [] is float64 to numpy
        raise TypeError(f"Expected integer ids. Received: dtype={arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"Expected a 1-D array of ids. Received: shape={arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _ptr(arr: np.ndarray, ctype):
    return arr.ctypes.data_as(ctypes.POINTER(ctype))


def shard_of(ids, num_shards: int, dynamic: bool) -> np.ndarray:
    """The shard (int32) of each id: ``id % num_shards`` for fixed tables,
    ``splitmix64(id) % num_shards`` for dynamic ones (see custom_ops/embedding/README.md)."""
    ids = _ids(ids)
    out = np.empty(len(ids), np.int32)
    _native.call(_native.lib().tfx_emb_shard_of, _ptr(ids, ctypes.c_int64), len(ids), num_shards,
                 int(dynamic), _ptr(out, ctypes.c_int32))
    return out


class TableShard:
    """Shard ``shard_index`` of ``num_shards`` of one embedding table.

    Args:
      dim: the width of a row.
      num_rows: the table's size (ids in ``[0, num_rows)``), or None for a
        dynamic table (any int64 id; rows are created on first use).
      shard_index, num_shards: which rows this shard holds (``shard_of``).
      name, table_id, seed: together with the row id and column, they fix
        every initial value, whatever ``num_shards``.
      initializer: ``Uniform()`` (Keras Embedding's default), ``Normal``,
        ``TruncatedNormal``, ``Zeros``, ``Constant``, or one of their names.
      optimizer: ``SGD``, ``Adagrad``, ``Adam``, ``Ftrl``, ``RMSprop``,
        ``Adadelta``, ``Adamax``, ``Lion`` or ``Nadam`` (Keras 3's update rules,
        each with Keras's ``weight_decay``; slots are stored beside the rows).

    Raises:
      InvalidArgumentError: a bad configuration.
      tfx_dist.OpLibraryError: libtfx_embedding is missing or does not match.
    """

    def __init__(self, dim: int, num_rows: int | None = None, *, shard_index: int = 0,
                 num_shards: int = 1, name: str = "table", table_id: int = 0, seed: int = 0,
                 initializer: Initializer | str = "uniform", optimizer: Optimizer = SGD()):
        self._lib = _native.lib()
        self._handle = 0
        if num_rows is not None and num_rows <= 0:
            raise ValueError(f"Expected num_rows > 0, or None for a dynamic table. "
                             f"Received: num_rows={num_rows}")
        config = table_config(dim, num_rows, shard_index, num_shards, name, table_id, seed,
                              _initializer(initializer), optimizer)
        handle = ctypes.c_int64(0)
        _native.call(self._lib.tfx_emb_create, ctypes.byref(config), ctypes.byref(handle))
        self._handle = handle.value
        self.name, self.dim, self.dynamic = name, dim, num_rows is None
        self.shard_index, self.num_shards = shard_index, num_shards
        info = self._info()
        self.num_slots, self.record_floats = info.num_slots, info.record_floats

    def _info(self) -> _native.TableInfo:
        info = _native.TableInfo()
        _native.call(self._lib.tfx_emb_info, self._handle, ctypes.byref(info))
        return info

    @property
    def num_rows(self) -> int:
        """Fixed: the ids this shard holds; dynamic: the rows created so far."""
        return self._info().num_rows

    @property
    def stored_rows(self) -> int:
        """Rows occupying memory (a fixed shard stores a row on its first update)."""
        return self._info().stored_rows

    def lookup(self, ids) -> np.ndarray:
        """The rows of ``ids`` (1-D ints), as a (len(ids), dim) float32 array."""
        ids = _ids(ids)
        out = np.empty((len(ids), self.dim), np.float32)
        _native.call(self._lib.tfx_emb_lookup, self._handle, _ptr(ids, ctypes.c_int64), len(ids),
                     _ptr(out, ctypes.c_float))
        return out

    def apply_gradients(self, ids, grads, learning_rate: float, step: int = 1) -> None:
        """Applies the optimizer to the rows of ``ids`` (repeats summed first).

        ``step`` is the 1-based count of applies on this table (Keras's
        ``iterations + 1``), used by Adam's bias correction; the caller counts.
        Rows not named are untouched (lazy, like TensorFlow's sparse applies).
        """
        ids = _ids(ids)
        grads = np.asarray(grads)
        if grads.shape != (len(ids), self.dim):
            raise ValueError(f"Expected gradients of shape ({len(ids)}, {self.dim}) for {len(ids)} "
                             f"ids of table '{self.name}'. Received: shape={grads.shape}")
        if grads.dtype.kind != "f":
            raise TypeError(f"Expected float gradients. Received: dtype={grads.dtype}")
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        _native.call(self._lib.tfx_emb_apply, self._handle, _ptr(ids, ctypes.c_int64), len(ids),
                     _ptr(grads, ctypes.c_float), float(learning_rate), int(step))

    @property
    def handle(self) -> int:
        """The shard's id in libtfx_embedding (the ``handle`` of the TfxStore* ops)."""
        return self._handle

    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Trains the shard with ``optimizer`` from now on: stored rows keep their
        values, their slots restart from the new optimizer's initial values."""
        _native.call(self._lib.tfx_emb_set_optimizer, self._handle, ctypes.byref(optimizer_config(optimizer)))
        info = self._info()
        self.num_slots, self.record_floats = info.num_slots, info.record_floats

    def read_record(self, row_id: int) -> np.ndarray:
        """Row ``row_id``'s record, shape (1 + num_slots, dim): its value, then each slot."""
        out = np.empty((1 + self.num_slots, self.dim), np.float32)
        _native.call(self._lib.tfx_emb_read_record, self._handle, int(row_id), _ptr(out, ctypes.c_float),
                     out.size)
        return out

    def read_records(self, ids) -> np.ndarray:
        """The records of ``ids`` (ids this shard holds), shape (len(ids), 1 + num_slots, dim)."""
        ids = _ids(ids)
        out = np.empty((len(ids), 1 + self.num_slots, self.dim), np.float32)
        _native.call(self._lib.tfx_emb_read_records, self._handle, _ptr(ids, ctypes.c_int64), len(ids),
                     _ptr(out, ctypes.c_float), out.size)
        return out

    def write_records(self, ids, records) -> None:
        """Replaces the whole records (value, then slots) of ``ids``; ``records`` as
        `read_records` returns them. Nothing changes on an error."""
        ids = _ids(ids)
        records = np.asarray(records)
        if records.shape != (len(ids), 1 + self.num_slots, self.dim):
            raise ValueError(f"Expected records of shape ({len(ids)}, {1 + self.num_slots}, "
                             f"{self.dim}) for table '{self.name}'. Received: shape={records.shape}")
        records = np.ascontiguousarray(records, dtype=np.float32)
        _native.call(self._lib.tfx_emb_write_records, self._handle, _ptr(ids, ctypes.c_int64), len(ids),
                     _ptr(records, ctypes.c_float), records.size)

    def save(self, path: str | os.PathLike) -> None:
        """Writes this shard's rows and slots to ``path`` (format: custom_ops/embedding/README.md)."""
        _native.call(self._lib.tfx_emb_save, self._handle, os.fsencode(path))

    def restore(self, paths: Sequence[str | os.PathLike]) -> None:
        """Replaces the rows with this shard's share of the files written by every
        shard of a job (any number of shards). A bad file leaves the table unchanged."""
        encoded = [os.fsencode(p) for p in paths]
        array = (ctypes.c_char_p * max(1, len(encoded)))(*encoded)
        _native.call(self._lib.tfx_emb_restore, self._handle, array, len(encoded))

    def close(self) -> None:
        if self._handle:
            self._lib.tfx_emb_destroy(self._handle, None, 0)
            self._handle = 0

    def __del__(self):
        if getattr(self, "_handle", 0):
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        size = "dynamic" if self.dynamic else f"{self.num_rows} rows here"
        return (f"TableShard('{self.name}', dim={self.dim}, shard {self.shard_index} of "
                f"{self.num_shards}, {size})")
