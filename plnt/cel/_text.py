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
_TYPED_FIELD = re.compile(r"(?<![\w.])device\s*\.\s*(driver|capacity)\b(?!\s*\()")
_MACROS = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter|transformList|transformMap|transformMapEntry)\s*\("
)
_NUMBER = (
    r"(?:0[xX][0-9a-fA-F]+[uU]?|\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+"
    r"|\.\d+(?:[eE][+-]?\d+)?|\d+[uU]?)"
)
_NUMBER_AFTER = re.compile(r"\s*(-?" + _NUMBER + r")(?![\w.(\[])")
_NUMBER_BEFORE = re.compile(r"(?<![\w.])(" + _NUMBER + r")\s*$")
_CROSS_NUMERIC_ERROR = re.compile(
    r"<input>:(\d+):(\d+): found no matching overload for '_(?:<|<=|>|>=)_' applied to "
    r"'\((?:int|uint|double), (?:int|uint|double)\)'"
)


def _outside_literals(expression: str, rewrite: Callable[[str], str]) -> str:
    pieces, last = [], 0
    for literal in STRING_LITERAL.finditer(expression):
        pieces += [rewrite(expression[last : literal.start()]), literal.group(0)]
        last = literal.end()
    pieces.append(rewrite(expression[last:]))
    return "".join(pieces)


def typed_fields(expression: str, names: dict[str, str]) -> str:
    """device.driver / device.capacity -> typed variables, so the checker knows their types
    (Kubernetes' checker rejects `device.driver > 1` at compile time)."""
    return _outside_literals(
        expression, lambda code: _TYPED_FIELD.sub(lambda m: names[m.group(1)], code)
    )


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


def dyn_cross_numeric(text: str, error: str) -> str | None:
    """Kubernetes' checker orders int, uint and double against each other
    (CrossTypeNumericComparisons); cel-cpp's checker only does so for dyn operands. For each
    such rejected comparison whose operand next to the operator is a number literal, wrap
    that literal in dyn(); None when the error is anything else."""
    spots = [(int(m.group(1)), int(m.group(2))) for m in _CROSS_NUMERIC_ERROR.finditer(error)]
    if not spots:
        return None
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    edits: list[tuple[int, int]] = []
    for line, column in spots:
        at = line_starts[line - 1] + column - 1
        operator_end = at + (2 if text[at + 1 : at + 2] == "=" else 1)
        after = _NUMBER_AFTER.match(text, operator_end)
        before = _NUMBER_BEFORE.search(text[:at])
        if after:
            edits.append(after.span(1))
        elif before:
            edits.append(before.span(1))
        else:
            return None
    for start, end in sorted(edits, reverse=True):
        text = f"{text[:start]}dyn({text[start:end]}){text[end:]}"
    return text
