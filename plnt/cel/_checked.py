"""Checks and rewrites on cel-cpp's checked expression, for what Kubernetes' cel-go does
differently and cel-expr-python has no option for (docs/cel.md, "How plnt fills the gaps").

- `homogeneity_error`: Kubernetes' environment validates aggregate literals
  (ValidateHomogeneousAggregateLiterals), so `[1, "a"]` does not compile.
- `Rewriter`: replaces nodes by templates compiled in the same environment: equality that
  must follow Kubernetes' Quantity/Semver `Equal` (also inside cel-go's list equality and
  list `in`), domain lookups whose key was not padded in advance, and the map building of
  transformMap / transformMapEntry, which cel-expr-python cannot run. A template is an
  ordinary expression over placeholder variables; the placeholders are replaced by the
  original operands (copied with fresh ids when used twice).

The expression is decoded once into `Node`s and encoded again only when rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

from plnt.cel import _wire as w

# cel.expr.Expr fields: id, then one of the kinds
ID, CONST, IDENT, SELECT, CALL, LIST, STRUCT, COMPREHENSION = 2, 3, 4, 5, 6, 7, 8, 9
# child expressions by node kind: field numbers inside the kind's message
_CHILDREN = {SELECT: (1,), CALL: (1, 3), LIST: (1,), COMPREHENSION: (2, 4, 5, 6, 7)}
_STRUCT_ENTRIES, _ENTRY_KEY, _ENTRY_VALUE, _ENTRY_OPTIONAL = 2, 3, 4, 5
# cel.expr.Expr.Comprehension fields
_ACCU_VAR, _ACCU_INIT, _LOOP_STEP, _RESULT = 3, 4, 6, 7
_MAP_INSERT = "cel.@mapInsert"
# cel.expr.Type fields
_TYPE_FIELDS = {1: "dyn", 2: "null", 3: "prim", 4: "wrapper", 5: "well_known", 6: "list"}
_TYPE_FIELDS |= {7: "map", 9: "message", 10: "param", 11: "type", 12: "error", 14: "abstract"}
_WILDCARDS = {"dyn", "param", "error"}
QUANTITY_TYPE = ("message", "kubernetes.Quantity")
SEMVER_TYPE = ("message", "kubernetes.Semver")
_STRING_TYPE = w.encode([w.Field(3, w.VARINT, 5)])
_BOOL_TYPE = w.encode([w.Field(3, w.VARINT, 1)])
# Calls whose list and map literal arguments (at any depth) cel-go's validator exempts: the
# strings extension's format() and cel.@block.
_EXEMPT_CALLS = {"format", "cel.@block"}
# Domain lookups (index, optional index, optional selection) -> template name.
_LOOKUPS = {"_[_]": "lookup", "_[?_]": "optional_lookup", "_?._": "optional_lookup"}
PLACEHOLDER = "plnt__"  # templates name their operands plnt__a, plnt__b, plnt__m, plnt__k


# A node's fields: raw values, child expressions as Nodes, and a struct entry as a list of
# fields whose key and value are Nodes.
Leaf: TypeAlias = int | bytes
Entry: TypeAlias = "list[w.Field[Leaf | Node]]"
Value: TypeAlias = "Leaf | Node | Entry"
Body: TypeAlias = "list[w.Field[Value]]"


@dataclass
class Node:
    """One cel.expr.Expr: its kind's fields, child expressions decoded into Nodes (a struct
    entry is a list of fields whose key and value are Nodes)."""

    id: int
    kind: int
    body: Body

    @classmethod
    def parse(cls, raw: bytes) -> Node:
        node_id, kind, fields = 0, CONST, w.Fields()
        for number, _, value in w.decode(raw):
            if number == ID:
                node_id = w.as_int(value)
            else:
                kind, fields = number, w.decode(w.as_bytes(value))
        children = _CHILDREN.get(kind, ())
        body: Body = []
        for item in fields:
            if item.number in children:
                body.append(w.Field(item.number, item.wire, cls.parse(w.as_bytes(item.value))))
            elif kind == STRUCT and item.number == _STRUCT_ENTRIES:
                entry: Entry = [
                    w.Field(part.number, part.wire, cls.parse(w.as_bytes(part.value)))
                    if part.number in (_ENTRY_KEY, _ENTRY_VALUE)
                    else part
                    for part in w.decode(w.as_bytes(item.value))
                ]
                body.append(w.Field(item.number, item.wire, entry))
            else:
                body.append(item)
        return cls(node_id, kind, body)

    def dump(self) -> bytes:
        def encode_value(value: Value) -> Leaf:
            if isinstance(value, Node):
                return value.dump()
            if isinstance(value, list):
                return w.encode([w.Field(n, t, encode_value(v)) for n, t, v in value])
            return value

        body = w.encode([w.Field(n, t, encode_value(v)) for n, t, v in self.body])
        return w.encode([w.Field(ID, w.VARINT, self.id), w.Field(self.kind, w.LEN, body)])

    def children(self) -> list[Node]:
        found = []
        for _, _, value in self.body:
            if isinstance(value, Node):
                found.append(value)
            elif isinstance(value, list):
                found += [v for _, _, v in value if isinstance(v, Node)]
        return found

    def map_children(self, fn: Callable[[Node], Node]) -> None:
        for i, (number, wire, value) in enumerate(self.body):
            if isinstance(value, Node):
                self.body[i] = w.Field(number, wire, fn(value))
            elif isinstance(value, list):
                for j, (n, t, v) in enumerate(value):
                    if isinstance(v, Node):
                        value[j] = w.Field(n, t, fn(v))

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children():
            yield from child.walk()

    def nodes(self, number: int) -> list[Node]:
        """The child expressions in field `number` (a repeated field: every one)."""
        return [v for n, _, v in self.body if n == number and isinstance(v, Node)]

    def child(self, number: int) -> Node | None:
        found = self.nodes(number)
        return found[0] if found else None

    def text(self, number: int) -> str:
        return w.first_bytes(self.body, number).decode()

    def flag(self, number: int) -> bool:
        return bool(w.first_int(self.body, number))

    def has(self, number: int) -> bool:
        return any(n == number for n, _, _ in self.body)

    def call(self) -> tuple[str, list[Node], Node | None] | None:
        if self.kind != CALL:
            return None
        return self.text(2), self.nodes(3), self.child(1)

    def ident(self) -> str | None:
        return self.text(1) if self.kind == IDENT else None

    def selection(self) -> tuple[Node, str, bool] | None:
        operand = self.child(1) if self.kind == SELECT else None
        if operand is None:
            return None
        return operand, self.text(2), self.flag(3)

    def string_constant(self) -> str | None:
        if self.kind != CONST or not self.has(6):
            return None
        return self.text(6)


def _entry_node(entry: Entry, number: int) -> Node:
    for n, _, v in entry:
        if n == number and isinstance(v, Node):
            return v
    raise ValueError(f"a map literal entry without field {number}")


@dataclass
class Checked:
    """A decoded `CheckedExpr` (as cel-expr-python serializes it, inside an Any)."""

    envelope: w.Fields
    rest: w.Fields  # fields other than references, types and expr, kept as they are
    references: dict[int, bytes]
    types: dict[int, bytes]
    root: Node
    next_id: int
    _placed: set[int] = field(default_factory=set)  # operands already placed by instantiate

    @classmethod
    def of(cls, serialized: bytes) -> Checked:
        envelope = w.decode(serialized)
        tables: dict[int, dict[int, bytes]] = {2: {}, 3: {}}
        rest: w.Fields = []
        root = None
        for item in w.decode(w.first_bytes(envelope, 2)):
            if item.number in tables:
                entry = w.decode(w.as_bytes(item.value))
                tables[item.number][w.signed(w.first_int(entry, 1))] = w.first_bytes(entry, 2)
            elif item.number == 4:
                root = Node.parse(w.as_bytes(item.value))
            else:
                rest.append(item)
        root = root or Node(0, CONST, [])
        next_id = max(node.id for node in root.walk()) + 1
        return cls(envelope, rest, tables[2], tables[3], root, next_id)

    def serialize(self) -> bytes:
        fields: w.Fields = [
            w.Field(
                number,
                w.LEN,
                w.encode([w.Field(1, w.VARINT, key), w.Field(2, w.LEN, value)]),
            )
            for number, table in ((2, self.references), (3, self.types))
            for key, value in sorted(table.items())
        ]
        fields += [w.Field(4, w.LEN, self.root.dump()), *self.rest]
        envelope = [w.Field(n, t, w.encode(fields) if n == 2 else v) for n, t, v in self.envelope]
        return w.encode(envelope)

    def type_of(self, node: Node) -> tuple:
        raw = self.types.get(node.id)
        return ("dyn",) if raw is None else parse_type(raw)

    def _new_id(self, old: int, source: Checked) -> int:
        new = self.next_id
        self.next_id += 1
        if old in source.references:
            self.references[new] = source.references[old]
        if old in source.types:
            self.types[new] = source.types[old]
        return new

    def copy(self, node: Node, source: Checked, values: dict[str, Node] | None = None) -> Node:
        """A deep copy of node (from source) with fresh ids; with values, placeholder
        identifiers are replaced (the first use of a value keeps its ids)."""
        name = node.ident()
        if values is not None and name is not None and name in values:
            value = values[name]
            if value.id in self._placed:
                return self.copy(value, self)
            self._placed.add(value.id)
            return value
        new = Node(self._new_id(node.id, source), node.kind, _copy_fields(node.body))
        new.map_children(lambda child: self.copy(child, source, values))
        return new

    def instantiate(self, template: Checked, values: dict[str, Node]) -> Node:
        self._placed = set()
        return self.copy(template.root, template, values)

    def constant(self, field_number: int, value: Leaf, type_bytes: bytes) -> Node:
        """A new constant (cel.expr.Constant field 2: bool, 6: string)."""
        new = self.next_id
        self.next_id += 1
        self.types[new] = type_bytes
        wire = w.VARINT if isinstance(value, int) else w.LEN
        return Node(new, CONST, [w.Field(field_number, wire, value)])


def _holds_k8s_values(t: tuple) -> bool:
    """A list type whose elements may be Quantities or Semvers (or anything)."""
    return t[0] == "list" and (t[1][0] in _WILDCARDS or t[1] in (QUANTITY_TYPE, SEMVER_TYPE))


def _in_list_of_k8s_values(checked: Checked, element: Node, container: Node) -> bool:
    """`x in list` where x or the list's elements may be Quantities or Semvers."""
    element_type, list_type = checked.type_of(element), checked.type_of(container)
    if list_type[0] != "list":
        return False
    may_be_k8s = element_type[0] in _WILDCARDS or element_type in (QUANTITY_TYPE, SEMVER_TYPE)
    return may_be_k8s or _holds_k8s_values(list_type)


def _copy_fields(body: Body) -> Body:
    return [w.Field(n, t, list(v) if isinstance(v, list) else v) for n, t, v in body]


def result_type(serialized: bytes) -> tuple:
    """The checked type of a serialized expression."""
    checked = Checked.of(serialized)
    return checked.type_of(checked.root)


def parse_type(raw: bytes) -> tuple:
    """A cel.expr.Type as a tuple: ("dyn",), ("prim", n), ("wrapper", n), ("well_known", n),
    ("list", t), ("map", k, v), ("message", name), ("type", t), ("abstract", name, *params),
    ("null",), ("param",), ("error",)."""
    fields = w.decode(raw)
    if not fields:
        return ("dyn",)
    number, _, value = fields[0]
    kind = _TYPE_FIELDS.get(number, "other")
    if kind in ("dyn", "null", "param", "error"):
        return (kind,)  # type parameters compare by kind only, as in IsEquivalentType
    if kind in ("prim", "wrapper", "well_known"):
        return (kind, value)
    parse = _NESTED_TYPES.get(kind)
    if parse is None:
        return ("other", number, value)  # function types
    return parse(value)


def _list_type(value: Leaf) -> tuple:
    parts = w.decode(w.as_bytes(value))
    return ("list", parse_type(w.first_bytes(parts, 1)))


def _map_type(value: Leaf) -> tuple:
    parts = w.decode(w.as_bytes(value))
    return ("map", parse_type(w.first_bytes(parts, 1)), parse_type(w.first_bytes(parts, 2)))


def _abstract_type(value: Leaf) -> tuple:
    parts = w.decode(w.as_bytes(value))
    params = tuple(parse_type(p) for p in w.every_bytes(parts, 2))
    return ("abstract", w.first_bytes(parts, 1).decode(), *params)


# The kinds of type that hold a value to decode further, each with its decoder.
_NESTED_TYPES: dict[str, Callable[[Leaf], tuple]] = {
    "message": lambda value: ("message", w.as_bytes(value).decode()),
    "type": lambda value: ("type", parse_type(w.as_bytes(value))),
    "list": _list_type,
    "map": _map_type,
    "abstract": _abstract_type,
}


def _literals(node: Node, exempt: bool = False):
    """List and map literal nodes that the homogeneity validator looks at."""
    call = node.call()
    exempt = exempt or (call is not None and call[0] in _EXEMPT_CALLS)
    if not exempt and (
        node.kind == LIST or (node.kind == STRUCT and not w.first_bytes(node.body, 1))
    ):
        yield node
    for child in node.children():
        yield from _literals(child, exempt)


def _unwrap_optional(t: tuple, optional: bool) -> tuple:
    if optional and t[0] == "abstract" and t[1] == "optional_type":
        return t[2]
    return t


def _all_equivalent(types: list[tuple]) -> bool:
    return all(t == types[0] for t in types[1:])


def homogeneity_error(checked: Checked) -> str | None:
    """Kubernetes' environment validates aggregate literals (ValidateHomogeneousAggregate-
    Literals): all elements of a list literal, and all keys and all values of a map literal,
    must have equivalent types, so `[1, "a"]` and even `[1, dyn(2)]` do not compile."""
    for node in _literals(checked.root):
        if node.kind == LIST:
            optional = set(_ints(node.body, 2))
            elements = node.nodes(1)
            types = [
                _unwrap_optional(checked.type_of(e), i in optional) for i, e in enumerate(elements)
            ]
            if not _all_equivalent(types):
                return "list literal elements of different types (homogeneous aggregate literals)"
            continue
        entries = [v for n, _, v in node.body if n == _STRUCT_ENTRIES and isinstance(v, list)]
        keys = [checked.type_of(_entry_node(e, _ENTRY_KEY)) for e in entries]
        values = [
            _unwrap_optional(
                checked.type_of(_entry_node(e, _ENTRY_VALUE)),
                bool(w.first_int(e, _ENTRY_OPTIONAL)),
            )
            for e in entries
        ]
        if not (_all_equivalent(keys) and _all_equivalent(values)):
            return "map literal entries of different types (homogeneous aggregate literals)"
    return None


def _ints(body: Body, number: int) -> list[int]:
    """A repeated int field, packed or not."""
    out = []
    for n, wire, value in body:
        if n != number:
            continue
        if wire == w.VARINT:
            out.append(w.as_int(value))
            continue
        packed, pos = w.as_bytes(value), 0
        while pos < len(packed):
            item, pos = w.read_varint(packed, pos)
            out.append(item)
    return out


@dataclass
class Rewriter:
    """Rewrites a checked expression with templates over placeholders plnt__a/b/m/k.

    templates: "eq_dyn", "ne_dyn", "eq_quantity", "ne_quantity", "eq_list", "ne_list",
    "in_list" (operands a, b), "lookup", "optional_lookup" (map m, key k), "map_entries",
    "map_insert" (entries m, key k, value a), "map_insert_entries" (entries m, map a),
    "map_finish" (entries m). domain_map_types: the checked types of
    device.attributes and device.capacity; an expression of such a type is taken for one of
    them (a variable bound to it, too)."""

    templates: dict[str, Checked]
    domain_map_types: frozenset[tuple]

    def rewrite(self, checked: Checked, padded: frozenset[str]) -> bool:
        changed = False

        def visit(node: Node) -> Node:
            nonlocal changed
            node.map_children(visit)
            new = self._replacement(checked, node, padded)
            if new is None:
                return node
            changed = True
            return new

        checked.root = visit(checked.root)
        return changed

    def _is_domain_map(self, checked: Checked, node: Node) -> bool:
        return checked.type_of(node) in self.domain_map_types

    def _replacement(self, checked: Checked, node: Node, padded: frozenset[str]) -> Node | None:
        """The node rewritten, by its kind; None when it stays as it is. `padded`: the domains
        the data is padded with in advance, which a plain lookup finds."""
        if node.kind == COMPREHENSION:
            return self._map_building(checked, node)
        if node.kind == CALL:
            return self._operator(checked, node, padded)
        if node.kind == SELECT:
            return self._domain_field(checked, node, padded)
        return None

    def _operator(self, checked: Checked, node: Node, padded: frozenset[str]) -> Node | None:
        """A global binary operator where Kubernetes and cel-cpp differ: equality, `in` a list
        of Kubernetes values, an index into a domain map."""
        function, args, target = node.call() or ("", [], None)
        if target is not None or len(args) != 2:
            return None
        left, right = args
        if function in ("_==_", "_!=_"):
            return self._list_equality(checked, function, left, right) or self._equality(
                checked, function, left, right
            )
        if function == "@in" and _in_list_of_k8s_values(checked, left, right):
            values = {PLACEHOLDER + "a": left, PLACEHOLDER + "b": right}
            return checked.instantiate(self.templates["in_list"], values)
        lookup = _LOOKUPS.get(function)
        if not lookup or not self._is_domain_map(checked, left):
            return None
        if right.string_constant() in padded:
            return None
        values = {PLACEHOLDER + "m": left, PLACEHOLDER + "k": right}
        return checked.instantiate(self.templates[lookup], values)

    def _domain_field(self, checked: Checked, node: Node, padded: frozenset[str]) -> Node | None:
        """`device.attributes.d` as an index into the domain map, and `has()` of it as true."""
        selected = node.selection()
        if not selected or not self._is_domain_map(checked, selected[0]) or selected[1] in padded:
            return None
        operand, name, test_only = selected
        if test_only:  # has(device.attributes.d): Kubernetes' map finds every domain
            return checked.constant(2, 1, _BOOL_TYPE)
        key = checked.constant(6, name.encode(), _STRING_TYPE)
        values = {PLACEHOLDER + "m": operand, PLACEHOLDER + "k": key}
        return checked.instantiate(self.templates["lookup"], values)

    def _map_building(self, checked: Checked, node: Node) -> Node | None:
        """transformMap / transformMapEntry: the accumulator becomes a list of entries (a
        list grows with `+`, which cel-cpp runs) and one call turns it into the map at the
        end; a repeated key still errors there. The node is changed in place."""
        accu = node.text(_ACCU_VAR)
        step, result = node.child(_LOOP_STEP), node.child(_RESULT)
        if step is None or result is None or result.ident() != accu:
            return None
        inserts = {
            n.id
            for n in step.walk()
            if (c := n.call()) and c[0] == _MAP_INSERT and c[1][0].ident() == accu
        }
        if not inserts:
            return None

        def replace(target: Node) -> Node:
            if target.id not in inserts:
                target.map_children(replace)
                return target
            _, args, _ = target.call() or ("", [], None)  # inserts are calls
            if len(args) == 3:
                values = {PLACEHOLDER + "m": args[0], PLACEHOLDER + "k": args[1]}
                return checked.instantiate(
                    self.templates["map_insert"], values | {PLACEHOLDER + "a": args[2]}
                )
            values = {PLACEHOLDER + "m": args[0], PLACEHOLDER + "a": args[1]}
            return checked.instantiate(self.templates["map_insert_entries"], values)

        for i, (number, wire, value) in enumerate(node.body):
            if number == _LOOP_STEP and isinstance(value, Node):
                node.body[i] = w.Field(number, wire, replace(value))
            elif number == _ACCU_INIT:
                node.body[i] = w.Field(
                    number, wire, checked.instantiate(self.templates["map_entries"], {})
                )
            elif number == _RESULT and isinstance(value, Node):
                finish = checked.instantiate(
                    self.templates["map_finish"], {PLACEHOLDER + "m": value}
                )
                node.body[i] = w.Field(number, wire, finish)
        return node

    def _list_equality(
        self, checked: Checked, function: str, left: Node, right: Node
    ) -> Node | None:
        """cel-go compares lists element by element with Kubernetes' Equal (values for
        quantities) and skips a pair whose Equal errors; cel-cpp compares messages."""
        left_type, right_type = checked.type_of(left), checked.type_of(right)
        if left_type[0] != "list" or right_type[0] != "list":
            return None
        if not (_holds_k8s_values(left_type) or _holds_k8s_values(right_type)):
            return None
        name = "eq_list" if function == "_==_" else "ne_list"
        values = {PLACEHOLDER + "a": left, PLACEHOLDER + "b": right}
        return checked.instantiate(self.templates[name], values)

    def _equality(self, checked: Checked, function: str, left: Node, right: Node) -> Node | None:
        """Kubernetes' Quantity.Equal compares values, and Quantity/Semver.Equal error on an
        operand of another type; cel-cpp compares messages field by field."""
        op = "eq" if function == "_==_" else "ne"
        left_type, right_type = checked.type_of(left), checked.type_of(right)
        if left_type == QUANTITY_TYPE and right_type == QUANTITY_TYPE:
            name = f"{op}_quantity"
        elif left_type[0] in _WILDCARDS or (
            left_type in (QUANTITY_TYPE, SEMVER_TYPE) and right_type[0] in _WILDCARDS
        ):
            name = f"{op}_dyn"
        else:
            return None
        values = {PLACEHOLDER + "a": left, PLACEHOLDER + "b": right}
        return checked.instantiate(self.templates[name], values)
