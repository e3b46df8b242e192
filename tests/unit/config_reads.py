"""Where the source reads each config key, found by reading the code (an AST scan), for `test_support.py`.

A read is an attribute chain that resolves to a leaf of `TrainConfig`: `cfg.rollout.vllm.sync`, or `settings.sync`
where `settings = cfg.rollout.vllm`, or where `settings` is a parameter that some call site passes
`cfg.rollout.vllm` to (`VLLMServer.from_config(settings, ...)`, `TorchBackend(config.model, ...)`). Names `cfg` and
`config`, attributes `.config` / `.cfg` and parameters annotated `TrainConfig` are the roots. Calling a section's
method (`cfg.rollout.engine_kwargs()`) or one of `rllm.config`'s functions (`inference_options(cfg)`) reads what
that method reads. The scan records, for each read, the module and the values of `rollout.server` and
`trainer.backend` it is confined to: inside `if x.server == "vllm":` (or after such an `if` that returns), only
the matching server.

Two kinds of reads do not count as the key taking effect: those in `rllm/config.py` outside its section methods
and `inference_options` (validation reads keys in order to refuse them), and those in an `if` whose body raises
(a refusal, e.g. `if config.model.init_from: raise ConfigError(...)`).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from rllm.config import TrainConfig

SRC = Path(__file__).resolve().parents[2] / "src" / "rllm"
DIMENSIONS = {"server": ("local", "vllm", "openai"), "backend": ("torch", "verl")}
ROOT_NAMES = {"cfg", "config"}
CALLABLE_FUNCTIONS = {"inference_options"}  # rllm.config functions whose reads count at their call sites


def _tree(model: type[BaseModel], prefix: str = "") -> dict[str, type[BaseModel] | None]:
    """Every dotted path of the config: sections map to their model, leaves to None."""
    out: dict[str, type[BaseModel] | None] = {}
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out[dotted] = sub
            out.update(_tree(sub, f"{dotted}."))
        else:
            out[dotted] = None
    return out


TREE = _tree(TrainConfig)
TREE[""] = TrainConfig
LEAVES = [key for key, model in TREE.items() if key and model is None]


def _section_methods() -> tuple[dict[str, dict[str, set[str]]], dict[str, set[str]]]:
    """Class name -> method -> the fields it reads through `self` (transitively over its other methods; all of
    them for `self.model_dump()`), and class name -> the methods that return the class (`for_role`)."""
    module = ast.parse((SRC / "config.py").read_text())
    reads: dict[str, dict[str, set[str]]] = {}
    returning: dict[str, set[str]] = defaultdict(set)
    for node in module.body:
        if not isinstance(node, ast.ClassDef):
            continue
        model = _model_named(node.name)
        fields = set(model.model_fields) if model is not None else set()
        direct: dict[str, set[str]] = {}
        for item in node.body:
            if not isinstance(item, ast.FunctionDef):
                continue
            names = {
                n.attr
                for n in ast.walk(item)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            direct[item.name] = names | (fields if "model_dump" in names else set())
            if item.returns is not None and ast.unparse(item.returns).strip("'\"") == node.name:
                returning[node.name].add(item.name)
        for name in direct:  # close over self.other_method() calls
            seen, todo = set(direct[name]), list(direct[name])
            while todo:
                other = todo.pop()
                if other in direct and other != name:
                    todo.extend(direct[other] - seen)
                    seen |= direct[other]
            reads.setdefault(node.name, {})[name] = seen & fields
    return reads, returning


def _model_named(name: str) -> type[BaseModel] | None:
    return next((m for m in TREE.values() if m is not None and m.__name__ == name), None)


@dataclass(frozen=True)
class Read:
    key: str
    module: str  # relative to src/rllm, e.g. "training/trainer.py"
    line: int
    confined: tuple[tuple[str, frozenset[str]], ...] = ()  # (dimension, the values it runs for)


@dataclass
class _Scope:
    env: dict[str, frozenset[str]] = field(default_factory=dict)  # name -> config paths it holds
    confined: dict[str, frozenset[str]] = field(default_factory=dict)


class _Scanner:
    def __init__(self) -> None:
        self.methods, self.returning = _section_methods()
        self.paths_of_class: dict[str, set[str]] = defaultdict(set)
        for key, model in TREE.items():
            if model is not None:
                self.paths_of_class[model.__name__].add(key)
        self.modules = {p.relative_to(SRC).as_posix(): ast.parse(p.read_text()) for p in sorted(SRC.rglob("*.py"))}
        self.functions: dict[str, list[ast.FunctionDef]] = defaultdict(list)  # callee name -> its definitions
        for tree in self.modules.values():
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions[node.name].append(node)
                elif isinstance(node, ast.ClassDef):  # calling the class runs its __init__
                    inits = [i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"]
                    self.functions[node.name].extend(inits)
        self.params: dict[int, dict[str, frozenset[str]]] = defaultdict(dict)  # id(function) -> param bindings
        self.attrs: dict[tuple[str, str], frozenset[str]] = {}  # (class, attribute) -> paths
        self.reads: set[Read] = set()
        self.changed = False
        self.config_functions: dict[str, set[str]] = {}
        self.config_functions = self._config_function_reads()

    def _config_function_reads(self) -> dict[str, set[str]]:
        """`inference_options(config)`: the keys it reads (its body scanned like any other), to count at each call."""
        out = {}
        for node in self.modules["config.py"].body:
            if isinstance(node, ast.FunctionDef) and node.name in CALLABLE_FUNCTIONS:
                self.reads = set()
                self.visit_function("config.py", node, None)
                out[node.name] = {read.key for read in self.reads}
        return out

    # ------------------------------------------------------------------ resolution

    def resolve(self, node: ast.AST, scope: _Scope, cls: str | None) -> frozenset[str]:
        """The config paths an expression holds (empty: not config)."""
        if isinstance(node, ast.Name):
            if node.id in scope.env:
                return scope.env[node.id]
            return frozenset({""}) if node.id in ROOT_NAMES else frozenset()
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):  # getattr(algorithm, "off_policy")
                return self.resolve(ast.Attribute(value=node.args[0], attr=name.value), scope, cls)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # algorithm.for_role(role)
            bases = self.resolve(node.func.value, scope, cls)
            return frozenset(b for b in bases if node.func.attr in self.returning.get(TREE[b].__name__, ()))
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and cls and (cls, node.attr) in self.attrs:
                return self.attrs[(cls, node.attr)]
            if node.attr in ROOT_NAMES and not self.resolve(node.value, scope, cls):
                return frozenset({""})
            out = set()
            for base in self.resolve(node.value, scope, cls):
                dotted = f"{base}.{node.attr}" if base else node.attr
                if dotted in TREE:
                    out.add(dotted)
            return frozenset(out)
        return frozenset()

    def record(self, key: str, module: str, line: int, scope: _Scope) -> None:
        self.reads.add(Read(key, module, line, tuple(sorted(scope.confined.items()))))

    def visit_function(self, module: str, fn: ast.FunctionDef, cls: str | None) -> None:
        scope = _Scope(env=dict(self.params[id(fn)]))
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            annotation = ast.unparse(arg.annotation) if arg.annotation else ""
            if annotation == "TrainConfig":
                scope.env[arg.arg] = frozenset({""})
            elif annotation in self.paths_of_class:
                scope.env[arg.arg] = frozenset(self.paths_of_class[annotation])
        self.visit_block(fn.body, module, scope, cls)

    def visit_block(self, body: list[ast.stmt], module: str, scope: _Scope, cls: str | None) -> None:
        scope = _Scope(dict(scope.env), dict(scope.confined))
        for stmt in body:
            if isinstance(stmt, ast.If):
                self.visit_if(stmt, module, scope, cls)
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a closure: it sees this scope
                self.visit_block(stmt.body, module, scope, cls)
                continue
            if isinstance(stmt, ast.ClassDef):
                continue
            self.bind(stmt, scope, cls)
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, (ast.stmt, ast.ExceptHandler)):
                    continue
                self.visit_expr(child, module, scope, cls)
            for name in ("body", "orelse", "finalbody"):
                self.visit_block(getattr(stmt, name, None) or [], module, scope, cls)
            for handler in getattr(stmt, "handlers", None) or []:
                self.visit_block(handler.body, module, scope, cls)
            for item in getattr(stmt, "items", []) or []:  # with-statements
                self.visit_expr(item.context_expr, module, scope, cls)

    def visit_if(self, stmt: ast.If, module: str, scope: _Scope, cls: str | None) -> None:
        if stmt.body and isinstance(stmt.body[-1], ast.Raise) and not stmt.orelse:
            return  # a refusal: neither its condition nor its message is the key taking effect
        self.visit_expr(stmt.test, module, scope, cls)
        condition = self.dimension_test(stmt.test, scope, cls)
        if condition is None:
            self.visit_block(stmt.body, module, scope, cls)
            self.visit_block(stmt.orelse, module, scope, cls)
            return
        dimension, values = condition
        inside, outside = self.confine(scope, dimension, values), self.confine(scope, dimension, None, values)
        self.visit_block(stmt.body, module, inside, cls)
        self.visit_block(stmt.orelse, module, outside, cls)
        if stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):  # the rest runs only outside
            scope.confined = outside.confined

    @staticmethod
    def confine(scope: _Scope, dimension: str, values, excluded=frozenset()) -> _Scope:
        current = scope.confined.get(dimension, frozenset(DIMENSIONS[dimension]))
        kept = current & values if values is not None else current - excluded
        return _Scope(dict(scope.env), {**scope.confined, dimension: frozenset(kept)})

    def dimension_test(self, test: ast.AST, scope: _Scope, cls: str | None) -> tuple[str, frozenset[str]] | None:
        """`x.server == "vllm"`, `!=`, `in (...)`: the dimension and the values for which the body runs."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Attribute)):
            return None
        paths = self.resolve(test.left, scope, cls)
        dimension = {"rollout.server": "server", "trainer.backend": "backend"}.get(next(iter(paths), ""))
        if dimension is None:
            return None
        right, op = test.comparators[0], test.ops[0]
        named = {e.value for e in ast.walk(right) if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        every = frozenset(DIMENSIONS[dimension])
        if isinstance(op, (ast.Eq, ast.In)):
            return dimension, frozenset(named)
        if isinstance(op, (ast.NotEq, ast.NotIn)):
            return dimension, every - named
        return None

    def bind(self, stmt: ast.stmt, scope: _Scope, cls: str | None) -> None:
        """`x = cfg.rollout`, `a, b = cfg.model, cfg.optim`, `self.x = ...`: remember what each name holds."""
        if not isinstance(stmt, ast.Assign):
            return
        pairs = []
        for target in stmt.targets:
            if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                pairs += list(zip(target.elts, stmt.value.elts, strict=False))
            else:
                pairs.append((target, stmt.value))
        for target, value in pairs:
            paths = self.resolve(value, scope, cls)
            if not paths:
                continue
            if isinstance(target, ast.Name):
                scope.env[target.id] = paths
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and cls:
                if target.value.id == "self":
                    self.attrs[(cls, target.attr)] = paths

    def visit_expr(self, node: ast.AST, module: str, scope: _Scope, cls: str | None) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                for path in self.resolve(sub, scope, cls):
                    if TREE[path] is None:
                        self.record(path, module, sub.lineno, scope)
                for base in self.resolve(sub.value, scope, cls):  # a section's method
                    model = TREE[base]
                    for field_name in self.methods.get(model.__name__ if model else "", {}).get(sub.attr, ()):
                        dotted = f"{base}.{field_name}" if base else field_name
                        if TREE.get(dotted, 0) is None:
                            self.record(dotted, module, sub.lineno, scope)
            elif isinstance(sub, ast.Call):
                self.visit_call(sub, module, scope, cls)

    def visit_call(self, call: ast.Call, module: str, scope: _Scope, cls: str | None) -> None:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
        if name in self.config_functions and call.args and self.resolve(call.args[0], scope, cls):
            for key in self.config_functions[name]:
                self.record(key, module, call.lineno, scope)
        for fn in self.functions.get(name, []):
            params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            if params and params[0] in ("self", "cls"):
                params = params[1:]
            bound = list(zip(params, call.args, strict=False))
            bound += [(k.arg, k.value) for k in call.keywords if k.arg]
            for param, arg in bound:
                paths = self.resolve(arg, scope, cls)
                paths = frozenset(p for p in paths if p and TREE[p] is not None)  # sections; a leaf is read here
                if paths and self.params[id(fn)].get(param, frozenset()) | paths != self.params[id(fn)].get(param):
                    self.params[id(fn)][param] = self.params[id(fn)].get(param, frozenset()) | paths
                    self.changed = True

    # ------------------------------------------------------------------ driving

    def run(self) -> set[Read]:
        for _round in range(6):  # call-site bindings reach their callees in a few rounds
            self.changed, self.reads = False, set()
            for module, tree in self.modules.items():
                self.visit_module(module, tree)
            if not self.changed:
                break
        return self.reads

    def visit_module(self, module: str, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.visit_counted(module, item, node.name)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.visit_counted(module, node, None)

    def visit_counted(self, module: str, fn: ast.FunctionDef, cls: str | None) -> None:
        if module in ("config.py", "support.py"):
            return  # validation reads keys to refuse them; section methods count where they are called
        self.visit_function(module, fn, cls)


def config_reads() -> set[Read]:
    """Every read of a config key in src/rllm (module docstring)."""
    return _Scanner().run()
