"""A binary wheel next to another TensorFlow minor: one error at `import tfx_dist` naming both
versions and the wheel to install (scripts/wheels.sh checks it with a real wheel)."""

import pytest

from tfx_dist import _ops

WHEEL = "tfx_dist-0.1.0+tf2.19-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_a_wheel_on_another_minor_names_both_versions_and_the_wheel_to_install():
    why = _ops.wheel_mismatch({"wheel": WHEEL, "tensorflow_version": "2.19.1"}, "2.20.0")
    assert "built for TensorFlow 2.19.1" in why and "TensorFlow 2.20.0 is installed" in why
    assert "tfx_dist-0.1.0+tf2.20-cp311-cp311-manylinux_2_34_x86_64.whl" in why


@pytest.mark.parametrize("info,installed", [
    ({"wheel": WHEEL, "tensorflow_version": "2.19.1"}, "2.19.0"),  # another patch release
    ({"tensorflow_version": "2.19.1"}, "2.20.0"),  # a source build: rebuilt at first use instead
    ({"wheel": WHEEL, "tensorflow_version": "2.19.1"}, None),  # no TensorFlow: its own ImportError
])
def test_no_error_where_the_ops_fit_or_a_source_build_says_how_to_rebuild(info, installed):
    assert _ops.wheel_mismatch(info, installed) is None


def test_import_checks_the_installed_tensorflow(monkeypatch):
    monkeypatch.setattr(_ops, "_build_info", lambda: {"wheel": WHEEL, "tensorflow_version": "2.19.1"})
    monkeypatch.setattr(_ops, "installed_tensorflow", lambda: "2.21.0")
    with pytest.raises(_ops.OpLibraryError, match="TensorFlow 2.21.0 is installed"):
        _ops.check_wheel_matches_tensorflow()
