"""rLLM v0.2's public names, for code written against rLLM: one room, served at rLLM's own import paths.

The rule, one line: **the module `rllm.compat.X` is also `rllm.X`**. This tree mirrors rLLM v0.2.1's (`agents/`,
`environments/`, `engine/`, `parser/`, `rewards/`, `tools/`, `sdk/`, `trainer/`, ...), so `import
rllm.environments.tools.tool_env` gives the module `rllm.compat.environments.tools.tool_env` itself (one module object,
so classes keep their identity, `mock.patch` on either path patches both, pickles name the compat path).

Where rllm's own package has the same path (`rllm.agents`, `rllm.engine`, `rllm.rewards`, `rllm.tools`, ...), the
native package is the one imported, and its own names win; a name it does not define falls back to the compat twin's
`__all__` (so `from rllm.agents import ToolAgent` is rLLM's `ToolAgent`, while `from rllm.agents import BaseAgent`
is rllm's). Which names collide is listed by `collisions()` and in docs/compat.md ("Coming from rLLM").

Direction: compat code imports native code, never the reverse (`compat/tests/test_compat_room.py` and the import
contracts check it). This package is the `rllm-compat` distribution (the repository's `compat/`), installed beside the
core (`pip install 'rllm[compat]'`); `import rllm` imports this module first when it is installed, which installs the
finder below; it imports nothing else.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["collisions", "install_finder", "twin_of"]

_ROOT = Path(__file__).resolve().parent
# The core package's own directory: rllm-compat may be installed in another one (an editable checkout, compat/src),
# which the core's `__path__` then lists second (rllm/__init__.py).
_NATIVE_ROOT = Path(sys.modules["rllm"].__file__).resolve().parent
_PREFIX = "rllm."
_COMPAT = "rllm.compat"


def twin_of(fullname: str) -> str | None:
    """`rllm.compat.X` for `rllm.X` when the compat tree has that module or package; else None."""
    if not fullname.startswith(_PREFIX) or fullname == _COMPAT or fullname.startswith(_COMPAT + "."):
        return None
    relative = Path(*fullname[len(_PREFIX) :].split("."))
    if (_ROOT / relative).with_suffix(".py").is_file() or (_ROOT / relative / "__init__.py").is_file():
        return _COMPAT + fullname[len("rllm") :]
    return None


def _is_native(fullname: str) -> bool:
    relative = Path(*fullname[len(_PREFIX) :].split("."))
    return (_NATIVE_ROOT / relative).with_suffix(".py").is_file() or (_NATIVE_ROOT / relative / "__init__.py").is_file()


class _CompatFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers `rllm.X` with `rllm.compat.X` where rllm has no `rllm.X` of its own; gives a native package with a
    compat twin a fallback `__getattr__` onto the twin's `__all__`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        twin = twin_of(fullname)
        if twin is None:
            return None
        if not _is_native(fullname):
            return importlib.util.spec_from_loader(fullname, self, is_package=_is_package(twin))
        native = importlib.machinery.PathFinder.find_spec(fullname, path)
        if native is not None and native.submodule_search_locations is not None:
            native.loader = _NativeWithTwin(native.loader, twin)
        return native

    def create_module(self, spec: Any) -> ModuleType:
        module = importlib.import_module(twin_of(spec.name))
        spec.loader_state = module.__spec__  # the import system is about to overwrite it with the rLLM path's
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the compat module is already imported): only put its own spec back."""
        module.__spec__ = module.__spec__.loader_state


def _is_package(twin: str) -> bool:
    return (_ROOT / Path(*twin.split(".")[2:]) / "__init__.py").is_file()


class _NativeWithTwin(importlib.abc.Loader):
    """The native package's own loader, then the fallback `__getattr__`."""

    def __init__(self, loader: Any, twin: str) -> None:
        self._loader, self._twin = loader, twin

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__getattr__ = _fallback(module, self._twin)

    def __getattr__(self, name: str) -> Any:  # get_code, get_resource_reader, ...: the native loader's
        return getattr(self._loader, name)


def _fallback(module: ModuleType, twin: str) -> Any:
    own = module.__dict__.get("__getattr__")

    def __getattr__(name: str) -> Any:
        if own is not None:
            try:
                return own(name)
            except AttributeError:
                pass
        if name.startswith("__"):
            raise AttributeError(name)
        compat = importlib.import_module(twin)
        if name in getattr(compat, "__all__", ()):
            return getattr(compat, name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    return __getattr__


def collisions() -> dict[str, list[str]]:
    """Per package that both trees have: the names rLLM exports there that rllm's own package defines too (rllm's
    win). Imports both packages."""
    found: dict[str, list[str]] = {}
    for init in sorted(_ROOT.rglob("__init__.py")):
        relative = init.parent.relative_to(_ROOT).parts
        if not relative or not _is_native(_PREFIX + ".".join(relative)):
            continue
        native = importlib.import_module(_PREFIX + ".".join(relative))
        compat = importlib.import_module(f"{_COMPAT}.{'.'.join(relative)}")
        own = set(vars(native)) | set(getattr(native, "__all__", ()))
        both = sorted(name for name in getattr(compat, "__all__", ()) if name in own)
        if both:
            found[native.__name__] = both
    return found


_FINDER = _CompatFinder()


def install_finder() -> None:
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


install_finder()
