"""Reading params.yaml: a YAML loader that refuses duplicate keys, and the one entry point
(``load_params``) every consumer uses -- the CLI, the Snakefile, DVC's stage commands and the tests --
so a bad value fails the same way everywhere: before any work starts, with the key path and the
reason (``ConfigError``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dpsynth.config.base import format_validation
from dpsynth.config.params import Params, pipeline_migration_message
from dpsynth.config.run import check_sweep_at_scale
from dpsynth.config.targets import check_targets
from dpsynth.errors import ConfigError


def parse_params(raw: Any, source: str = "params.yaml", scale: str | None = None) -> Params:
    """Validate an already-loaded mapping; ``scale`` overrides the file's ``scale:``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    migration = pipeline_migration_message(raw)
    if migration is not None:
        raise ConfigError(f"{source}: {migration}")
    if scale is not None:
        raw = {**raw, "scale": scale}
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation(exc)}") from None
    try:
        check_targets(params)  # the build targets' names, and those pipeline.tables lists
        params.pipeline_targets()  # sweep cells and the targets' warm starts must validate too
        for sweep in params.pipeline_sweeps():  # and every swept value must take effect at this scale
            check_sweep_at_scale(params, sweep)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return params


class DuplicateKeyError(yaml.YAMLError):
    """A mapping gives the same key twice; ``duplicates`` is [(key, key path, line numbers)]."""

    def __init__(self, duplicates: list[tuple[str, str, list[int]]]) -> None:
        self.duplicates = duplicates
        super().__init__("; ".join(f"duplicate key {key!r} at {where} (lines {_and(lines)})"
                                   for key, where, lines in duplicates))


def _and(items: list[Any]) -> str:
    words = [str(i) for i in items]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


class ExpansionError(yaml.YAMLError):
    """A file whose aliases and merge keys add more than ``MAX_ALIAS_VALUES`` values (``alias_expansion``), or
    hold a node that contains itself."""


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    On libyaml's C parser where PyYAML has it (the same safe construction; params.yaml parses in
    17 ms instead of 110: every job, Snakefile and DVC stage command reads it at start-up).

    Plain YAML loaders silently keep the last value: a second ``privacy:`` inside one experiment
    turned its epsilon 10 into 1000, and a second ``experiments.<name>:`` replaces the first
    experiment, with no warning. The mappings are checked on the composed node tree, before any
    value is built, because constructing merge keys (``<<: *anchor``) rewrites mapping nodes in
    place; an explicit key overriding a merged one is what ``<<`` is for and stays allowed.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        added = alias_expansion(node)
        if added > MAX_ALIAS_VALUES:
            raise ExpansionError(f"its aliases and merge keys (<<) expand to more than {MAX_ALIAS_VALUES:,} values "
                                 "beyond what the file writes out (an alias or merge-key bomb); nothing was built "
                                 "from it")
        duplicates: dict[str, tuple[str, list[int]]] = {}
        self._find_duplicates(node, "", set(), duplicates)
        if duplicates:
            raise DuplicateKeyError(sorted(((key, where, lines) for where, (key, lines) in duplicates.items()),
                                           key=lambda d: d[2]))
        return super().construct_document(node)

    def _find_duplicates(self, node: yaml.Node, path: str, seen: set[int],
                         out: dict[str, tuple[str, list[int]]]) -> None:
        if id(node) in seen:  # an alias: checked where its anchor is defined (and no endless recursion)
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._find_duplicates(item, f"{path}[{i}]", seen, out)
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self._find_duplicates(value_node, path, seen, out)
                    continue
                key: Any = None
                if isinstance(key_node, yaml.ScalarNode):
                    key = self.construct_object(key_node, deep=True)  # `1` and `1.0`, `a` and 'a' are one key
                label = str(key_node.value) if key is not None else "?"  # as written in the file
                where = f"{path}.{label}" if path else label
                line = key_node.start_mark.line + 1
                try:
                    if key is not None and key in first:
                        out.setdefault(where, (label, [first[key]]))[1].append(line)
                    elif key is not None:
                        first[key] = line
                except TypeError:  # an unhashable key: YAML construction reports it itself
                    pass
                self._find_duplicates(value_node, where, seen, out)


#: The most values (scalars, mappings, sequences) the aliases and merge keys (``<<``) of a YAML file may add
#: to what it writes out, each counted as the copy it becomes. params.yaml's add a few hundred; a 2 KB file of
#: nested merge keys adds 4^39 (PyYAML's merge flattening copies each merged mapping: it would run for hours),
#: refused here in milliseconds before anything is built. A large file with no alias adds none: its size alone
#: is no bomb (it is read, and validated, like any other).
MAX_ALIAS_VALUES = 1_000_000


def _expansion(root: yaml.Node) -> tuple[int, int]:
    """(values ``root`` becomes once every alias and merge key is expanded, distinct nodes it holds), counted on
    the composed node tree (shared nodes once each, memoized: linear in the file, whatever it expands to). A node
    that contains itself (a recursive alias: ``yaml_depth_problem`` names its anchor before this is reached) is
    ``ExpansionError``, never an endless loop."""
    memo: dict[int, int] = {}
    path: set[int] = set()  # the nodes being counted: one met again inside itself is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative post-order: a deep file must not overflow Python's recursion here either
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if not ready:
            if id(node) in path:
                line = node.start_mark.line + 1 if node.start_mark is not None else "?"
                raise ExpansionError(f"the node at line {line} contains itself (a recursive alias); nothing was "
                                     "built from it")
            path.add(id(node))
            stack.append((node, True))
            stack += [(c, False) for c in children if id(c) not in memo]
            continue
        path.discard(id(node))
        memo[id(node)] = min(1 + sum(memo.get(id(c), 0) for c in children), 2 ** 62)
    return memo[id(root)], len(memo)


def expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` becomes once every alias and merge key is expanded (``_expansion``)."""
    return _expansion(root)[0]


def alias_expansion(root: yaml.Node) -> int:
    """How many values the aliases and merge keys of ``root`` add to the ones the file writes out: what the
    bomb limit (``MAX_ALIAS_VALUES``) counts -- a large file with no alias adds none."""
    expanded, distinct = _expansion(root)
    return expanded - distinct


#: The deepest nesting of mappings and sequences a YAML file may have. params.yaml nests 5 levels; the limit
#: is far above any real file and far below what breaks the readers (``yaml_depth_problem``).
MAX_YAML_DEPTH = 100


def yaml_depth_problem(text: str, limit: int = MAX_YAML_DEPTH) -> str | None:
    """Why ``text`` cannot be read safely -- nested too deep, or a recursive alias -- ``None`` when it can, found
    BEFORE it is parsed into nodes. Lists nested 1,000 deep overflow Python's recursion in the duplicate-key
    check (a traceback); 100,000 deep overflow the C stack of libyaml's composer (the process dies, rc 139, no
    word). A recursive alias (``lol: &r [*r]``, 13 bytes: an alias inside the collection its anchor names) is a
    value that contains itself: counting or building it never ends, and every reader of the file hung. The scan
    reads libyaml's event stream, which keeps its state on the heap, counts open collections and stops at the
    first one past ``limit`` or the first alias of an anchor still open: a few milliseconds for params.yaml,
    bounded work for a hostile file. A syntax error is left to the real parse, which names it."""
    depth = 0
    opened: list[str | None] = []  # the anchors of the open collections, outermost first
    live: dict[str, tuple[int, int]] = {}  # anchor -> (depth of the open collection it names, or 0; its line)
    try:
        for event in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > limit:
                    return f"nested deeper than {limit} levels (line {line}); nothing was read from it"
                opened.append(event.anchor)
                if event.anchor is not None:
                    live[event.anchor] = (depth, int(line) if line != "?" else 0)
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor = opened.pop()
                if anchor is not None and live.get(anchor, (0, 0))[0] == depth:
                    live[anchor] = (0, live[anchor][1])  # closed: an alias of it from now on is a plain copy
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                live[event.anchor] = (0, int(line) if line != "?" else 0)
            elif isinstance(event, yaml.AliasEvent) and live.get(event.anchor, (0, 0))[0]:
                return (f"the alias *{event.anchor} (line {line}) lies inside the anchor &{event.anchor} it names "
                        f"(line {live[event.anchor][1]}): a recursive alias, a value that contains itself, which "
                        "no reader can expand; nothing was read from it")
    except yaml.YAMLError:
        return None
    return None


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with ``UniqueKeyLoader``; every failure is a ``ConfigError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such parameters file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # a comment or value saved in Latin-1, say: name the byte, not a traceback
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}) "
                          "cannot be decoded; save the file as UTF-8") from None
    deep = yaml_depth_problem(text)
    if deep is not None:
        raise ConfigError(f"{path}: {deep}")
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{path}: {exc}: YAML would silently keep only the last value; remove or "
                          "rename the other one") from None
    except ExpansionError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def check_yaml_file(path: str | Path) -> None:
    """Refuse duplicate keys (and invalid YAML) in a file someone else loads: Snakemake reads
    params.yaml itself (``configfile:``) with a loader that keeps the last of two equal keys."""
    load_yaml(path)


def load_params(path: str | Path = "params.yaml", scale: str | None = None) -> Params:
    """Read and validate params.yaml. The one entry point for every consumer."""
    return parse_params(load_yaml(path), source=str(path), scale=scale)
