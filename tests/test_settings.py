"""Settings: one declaration, environment parsing, and the README table in step."""

import os

import pytest

from tfx_dist import settings

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_readme_table_is_generated_from_the_declaration():
    with open(README) as f:
        text = f.read()
    assert settings.readme_with_table(text) == text, (
        "README's settings table is stale: run python -m tfx_dist.settings --update-readme README.md")


def test_override_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("TFX_LOCAL_FUSION_BYTES", raising=False)
    assert settings.get("TFX_LOCAL_FUSION_BYTES") == settings.SETTINGS[
        "TFX_LOCAL_FUSION_BYTES"].default
    monkeypatch.setenv("TFX_LOCAL_FUSION_BYTES", "1024")
    assert settings.get("TFX_LOCAL_FUSION_BYTES") == 1024
    assert settings.get("TFX_LOCAL_FUSION_BYTES", 7) == 7


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("TFX_LOCAL_FUSION_BYTES", "lots")
    with pytest.raises(ValueError, match="TFX_LOCAL_FUSION_BYTES.*'lots'"):
        settings.get("TFX_LOCAL_FUSION_BYTES")


def test_a_deprecated_name_is_read_with_one_warning(monkeypatch):
    monkeypatch.delenv("TFX_COMM_FUSION_BYTES", raising=False)
    monkeypatch.setenv("TFX_FUSION_THRESHOLD_BYTES", "4096")
    monkeypatch.setattr(settings, "_warned", set())
    with pytest.warns(FutureWarning, match="TFX_FUSION_THRESHOLD_BYTES.*TFX_COMM_FUSION_BYTES"):
        assert settings.get("TFX_COMM_FUSION_BYTES") == 4096
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings.get("TFX_COMM_FUSION_BYTES") == 4096  # warned once only
    monkeypatch.setenv("TFX_COMM_FUSION_BYTES", "8192")  # the new name wins
    assert settings.get("TFX_COMM_FUSION_BYTES") == 8192
