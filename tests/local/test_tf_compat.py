"""tfx_dist._tf_compat: the version check and the run-time replacements of TensorFlow functions."""

import pytest

import tfx_dist
from tfx_dist import _tf_compat as tfc


def test_running_versions_are_supported():
    tfc.check_versions()  # the installed TensorFlow and Keras


@pytest.mark.parametrize("tensorflow_version,keras_version,named", [
    ("2.22.0", "3.15.1", "TensorFlow 2.22.0"),
    ("2.20.1", None, "TensorFlow 2.20.1"),
    ("3.0.0rc1", None, "TensorFlow 3.0.0rc1"),
    ("2.21.0", "3.16.0", "Keras 3.16.0"),
])
def test_another_version_is_a_clear_error(tensorflow_version, keras_version, named):
    with pytest.raises(tfx_dist.UnsupportedTensorFlowError) as error:
        tfc.check_versions(tensorflow_version=tensorflow_version,
                           keras_version=keras_version or "3.15.0")
    message = str(error.value)
    name = named.split()[0]
    supported = tfc.SUPPORTED_TENSORFLOW if name == "TensorFlow" else tfc.SUPPORTED_KERAS
    assert f"supports {name} {supported}.x" in message and f"but {named} is running" in message
    assert isinstance(error.value, ImportError)


def test_patch_releases_of_the_supported_versions_pass():
    tfc.check_versions(tensorflow_version=tfc.SUPPORTED_TENSORFLOW + ".7",
                       keras_version=tfc.SUPPORTED_KERAS + ".0")


def test_patches_install_once():
    from tfx_dist._tf_compat import patches

    patches.install()
    replaced = tfc.input_lib.DistributedIterator.get_next_as_optional
    patches.install()
    assert tfc.input_lib.DistributedIterator.get_next_as_optional is replaced
    assert replaced.__name__ == "balanced_get_next_as_optional"
