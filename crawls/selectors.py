"""A small CSS selector subset on the standard library's HTML parser, for change alerts that
watch part of a page (docs/cli.md, `schedule --watch-selector`).

    selector = Selector.parse("main .price, #stock")   # ValueError with the reason if not
    selector.text(html)                                 # the selected elements' text, or None

Supported: a type (`div`), `.class`, `#id`, their compounds (`div.price#total`), the
descendant combinator (a space) and groups (`,`). Anything else (`>`, `+`, `~`, attributes,
pseudo-classes, `*`) is refused when the selector is set, not silently read as something else.
The venv has no lxml or cssselect; this is enough to say "that part of the page".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

MAX_SELECTOR = 500
COMPOUND = re.compile(r"([a-zA-Z][a-zA-Z0-9-]*)?((?:[.#][a-zA-Z_-][a-zA-Z0-9_-]*)*)")
PART = re.compile(r"([.#])([a-zA-Z_-][a-zA-Z0-9_-]*)")
VOID = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"])
HIDDEN = frozenset(("script", "style", "noscript", "template"))
BLOCK_END = frozenset(["p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "br", "td", "th", "dt", "dd"])


@dataclass(frozen=True)
class Compound:
    tag: str | None
    id: str | None
    classes: frozenset[str]

    def matches(self, node: Node) -> bool:
        return ((self.tag is None or node.tag == self.tag)
                and (self.id is None or node.id == self.id)
                and self.classes <= node.classes)


@dataclass(frozen=True)
class Selector:
    groups: tuple[tuple[Compound, ...], ...]
    source: str

    @classmethod
    def parse(cls, text: str) -> Selector:
        source = " ".join(text.split())
        if not source:
            raise ValueError("the selector is empty")
        if len(source) > MAX_SELECTOR:
            raise ValueError(f"the selector is longer than {MAX_SELECTOR} characters")
        groups = []
        for group in source.split(","):
            parts = group.split()
            if not parts:
                raise ValueError(f"{source!r}: an empty selector between commas")
            groups.append(tuple(compound(part, source) for part in parts))
        return cls(tuple(groups), source)

    def text(self, html: str) -> str | None:
        """The text of every element it selects, in document order; None if it selects none."""
        root = parse_tree(html)
        chosen = [node for node in root.walk() if self.selects(node)]
        if not chosen:
            return None
        return "\n".join(" ".join(node.text().split()) for node in chosen)

    def selects(self, node: Node) -> bool:
        return any(chain_matches(chain, node) for chain in self.groups)


def compound(part: str, source: str) -> Compound:
    match = COMPOUND.fullmatch(part)
    if not match or not part:
        raise ValueError(f"{source!r}: {part!r} is not supported (only tag, .class, #id and "
                         "descendants, e.g. 'main .price')")
    tag, rest = match.groups()
    ids = [name for kind, name in PART.findall(rest) if kind == "#"]
    if len(ids) > 1:
        raise ValueError(f"{source!r}: {part!r} names two ids")
    classes = frozenset(name for kind, name in PART.findall(rest) if kind == ".")
    return Compound(tag.lower() if tag else None, ids[0] if ids else None, classes)


def chain_matches(chain: tuple[Compound, ...], node: Node) -> bool:
    """The last compound matches the node, the others its ancestors in order (descendant)."""
    if not chain[-1].matches(node):
        return False
    wanted = len(chain) - 2
    ancestor = node.parent
    while wanted >= 0 and ancestor is not None:
        if chain[wanted].matches(ancestor):
            wanted -= 1
        ancestor = ancestor.parent
    return wanted < 0


@dataclass(eq=False)
class Node:
    tag: str
    id: str | None = None
    classes: frozenset[str] = frozenset()
    parent: Node | None = None
    children: list[Node | str] = field(default_factory=list)

    def walk(self):
        for child in self.children:
            if isinstance(child, Node):
                yield child
                yield from child.walk()

    def text(self) -> str:
        pieces = []
        for child in self.children:
            if isinstance(child, str):
                pieces.append(child)
            elif child.tag not in HIDDEN:
                pieces.append(child.text())
                if child.tag in BLOCK_END:
                    pieces.append("\n")
        return " ".join(pieces)


class TreeBuilder(HTMLParser):
    """A forgiving tree: an end tag closes up to its nearest open element of that name."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.open = self.root

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        node = Node(tag, id=values.get("id"), classes=frozenset((values.get("class") or "").split()),
                    parent=self.open)
        self.open.children.append(node)
        if tag not in VOID:
            self.open = node

    def handle_endtag(self, tag):
        node = self.open
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.open = node.parent

    def handle_data(self, data):
        self.open.children.append(data)


def parse_tree(html: str) -> Node:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def page_text(html: str) -> str:
    """The text a reader sees: scripts, styles and templates dropped, spaces collapsed per line."""
    lines = (" ".join(line.split()) for line in parse_tree(html).text().split("\n"))
    return "\n".join(line for line in lines if line)
