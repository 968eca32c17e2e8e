"""``with X.scoped(): ...`` — the public way for tests and plug-in authors to register something for a while:
the tool registry, the plug-in registries (planners) and the backends forget what the block registered."""
from __future__ import annotations

import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.llm import backends
from mltb_core.llm.backends import BackendSpec, backend, register_backend
from mltb_core.plugins import NameClashError, Registry
from mltb_core.toolkit.registry import REGISTRY, make_set_tool


def test_a_tool_added_in_a_scope_is_gone_after_it_and_one_it_replaced_is_back():
    before = [tool.name for tool in REGISTRY]
    original = REGISTRY.get("read_data")
    with REGISTRY.scoped():
        @make_set_tool(roles=("loading",))
        def scoped_marker() -> int:
            """A tool that lives for one block."""
            return 1

        @make_set_tool(roles=("loading",), overrides=True, name="read_data")
        def read_data() -> int:
            """A replacement."""
            return 2

        assert "scoped_marker" in REGISTRY and REGISTRY.get("read_data") is not original
    assert [tool.name for tool in REGISTRY] == before and REGISTRY.get("read_data") is original


def test_a_plugin_registry_scope_forgets_registrations_even_when_the_block_raises():
    class Kept:
        pass

    class Other:
        pass

    registry: Registry[type] = Registry("thing")
    registry.register("kept", Kept)
    with pytest.raises(NameClashError), registry.scoped():
        registry.register("temporary", Other)
        registry.register("kept", Other)             # a clash inside the block still undoes the block
    assert dict(registry) == {"kept": Kept}


def test_a_backend_scope_forgets_its_backends_and_an_empty_one_starts_from_none():
    installed = set(backends.available_backends())
    with backends.scoped_backends():
        @backend("scopedtest")
        class Scoped(BackendSpec):
            pass

        register_backend(Scoped)
        assert "scopedtest" in backends.available_backends()
    assert set(backends.available_backends()) == installed
    with backends.scoped_backends(empty=True):
        assert backends._registry == {}
    assert set(backends.available_backends()) == installed
