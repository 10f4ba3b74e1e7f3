"""The Mesos backend's mutable state, counted by a rule, under a ceiling that only goes down.

Issue 30's goal for the backend made of collaborators: mutable state in all at most 30. What
is counted (by AST over ``tfdeclare/backends/mesos/*.py``, no import):

- **Which classes.** ``COMPOSITION``: ``MesosBackend`` and the collaborators it owns, as
  docs/architecture.md draws them (the loop, the task table, the framework record, the sender,
  the policies, the scheduler with its placer, launches and maintenance, the connection, the
  event handler each client gets); and ``STATE``: the mutable dataclasses used as state
  (``decide.Policy``). ``LEAVES`` are components with a module and tests of their own, held
  whole (the journal's files, the framework file, the agents' log reader, the cluster server,
  the HTTP client): their insides are I/O, not the backend's state. ``CONTAINERS`` are
  classes of the package that are containers of state (the offer pool): held, they count as
  one, as a dict does.
- **Which attributes.** An attribute of a counted class (bound by ``self.x = ...`` in its
  ``__init__`` or anywhere in its methods; a field of a counted dataclass) is one piece of
  mutable state when
  (a) it is written after construction: ``self.x = / += / del`` in a method of its class other
  than ``__init__`` (a closure inside ``__init__`` included), or ``y.x = ...`` on any object
  anywhere in the package (by name: conservative), or
  (b) it holds a container whose contents change whatever the binding: a ``dict``, ``list``,
  ``set`` or ``deque`` (literal, comprehension, call, annotation, or ``default_factory``) or
  one of ``CONTAINERS``.
- **What is not counted.** An attribute bound once at construction to a collaborator (a class
  of ``COMPOSITION``/``STATE``, counted there, or one of ``LEAVES``), to a frozen value (a
  frozen dataclass, an enum member, a number, a string, a tuple, a callable, the config), or
  to plumbing between threads (``queue.SimpleQueue``, a lock, a thread object): these hold no
  state of the backend's own. A field holding a frozen value that is replaced as a whole (a
  small state machine with its own transitions, e.g. ``decide.OfferState``) counts once, as any
  field does. The entries of a map (a task's ``TaskEntry``, a KILL's ``KillRecord``, a gang's
  ``Waiting``) are not counted apart: the map counts once.

Any class of the package that a counted class binds at construction must be in one of the
lists above (or frozen), so a new collaborator cannot take state out of the count unseen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfdeclare" / "backends" / "mesos"

COMPOSITION = {
    "MesosBackend",
    "Loop",
    "TaskTable",
    "FrameworkRecord",
    "Sender",
    "Policies",
    "Scheduler",
    "Placer",
    "Launches",
    "Maintenance",
    "Connection",
    "EventHandler",
}
STATE = {"Policy"}
CONTAINERS = {"OfferPool"}
LEAVES = {
    "TaskJournal": "the journal's files: a descriptor and lines since compaction",
    "FrameworkStore": "framework.json's path",
    "SandboxReader": "an HTTP client for the agents' logs, with a cache of sandbox folders",
    "ClusterWire": "the cluster server (its own thread and tokens) and which jobs were warned",
    "SchedulerClient": "the Mesos HTTP client: connections, the stream, its threads",
}
BUILTIN_CONTAINERS = {"dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter"}

CEILING = 30  # issue 30: at most 30 in all; lower it as the count goes down, never raise it


@dataclass
class _Class:
    name: str
    node: ast.ClassDef
    frozen: bool  # a frozen dataclass or an enum
    dataclass: bool
    attrs: dict[str, list[ast.expr | None]] = field(default_factory=dict)  # bound at construction
    rebound: set[str] = field(default_factory=set)  # self.x written outside __init__


def _is_dataclass(node: ast.ClassDef) -> tuple[bool, bool]:
    for deco in node.decorator_list:
        call = deco if isinstance(deco, ast.Call) else None
        name = call.func if call else deco
        if isinstance(name, ast.Name) and name.id == "dataclass":
            frozen = any(
                k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value
                for k in (call.keywords if call else [])
            )
            return True, frozen
    return False, False


def _is_enum(node: ast.ClassDef) -> bool:
    return any(isinstance(b, ast.Name) and b.id.endswith("Enum") for b in node.bases)


def _targets(node: ast.stmt) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """(target, value) pairs of an assignment, tuples unpacked where the value is a tuple too."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _pairs(target, node.value)
    elif isinstance(node, ast.AnnAssign):
        yield node.target, node.value
    elif isinstance(node, ast.AugAssign):
        yield node.target, None
    elif isinstance(node, ast.Delete):
        for target in node.targets:
            yield target, None


def _pairs(target: ast.expr, value: ast.expr | None) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    if isinstance(target, ast.Tuple | ast.List):
        values = value.elts if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elts) else None
        for i, element in enumerate(target.elts):
            yield from _pairs(element, values[i] if values else None)
    else:
        yield target, value


def _name_of(node: ast.expr | None) -> str | None:
    """The last name of a call's function or of an annotation's head."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _holds_container(value: ast.expr | None, annotation: ast.expr | None) -> bool:
    kinds = BUILTIN_CONTAINERS | CONTAINERS
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    if isinstance(value, ast.Call) and _name_of(value) == "field":
        factory = next((k.value for k in value.keywords if k.arg == "default_factory"), None)
        return _name_of(factory) in kinds
    if isinstance(value, ast.Call) and _name_of(value) in kinds:
        return True
    return _name_of(annotation) in kinds


class _Survey(ast.NodeVisitor):
    """Every class of the package, what its instances bind, and which attributes are written
    after construction."""

    def __init__(self) -> None:
        self.classes: dict[str, _Class] = {}
        self.annotations: dict[tuple[str, str], ast.expr] = {}
        self.written_elsewhere: set[str] = set()  # y.x = ... on an object other than self
        self._class: list[_Class] = []
        self._function: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        is_dc, frozen = _is_dataclass(node)
        cls = _Class(node.name, node, frozen or _is_enum(node), is_dc)
        self.classes[node.name] = cls
        if is_dc:
            for stmt in node.body:
                named = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                if named and _name_of(stmt.annotation) != "ClassVar":
                    cls.attrs[stmt.target.id] = [stmt.value]
                    self.annotations[(node.name, stmt.target.id)] = stmt.annotation
        self._class.append(cls)
        saved, self._function = self._function, []
        self.generic_visit(node)
        self._function = saved
        self._class.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._function.append(getattr(node, "name", "<lambda>"))
        self.generic_visit(node)
        self._function.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def _store(self, node: ast.stmt) -> None:
        for target, value in _targets(node):
            if not isinstance(target, ast.Attribute):
                continue
            owner = self._class[-1] if self._class and self._function else None
            if isinstance(target.value, ast.Name) and target.value.id == "self" and owner is not None:
                if self._function == ["__init__"] and not isinstance(node, ast.AugAssign | ast.Delete):
                    owner.attrs.setdefault(target.attr, []).append(value)
                    if isinstance(node, ast.AnnAssign):
                        self.annotations[(owner.name, target.attr)] = node.annotation
                else:
                    owner.attrs.setdefault(target.attr, [])
                    owner.rebound.add(target.attr)
            else:
                self.written_elsewhere.add(target.attr)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete):
            self._store(node)
        super().generic_visit(node)


def survey(sources: dict[str, str]) -> _Survey:
    found = _Survey()
    for name, text in sorted(sources.items()):
        found.visit(ast.parse(text, filename=name))
    return found


def mutable_state(found: _Survey, counted: set[str]) -> dict[str, list[str]]:
    """Per counted class, its attributes that are mutable state (the rule in the module docstring)."""
    state: dict[str, list[str]] = {}
    for name in sorted(counted):
        cls = found.classes[name]
        mutable = []
        for attr, values in cls.attrs.items():
            annotation = found.annotations.get((name, attr))
            rebound = attr in cls.rebound or attr in found.written_elsewhere
            container = any(_holds_container(v, annotation) for v in values) or (
                not values and _holds_container(None, annotation)
            )
            if rebound or container:
                mutable.append(attr)
        state[name] = sorted(mutable)
    return state


def _package() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(PACKAGE.glob("*.py"))}


def test_the_mesos_backends_mutable_state_stays_under_its_ceiling() -> None:
    found = survey(_package())
    state = mutable_state(found, COMPOSITION | STATE)
    total = sum(len(attrs) for attrs in state.values())
    breakdown = "; ".join(f"{name}: {', '.join(attrs)}" for name, attrs in state.items() if attrs)
    assert total <= CEILING, f"{total} pieces of mutable state (ceiling {CEILING}): {breakdown}"
    assert total > CEILING - 3, f"{total} now: lower CEILING to it ({breakdown})"


def test_every_collaborator_bound_at_construction_is_counted_or_named() -> None:
    found = survey(_package())
    unnamed = {}
    for name in COMPOSITION | STATE:
        for attr, values in found.classes[name].attrs.items():
            for value in values:
                made = _name_of(value) if isinstance(value, ast.Call) else None
                cls = found.classes.get(made or "")
                if cls is None or cls.frozen or made in COMPOSITION | STATE | CONTAINERS | LEAVES.keys():
                    continue
                unnamed[f"{name}.{attr}"] = made
    assert not unnamed, f"collaborators neither counted nor named a leaf (add them to a list): {unnamed}"


def test_the_rule_on_a_small_class() -> None:
    """What counts and what does not, on a class written for it."""
    source = """
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Config:
    n: int

@dataclass
class Record:
    config: Config
    count: int = 0
    seen: set[str] = field(default_factory=set)

class Helper:
    def __init__(self) -> None:
        self.cache: dict[str, int] = {}

class Owner:
    def __init__(self, config: Config) -> None:
        self.config = config  # frozen config: not counted
        self.helper = Helper()  # a collaborator: counted in its class
        self.name = "x"  # never written again: not counted
        self.items = []  # a list: counted
        self.pending: list[int] | None = None  # rebound below: counted
        self.done = False  # written from outside: counted
        self.timer = 0.0  # rebound in a closure: counted

    def step(self) -> None:
        self.pending = [1]

        def later() -> None:
            self.timer += 1

def finish(owner: Owner, record: Record) -> None:
    owner.done = True
    record.count += 1
"""
    found = survey({"example.py": source})
    assert mutable_state(found, {"Owner", "Helper", "Record"}) == {
        "Helper": ["cache"],
        "Owner": ["done", "items", "pending", "timer"],
        "Record": ["count", "seen"],
    }
