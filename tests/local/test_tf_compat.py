"""tfx_dist._tf_compat: the version check and the run-time replacements of TensorFlow functions."""

import pytest
import tensorflow as tf

import tfx_dist
from tfx_dist import _tf_compat as tfc

# The ops' own tests: part of the smoke set run on every supported TensorFlow minor.
pytestmark = pytest.mark.smoke


@pytest.fixture(autouse=True)
def _version_check_raises(monkeypatch):
    # The tf-nightly report sets it for the whole run; these tests check the error itself.
    monkeypatch.delenv("TFX_ALLOW_UNTESTED_TENSORFLOW", raising=False)


def test_running_versions_are_supported():
    tfc.check_versions()  # the installed TensorFlow and Keras


@pytest.mark.parametrize("tensorflow_version,keras_version,named", [
    ("2.22.0", "3.15.1", "TensorFlow 2.22.0"),
    ("2.15.1", None, "TensorFlow 2.15.1"),
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
    supported = supported[0] if len(supported) == 1 else f"{supported[0]} to {supported[-1]}"
    assert f"supports {name} {supported} " in message and f"but {named} is running" in message
    assert isinstance(error.value, ImportError)


def test_the_supported_range_is_named():
    with pytest.raises(tfx_dist.UnsupportedTensorFlowError, match="supports TensorFlow 2.16 to 2.21"):
        tfc.check_versions(tensorflow_version="2.15.1", keras_version="3.15.1")


def test_untested_versions_only_warn_when_allowed(monkeypatch):
    monkeypatch.setenv("TFX_ALLOW_UNTESTED_TENSORFLOW", "1")
    with pytest.warns(UserWarning, match="TensorFlow 2.23.0-dev20261127 is running"):
        tfc.check_versions(tensorflow_version="2.23.0-dev20261127", keras_version="3.15.1")


@pytest.mark.parametrize("minor", tfc.SUPPORTED_TENSORFLOW)
def test_patch_releases_of_the_supported_versions_pass(minor):
    tfc.check_versions(tensorflow_version=minor + ".7", keras_version=tfc.SUPPORTED_KERAS[-1] + ".0")


def test_version_keys_compare_numbers():
    from tfx_dist._tf_compat import versions

    running = versions._numbers(tf.__version__)
    assert versions.tensorflow_at_least("2.9") and versions.tensorflow_at_least("2.16")
    assert versions.tensorflow_at_least(f"{running[0]}.{running[1]}")
    assert not versions.tensorflow_at_least(f"{running[0]}.{running[1] + 1}")


def test_the_trainer_whose_methods_are_replaced_is_the_one_models_use():
    # Keras 3.16 renamed TensorFlowTrainer to Trainer: the replacements must land on the class
    # keras.Model's fit comes from, under either name.
    import keras
    from tfx_dist._tf_compat.keras_trainer import tensorflow_trainer_class

    trainer = tensorflow_trainer_class()
    assert issubclass(keras.Model, trainer)
    assert keras.Model.fit is trainer.fit
    assert keras.Model._maybe_symbolic_build is trainer._maybe_symbolic_build


def test_patches_install_once():
    from tfx_dist._tf_compat import patches

    patches.install()
    replaced = tfc.input_lib.DistributedIterator.get_next_as_optional
    patches.install()
    assert tfc.input_lib.DistributedIterator.get_next_as_optional is replaced
    assert replaced.__name__ == "balanced_get_next_as_optional"
