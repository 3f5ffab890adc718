"""A Python file's blocks: what a test's record names of the code it ran, and the checksums
a change is judged by.

A block is one of:
- a function (a method, a nested function: each `def` at any depth): its body, and its
  signature where it has no decorator;
- a class that has methods and no decorator: its bases and its own statements (attributes,
  the signatures of its decorated methods), not its methods' blocks;
- the module's own code: everything else (imports, constants, top-level control flow, and
  every definition that runs code of its own when imported: a decorated function's or class's
  header, a decorated class's body, a class without methods, and the statement that defines
  each class, its name, bases and keywords: a new class that registers itself through its
  base's `__init_subclass__` or a metaclass runs code at import), and the names bound by
  more than one `def` (the last one replaces the others at import).

A test that ran a function depends on that function's block, the blocks around it (its class,
an enclosing function) and its module's own code. So a change inside `Encoder.forward` moves
only the tests that ran it; a new keyword in an undecorated model's `__init__` moves only the
tests that built that model; a new import, a constant or a registering decorator moves every
test that ran anything in the file.

A checksum is of the block's syntax tree, without line numbers and docstrings: a comment, a
docstring, blank lines or code that moved up or down change no checksum. Nothing here imports
torch or pytest.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

MODULE = "<module>"
"""The name of a file's own block (what importing it runs)."""

Function = ast.FunctionDef | ast.AsyncFunctionDef


def checksum(data: bytes) -> str:
    """A short checksum (12 hex digits: a record compares a block with its own later self,
    so collisions between different blocks do not matter)."""
    return hashlib.blake2b(data, digest_size=6).hexdigest()


@dataclass(frozen=True)
class Blocks:
    """The blocks of one file: each block's checksum, the block of each line, and the block
    each block lies in."""

    checksums: dict[str, str]  # block name -> checksum
    by_line: tuple[str, ...]  # line number (from 1) -> the innermost block holding it
    parents: dict[str, str]  # a block -> the block it is defined in

    def of_lines(self, lines: set[int] | frozenset[int]) -> set[str]:
        """The blocks the given executed lines lie in, with every block around them (a
        method runs only because its class was defined) and the module's."""
        found = {MODULE}
        for line in lines:
            name = self.by_line[line] if 0 < line < len(self.by_line) else MODULE
            while name != MODULE and name not in found:
                found.add(name)
                name = self.parents.get(name, MODULE)
        return found


def _is_function(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)


def _own_class(node: ast.AST) -> bool:
    """A class that is a block of its own: undecorated, with at least one method."""
    return (
        isinstance(node, ast.ClassDef)
        and not node.decorator_list
        and any(_is_function(child) for child in node.body)
    )


def _own_block(node: ast.AST) -> bool:
    return _is_function(node) or _own_class(node)


def read_blocks(source: bytes | str) -> Blocks:
    """The blocks of a module's source (SyntaxError or ValueError where it does not parse)."""
    tree = ast.parse(source)
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    count = text.count("\n") + 2
    by_line = [MODULE] * count
    checksums: dict[str, str] = {}
    parents: dict[str, str] = {}
    found: list[tuple[ast.AST, str]] = []

    def visit(node: ast.AST, prefix: str, parent: str) -> None:
        for child in ast.iter_child_nodes(node):
            if _own_block(child):
                assert isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                name = _unique(f"{prefix}{child.name}", checksums)
                checksums[name] = ""  # reserved; the checksum comes below
                parents[name] = parent
                found.append((child, name))
                if _is_function(child):
                    # the lines that run when it is called: its body (its header runs where
                    # it is defined, with the block around it; a class's own statements run
                    # when the module is imported, so a class is reached through its methods)
                    first = child.body[0].lineno
                    last = child.end_lineno or child.body[-1].lineno
                    for line in range(first, min(last, count - 1) + 1):
                        by_line[line] = name  # outer first: an inner block marks after
                visit(child, f"{name}.", name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", parent)
            else:
                visit(child, prefix, parent)

    visit(tree, "", MODULE)
    for node, name in found:
        checksums[name] = checksum(_own_dump(node).encode())
    checksums[MODULE] = checksum(_dump(_outside_blocks(tree.body)).encode())
    return Blocks(checksums, tuple(by_line), parents)


def _unique(name: str, taken: dict[str, str]) -> str:
    """`name`, or `name#2`, `name#3`... for a second definition of the same name (a property's
    setter, a function defined in both branches of an `if`)."""
    if name not in taken:
        return name
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


def _dump(nodes: list[ast.stmt]) -> str:
    return "\n".join(ast.dump(n, include_attributes=False) for n in nodes)


def _own_dump(node: ast.AST) -> str:
    """What a block's checksum is of."""
    if _is_function(node):
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        body = _dump(_outside_blocks(node.body))
        if node.decorator_list:
            return body  # its header is the enclosing block's
        return f"{_header(node)}\n{body}"
    assert isinstance(node, ast.ClassDef)
    return f"{_header(node)}\n{_dump(_outside_blocks(node.body))}"


def _header(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """A definition without its body: its name, signature or bases, decorators."""
    body = node.body
    try:
        node.body = []
        return ast.dump(node, include_attributes=False)
    finally:
        node.body = body


def _outside_blocks(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of `body` that belong to the block holding them: each block of its
    own left out, a decorated function by its header alone, and the same within a class
    that is no block of its own (a decorated one, or one without methods)."""
    out: list[ast.stmt] = []
    defined: list[str] = []
    for node in _without_docstring(body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.decorator_list:
                out.append(_stub(node, []))
            else:
                defined.append(node.name)
        elif _own_class(node):
            assert isinstance(node, ast.ClassDef)
            out.append(_stub(node, []))  # the class statement runs at import: its header
        elif isinstance(node, ast.ClassDef):
            out.append(_stub(node, _outside_blocks(node.body)))
        else:
            out.append(node)
    twice = sorted({name for name in defined if defined.count(name) > 1})
    if twice:  # a `def` that replaces another of the same name changes what import binds
        out.append(ast.Expr(ast.Constant(" ".join(twice))))
    return out


def _stub(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, body: list[ast.stmt]
) -> ast.stmt:
    """A copy of a definition's node with another body (the tree itself is left alone)."""
    copy = type(node)(**{f: getattr(node, f) for f in node._fields})
    copy.body = body
    return copy


class BlockReader:
    """The files of a tree read into blocks, each once: `reader(path)` is the blocks of
    `path` under `root` (None: missing, or it does not parse, which makes it a whole-file
    dependency)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._blocks: dict[str, Blocks | None] = {}

    def __call__(self, path: str) -> Blocks | None:
        if path not in self._blocks:
            try:
                self._blocks[path] = read_blocks((self.root / path).read_bytes())
            except (OSError, SyntaxError, ValueError):
                self._blocks[path] = None
        return self._blocks[path]
