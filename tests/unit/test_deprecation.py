"""The moved-module finder of `rllm._deprecation`: an old path warns and yields the new module itself, untouched."""

from __future__ import annotations

import importlib
import sys

import pytest

import rllm  # noqa: F401 - installs the finder
from rllm import _deprecation


@pytest.fixture
def moved_types(monkeypatch):
    monkeypatch.setitem(_deprecation.MOVED_MODULES, "rllm._old_types", "rllm.types")
    monkeypatch.delitem(sys.modules, "rllm._old_types", raising=False)
    yield importlib.import_module("rllm.types")
    sys.modules.pop("rllm._old_types", None)


def test_old_path_warns_at_the_importing_line_and_is_the_new_module(moved_types):
    spec = moved_types.__spec__
    with pytest.warns(DeprecationWarning, match=r"module rllm\._old_types is deprecated.*use rllm\.types") as caught:
        import rllm._old_types as old  # the line the warning must point at
    assert old is moved_types and old.Episode is moved_types.Episode
    assert caught[0].filename == __file__
    assert moved_types.__spec__ is spec and moved_types.__name__ == "rllm.types"  # importing the old path left it


def test_old_path_warns_once_per_process(moved_types, recwarn):
    with pytest.warns(DeprecationWarning):
        importlib.import_module("rllm._old_types")
    importlib.import_module("rllm._old_types")
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
