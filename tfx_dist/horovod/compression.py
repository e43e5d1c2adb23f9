"""Horovod's gradient compression: ``Compression.none`` and ``Compression.fp16``."""

from __future__ import annotations

import tensorflow as tf


class Compressor:
    """Turns a tensor into what goes over the wire and back."""

    @staticmethod
    def compress(tensor):
        """Returns (tensor to send, context for `decompress`)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (others as they are)."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The compressors a script passes as ``compression=``."""

    none = NoneCompressor
    fp16 = FP16Compressor
