"""Skips every multi-host test, with the reason, where simulated hosts cannot be built."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosts  # noqa: E402


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [item for item in items if str(item.fspath).startswith(here)]
    if mine and hosts.skip_reason():
        marker = pytest.mark.skip(reason=hosts.skip_reason())
        for item in mine:
            item.add_marker(marker)
