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


@pytest.mark.parametrize("env,text,fragment", [
    # Before: an empty boolean read as false (TFX_SHM= turned shared memory off), and a
    # cycle time of a minute was accepted (every collective then waited up to a minute).
    ("TFX_SHM", "", "an empty value"), ("TFX_ALLTOALL_FUSION", " ", "an empty value"),
    ("TFX_CYCLE_TIME_MS", "60000", "<= 1000")])
def test_empty_booleans_and_minute_long_cycles_are_refused(env, text, fragment, monkeypatch):
    monkeypatch.setenv(env, text)
    with pytest.raises(ValueError) as e:
        settings.get(env)
    assert env in str(e.value) and fragment in str(e.value), str(e.value)


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


# --- Every setting validated where it is declared, so a bad value fails early ---

_BAD = [(env, bad) for env, s in settings.SETTINGS.items() for bad in s.parse.bad]


@pytest.mark.reliability
@pytest.mark.parametrize("env,bad", _BAD, ids=[f"{e}={b[:12]!r}" for e, b in _BAD])
def test_every_setting_refuses_bad_values(env, bad, monkeypatch, reliability):
    """Each setting's parser lists values it must refuse (type, range,
    finite); a new setting is covered by declaring it. One error names the
    variable, the value and what is allowed."""
    monkeypatch.setenv(env, bad)
    with pytest.raises(ValueError) as e:
        settings.get(env)
    message = str(e.value)
    assert env in message and repr(bad)[:40].rstrip("'") in message, message
    assert "allowed: " + settings.SETTINGS[env].parse.allowed in message, message
    reliability(f"{env}={bad[:20]!r}", f"refused: {message.split('; allowed')[0]}")


@pytest.mark.parametrize("env", list(settings.SETTINGS))
def test_every_setting_accepts_its_default(env, monkeypatch):
    default = settings.SETTINGS[env].default
    text = str(int(default)) if isinstance(default, bool) else str(default)
    monkeypatch.setenv(env, text)
    assert settings.get(env) == default
    assert settings.get(env, default) == default  # the same rule for values given in code


@pytest.mark.reliability
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1, "300"])
def test_timeout_given_in_code_is_validated_too(value, reliability):
    with pytest.raises(ValueError, match=r"TFX_TIMEOUT_S \(given in code\).*allowed: a finite number > 0"):
        settings.get("TFX_TIMEOUT_S", value)
    reliability(f"Communicator(timeout_s={value!r})", "refused, naming TFX_TIMEOUT_S and the range")
