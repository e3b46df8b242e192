"""pytest plugin for writing SWE task statements, loaded in the sandbox with `-p rllm_swe_trace` (standard library +
pytest only; never while grading).

While each test runs, every call from a test file's code into the package's code (a "boundary call") is recorded in
order: the function with the values of its arguments as it was entered, and what came back: the value returned,
the exception raised, or, for a generator, the values it yielded. The builder runs a task's failing tests traced on
the buggy tree and on the fixed one; the first call made the same way in both whose outcome differs is the failure
a statement describes (rllm.tasks.swe.build.problem_statement): the call, the wrong output, the expected one.

Values are shown by `repr` (memory addresses masked, so two runs compare equal), cut to `MAX_REPR` characters; a
string holding newlines is kept as text so that a table or a report reads as it prints. At the end of the session
the events are in `TRACES` (node id -> events), which the harness (rllm_swe_harness.py) sends back."""

from __future__ import annotations

import dis
import os
import re
import sys

import pytest

ROOT = os.environ.get("RLLM_SWE_TRACE_ROOT", "/testbed").rstrip("/") + "/"  # another root: for tests
MAX_REPR = 600
MAX_EVENTS = 200  # per test: a loop over a thousand calls needs only its first ones to show where it goes wrong
MAX_YIELDS = 30
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_GENERATOR = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
_YIELD = dis.opmap.get("YIELD_VALUE")
_RETURNS = {dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap}
TRACES: dict[str, list[dict]] = {}


def _is_test_path(rel: str) -> bool:  # as rllm.tasks.swe.grading.is_test_path (this file runs without rllm)
    parts = rel.split("/")
    name = parts[-1]
    in_test_dir = any(p in ("test", "tests", "testing") for p in parts[:-1])
    return in_test_dir or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


_kinds: dict[str, str | None] = {}
_RUNNER = ("/_pytest/", "/pytest/", "/pluggy/", "/unittest/", "<frozen importlib", "/importlib/")  # and imports


def _kind(filename: str) -> str | None:
    """ "test", "package", "runner" (pytest's own code: its assertion helpers, unittest's asserts) or None."""
    if filename not in _kinds:
        if filename.startswith(ROOT) and filename.endswith(".py"):
            _kinds[filename] = "test" if _is_test_path(filename[len(ROOT) :]) else "package"
        elif any(part in filename for part in _RUNNER):
            _kinds[filename] = "runner"
        else:
            _kinds[filename] = None
    return _kinds[filename]


_names: dict[int, tuple[object, str]] = {}  # id -> (object, the call that made it), during one test


def show(value: object) -> str:
    """A value as a statement shows it: the call that made it when a traced call did (`Stats([1, 2])`), else its
    repr, or the text itself for a string of several lines."""
    named = _names.get(id(value))
    if named is not None and named[0] is value:
        return named[1]
    try:
        text = value if isinstance(value, str) and "\n" in value else repr(value)
    except Exception as e:  # a repr that raises is itself part of the behaviour: say so
        text = f"<repr raised {type(e).__name__}>"
    text = _ADDRESS.sub("0x...", text)
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + " ...[cut]"


_PLAIN = (str, bytes, int, float, complex, bool, type(None), tuple, list, dict, set, frozenset)


def _name(value: object, call: str) -> None:
    """Show `value` as `call` from now on in this test (an object a traced call made: a class or factory's)."""
    if not isinstance(value, _PLAIN) and id(value) not in _names:
        _names[id(value)] = (value, call)


def _attribute(frame) -> object:
    """What the function's qualified name leads to from its module (the class attribute for a method), or None."""
    code = frame.f_code
    target: object = frame.f_globals
    for part in getattr(code, "co_qualname", code.co_name).split("."):
        namespace = target if isinstance(target, dict) else getattr(target, "__dict__", None)
        target = namespace.get(part) if hasattr(namespace, "get") else None
        if target is None:
            return None
    return target


def _defaults(code, attribute: object) -> dict[str, object]:
    """The function's default argument values by name."""
    function = getattr(attribute, "__func__", None) or getattr(attribute, "fget", None) or attribute
    if getattr(function, "__code__", None) is not code:
        return {}
    names = code.co_varnames[: code.co_argcount]
    values = dict(zip(names[len(names) - len(function.__defaults__ or ()) :], function.__defaults__ or (), strict=True))
    return {**values, **(function.__kwdefaults__ or {})}


def _same(a: object, b: object) -> bool:
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except Exception:
        return False


def _descriptor_name(descriptor: object, owner: object) -> str | None:
    for klass in getattr(owner, "__mro__", ()):
        for name, value in vars(klass).items():
            if value is descriptor:
                return name
    return None


# special methods as the code that calls them is written (the arguments in order: self first)
_OPERATORS = {
    "__getitem__": "{}[{}]",
    "__setitem__": "{}[{}] = {}",
    "__delitem__": "del {}[{}]",
    "__contains__": "{1} in {0}",
    "__len__": "len({})",
    "__iter__": "iter({})",
    "__next__": "next({})",
    "__reversed__": "reversed({})",
    "__repr__": "repr({})",
    "__str__": "str({})",
    "__bool__": "bool({})",
    "__hash__": "hash({})",
    "__eq__": "{} == {}",
    "__ne__": "{} != {}",
    "__lt__": "{} < {}",
    "__le__": "{} <= {}",
    "__gt__": "{} > {}",
    "__ge__": "{} >= {}",
    "__add__": "{} + {}",
    "__sub__": "{} - {}",
    "__or__": "{} | {}",
    "__and__": "{} & {}",
    "__xor__": "{} ^ {}",
    "__iadd__": "{} += {}",
    "__ior__": "{} |= {}",
}


def describe_call(frame) -> str:
    """The call as a user writes it: `name(arg, ..., key=value)` with the argument values it entered the frame
    with (those left at their defaults left out), `obj.method(...)`, `Class(...)`, `obj.attribute`."""
    code, values = frame.f_code, frame.f_locals
    positional = list(code.co_varnames[: code.co_argcount])
    keyword = list(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    rest = code.co_argcount + code.co_kwonlyargcount
    star = code.co_varnames[rest] if code.co_flags & 0x04 else None
    starstar = code.co_varnames[rest + (star is not None)] if code.co_flags & 0x08 else None
    extra = tuple(values.get(star, ())) if star else ()
    attribute = _attribute(frame)
    defaults = _defaults(code, attribute)
    qualname = getattr(code, "co_qualname", code.co_name)
    owner, _, method = qualname.rpartition(".")
    prefix = qualname
    if positional[:1] == ["self"] and owner and "<locals>" not in method:
        this = values.get("self")
        if isinstance(attribute, property):  # `Stats([1, 2]).mean`
            return f"{show(this)}.{method}"
        if method == "__get__" and len(positional) >= 2:  # a descriptor: `Stats([1, 2]).std_dev`
            instance = values.get(positional[1])
            name = _descriptor_name(this, type(instance) if instance is not None else values.get(positional[-1]))
            if name is not None:
                return f"{show(instance) if instance is not None else owner}.{name}"
        if method in _OPERATORS and len(positional) == _OPERATORS[method].count("{") and not extra:
            return _OPERATORS[method].format(*(show(values.get(n)) for n in positional))  # `BarrelList([0])[0]`
        if method == "__init__":  # `Box([1, 2])`: self is not made yet, its repr may fail
            prefix = type(this).__name__
        elif not method.startswith("__"):  # `Box([1, 2]).total(5)`
            prefix = f"{show(this)}.{method}"
        if prefix != qualname:
            positional = positional[1:]
    parts, by_name = [], False
    for name in positional:
        if name in defaults and not extra and _same(values.get(name), defaults[name]):
            by_name = True  # a later argument must then be named
            continue
        parts.append(f"{name}={show(values.get(name))}" if by_name else show(values.get(name)))
    parts += [show(v) for v in extra]
    named = [n for n in keyword if not (n in defaults and _same(values.get(n), defaults[n]))]
    parts += [f"{n}={show(values.get(n))}" for n in named]
    parts += [f"{k}={show(v)}" for k, v in dict(values.get(starstar) or {}).items()] if starstar else []
    return f"{prefix}({', '.join(parts)})"


class _Recorder:
    """Boundary calls: a package function called from a test's code, or a function outside the repository (the
    standard library's `TextWrapper.wrap` on a package's subclass) called from a test's code that runs package
    code before it returns."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.open: dict[int, tuple[object, dict]] = {}  # id(frame) -> (frame, its event), while it runs
        self.outer: list[dict] = []  # the open calls from a test into code outside the repository

    def global_trace(self, frame, event, arg):
        if event != "call":
            return None
        kind = _kind(frame.f_code.co_filename)
        if kind in ("test", "runner") or frame.f_code.co_name == "<module>":  # an import is not a call of the story
            return None
        if id(frame) in self.open and self.open[id(frame)][0] is frame:  # a generator resumed
            return self.local_trace
        caller = frame.f_back
        while kind == "package" and caller is not None and _kind(caller.f_code.co_filename) == "runner":
            caller = caller.f_back  # `assertRaises(ValueError, f, 1)` calls f for the test
        from_test = caller is not None and _kind(caller.f_code.co_filename) == "test"
        if kind == "package":
            for record in self.outer:
                record["touched"] = True
        if not from_test or len(self.events) >= MAX_EVENTS:
            return None
        if kind is None and frame.f_code.co_flags & _GENERATOR:
            return None
        record = {"call": describe_call(frame)}
        if kind is None:
            record["outer"] = True
            self.outer.append(record)
        if frame.f_code.co_flags & _GENERATOR:
            record["yields"] = []
        self.events.append(record)
        self.open[id(frame)] = (frame, record)
        frame.f_trace_lines = False  # only calls, returns and exceptions matter here
        return self.local_trace

    def local_trace(self, frame, event, arg):
        entry = self.open.get(id(frame))
        if entry is None or entry[0] is not frame:
            return None
        record = entry[1]
        if event == "exception":  # raised here or passing through: whether it leaves the frame shows at its return
            record["pending"] = f"{arg[0].__name__}: {arg[1]}".rstrip(": ")
        elif event == "return":
            self._returned(frame, record, arg)
        return self.local_trace

    def _returned(self, frame, record: dict, value) -> None:
        # how the frame left: by its last instruction (a `return` event does not say whether an exception is leaving)
        pending, code = record.pop("pending", None), frame.f_code.co_code
        last = code[frame.f_lasti] if 0 <= frame.f_lasti < len(code) else None
        if last in _RETURNS or (last == _YIELD and last is not None):
            pending = None  # an exception met on the way was caught inside
        if "yields" in record and last == _YIELD and last is not None:
            if len(record["yields"]) < MAX_YIELDS:
                record["yields"].append(show(value))
            return
        del self.open[id(frame)]
        if record.pop("outer", False):
            self.outer.remove(record)
            if not record.pop("touched", False):  # it never ran package code: not part of the story
                self.events.remove(record)
                if frame.f_code.co_name == "__init__" and pending is None:  # but a package's subclass it made is
                    _name(frame.f_locals.get("self"), record["call"])
                return
        if pending is not None:
            record["raises"] = _ADDRESS.sub("0x...", pending)[:MAX_REPR]
        elif "yields" not in record:
            record["returns"] = show(value)
            if frame.f_code.co_name == "__init__":
                _name(frame.f_locals.get("self"), record["call"])
            else:
                _name(value, record["call"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    recorder = _Recorder()
    previous = sys.gettrace()
    _names.clear()
    sys.settrace(recorder.global_trace)
    try:
        return (yield)
    finally:
        sys.settrace(previous)
        _names.clear()
        TRACES[item.nodeid] = [_closed(r) for r in recorder.events]


def _closed(record: dict) -> dict:
    """An event whose frame never returned (a generator left unfinished) shows what it gave so far."""
    for key in ("pending", "outer", "touched"):
        record.pop(key, None)
    if "yields" not in record and "raises" not in record and "returns" not in record:
        record["returns"] = "<did not return>"
    return record
