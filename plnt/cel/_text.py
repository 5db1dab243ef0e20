"""Lexical passes over a selector before cel-cpp compiles it.

Each closes one gap between cel-cpp and Kubernetes' cel-go environment without touching
what the expression means (docs/cel.md, "How plnt fills the gaps"). String literals are
never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable

STRING_LITERAL = re.compile(r""""((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)'""")
_MAP_FIELD = re.compile(r"\b(?:attributes|capacity)\s*\.\s*([A-Za-z_]\w*)")
# Uses of the domain maps that see their key set ("in", size, iteration, binding the map).
_KEY_SET_USE = re.compile(
    r"\bin\s+device\s*\.\s*(?:attributes|capacity)\b(?!\s*[\[.])"
    r"|device\s*\.\s*(?:attributes|capacity)\s*\.\s*\w+\s*\("
    r"|\(\s*device\s*\.\s*(?:attributes|capacity)\s*\)"
    r"|,\s*device\s*\.\s*(?:attributes|capacity)\s*[,)]"
    r"|device\s*\.\s*(?:attributes|capacity)\s*(?:==|!=)"
    r"|(?:==|!=)\s*device\s*\.\s*(?:attributes|capacity)\b(?!\s*[\[.])"
)
# device.<field>; `has(device.<field>)` (a presence test on `device` itself) is left alone.
_TYPED_FIELD = re.compile(
    r"\bhas\(\s*device\s*\.\s*\w+\s*\)"
    r"|(?<![\w.])device\s*\.\s*(driver|attributes|capacity)\b(?!\s*\()"
)
_MACROS = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter|transformList|transformMap|transformMapEntry)\s*\("
)


def _outside_literals(expression: str, rewrite: Callable[[str], str]) -> str:
    pieces, last = [], 0
    for literal in STRING_LITERAL.finditer(expression):
        pieces += [rewrite(expression[last : literal.start()]), literal.group(0)]
        last = literal.end()
    pieces.append(rewrite(expression[last:]))
    return "".join(pieces)


def typed_fields(expression: str, names: dict[str, str]) -> str:
    """device.driver / .attributes / .capacity -> typed variables, so the checker knows their
    types as Kubernetes' does (it rejects `device.driver > 1` and `device.attributes == 1`
    at compile time)."""

    def typed(match: re.Match) -> str:
        return names[match.group(1)] if match.group(1) else match.group(0)

    return _outside_literals(expression, lambda code: _TYPED_FIELD.sub(typed, code))


def lookup_domains(expression: str) -> frozenset[str]:
    """Keys the expression may look up in device.attributes / device.capacity; none when it
    inspects their key set (padding would then show domains the device does not have)."""
    if _KEY_SET_USE.search(expression):
        return frozenset()
    literals = {a or b for a, b in STRING_LITERAL.findall(expression)}
    return frozenset(literals | set(_MAP_FIELD.findall(expression)))


def comprehension_depth(expression: str) -> int:
    """Deepest nesting of comprehension macros, string literals ignored."""
    text = STRING_LITERAL.sub('""', expression)
    depth, deepest, stack = 0, 0, []
    macro_starts = {m.end() - 1 for m in _MACROS.finditer(text)}
    for index, char in enumerate(text):
        if char == "(":
            is_macro = index in macro_starts
            stack.append(is_macro)
            depth += is_macro
            deepest = max(deepest, depth)
        elif char == ")" and stack:
            depth -= stack.pop()
    return deepest
