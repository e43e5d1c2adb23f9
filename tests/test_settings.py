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
    monkeypatch.delenv("TFX_FUSION_BUCKET_BYTES", raising=False)
    assert settings.get("TFX_FUSION_BUCKET_BYTES") == settings.SETTINGS[
        "TFX_FUSION_BUCKET_BYTES"].default
    monkeypatch.setenv("TFX_FUSION_BUCKET_BYTES", "1024")
    assert settings.get("TFX_FUSION_BUCKET_BYTES") == 1024
    assert settings.get("TFX_FUSION_BUCKET_BYTES", 7) == 7


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("TFX_FUSION_BUCKET_BYTES", "lots")
    with pytest.raises(ValueError, match="TFX_FUSION_BUCKET_BYTES.*'lots'"):
        settings.get("TFX_FUSION_BUCKET_BYTES")
