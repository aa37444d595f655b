"""Reading YAML that a user hands ccpo, with the work it may cost bounded.

PyYAML's `safe_load` builds what any document describes: a few hundred bytes of nested
aliases ("billion laughs") describe a structure of billions of nodes, which the code walking it
(flattening a config, say) then expands, and a document nested 50,000 levels deep overflows the
composer's recursion. Every YAML file or value ccpo reads from a user (`ccpo ingest --config`,
arm files, the protocol file, `key=value` overrides) goes through `load_yaml` instead, which
checks three bounds before it builds a single Python object:

- size: the text is at most `MAX_BYTES` (files are read no further than that);
- depth: collections nest at most `MAX_DEPTH` levels, in the text and once aliases are expanded;
- nodes: the document holds at most `MAX_NODES` nodes once every alias is expanded, and no alias
  refers to a collection that contains it (a cycle never ends).

The depth is measured on the parser's event stream, which PyYAML produces without recursion;
only then is the node graph composed, and its expanded size and depth are counted once per
node (aliases share nodes), so the check itself costs time linear in the text.
A document outside a bound is refused with `YamlRefused`, one that does not parse with
`YamlSyntaxError`; both are `InvalidInput` (exit 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ccpo_cli.errors import InvalidInput

# libyaml's parser where PyYAML was built with it (the wheels are): the same events, nodes and
# values as the pure-Python one at a fraction of the cost, which every command pays for the arm
# and benchmark files it reads. A text it rejects is parsed again by the pure-Python loader, so
# the message a user sees names the problem as it always has.
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 100_000


class YamlSyntaxError(InvalidInput):
    """The text is not YAML."""


class YamlRefused(InvalidInput):
    """The text is YAML, but building it would cost more than the bounds allow."""


def _syntax_error(source: str, error: yaml.YAMLError) -> YamlSyntaxError:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or type(error).__name__
    return YamlSyntaxError(f"{source}: not valid YAML ({problem}{where})")


def _check_events(text: str, source: str, max_depth: int, max_nodes: int, loader: type) -> None:
    depth = 0
    nodes = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise YamlRefused(
                    f"{source}: YAML nested deeper than {max_depth} levels; refusing to read it"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > max_nodes:
                raise YamlRefused(
                    f"{source}: YAML with more than {max_nodes} nodes; refusing to read it"
                )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: yaml.Node, source: str, max_depth: int, max_nodes: int) -> None:
    """Refuse a node graph whose alias expansion is too large, too deep or never ends."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative post-order walk: each node is counted once, whatever refers to it
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(kid)] for kid in kids)
            depth[key] = (1 + max((depth[id(kid)] for kid in kids), default=0)) if kids else 0
            if size[key] > max_nodes:
                raise YamlRefused(
                    f"{source}: YAML whose aliases expand to more than {max_nodes} nodes; "
                    "refusing to read it"
                )
            if depth[key] > max_depth:
                raise YamlRefused(
                    f"{source}: YAML whose aliases nest deeper than {max_depth} levels; "
                    "refusing to read it"
                )
            continue
        if key in size:
            continue
        on_path.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in on_path:
                raise YamlRefused(
                    f"{source}: YAML with an alias that refers to a collection containing it; "
                    "refusing to read it"
                )
            if id(kid) not in size:
                stack.append((kid, False))


def load_yaml(
    text: str, source: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES
) -> Any:
    """The Python value of one YAML document (`safe_load` semantics), within the bounds.

    `source` names the text in messages (a path, or `--config value`)."""
    if len(text) > MAX_BYTES:
        raise YamlRefused(
            f"{source}: YAML text larger than {MAX_BYTES // (1024 * 1024)} MiB; refusing to read it"
        )
    try:
        return _bounded_load(text, source, max_depth, max_nodes, FAST_LOADER)
    except yaml.YAMLError:
        pass
    try:
        return _bounded_load(text, source, max_depth, max_nodes, yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise _syntax_error(source, error) from None


def _bounded_load(text: str, source: str, max_depth: int, max_nodes: int, loader_type: type) -> Any:
    _check_events(text, source, max_depth, max_nodes, loader_type)
    loader = loader_type(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, source, max_depth, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_bounded_text(path: str | Path) -> str:
    """A UTF-8 text file read no further than `MAX_BYTES` (YamlRefused beyond); OSError and
    UnicodeDecodeError as `Path.read_text` raises them."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YamlRefused(
            f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB; refusing to read it"
        )
    return data.decode("utf-8")


def read_yaml_file(path: str | Path) -> Any:
    """A YAML file's value, read no further than `MAX_BYTES`; InvalidInput when it cannot be
    read, is not UTF-8 YAML, or is outside the bounds."""
    try:
        text = read_bounded_text(path)
    except OSError as error:
        raise InvalidInput(f"{path}: cannot read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise YamlSyntaxError(f"{path}: not UTF-8 text") from None
    return load_yaml(text, str(path))
