"""HLO text, as XLA prints it (``HloModule.to_string()``, JAX's ``lower(...).as_text(dialect="hlo")`` and
``compile().as_text()``), parsed into a module.

Read: the ``HloModule`` header, every computation (``ENTRY`` or not, with or without its signature), each
instruction's name, shape (element type, dimensions, layout), opcode, operands (``%name``, ``name`` or
``f32[2]{0} %name``), ``ROOT``, and the attributes the features use: ``parameter(N)``, ``dimensions=``,
``iota_dimension=``, ``window=``, ``dim_labels=``, ``feature_group_count=``, ``batch_group_count=``, ``slice=``,
``dynamic_slice_sizes=``, ``padding=``, ``is_stable=``, the dot dimension numbers, and the called computations
(``calls=``, ``to_apply=``, ``condition=``, ``body=``, ``select=``, ``scatter=``, ``branch_computations=``,
``true_computation=``, ``false_computation=``, ``called_computations=``). Everything else (``metadata=``,
``backend_config=``, ``sharding=``, the stack-frame tables of compiled modules, ``/*index=5*/`` comments ...) is
skipped. A shape printed without a layout gets XLA's default layout, as XLA's own parser gives it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from competition.errors import quoted as _token
from competition.hlo.check import check_module
from competition.hlo.check import quoted as _quoted
from competition.hlo.ir import (
    Computation,
    ConvDims,
    DotDims,
    HloFormatError,
    HloInstruction,
    Module,
    Shape,
    Window,
    known_opcode,
)
from competition.limits import (
    MAX_HLO_TEXT_LINES,
    MAX_PROGRAM_BYTES,
    MAX_PROGRAM_INSTRUCTIONS,
    MAX_TUPLE_DEPTH,
    file_over,
    over,
)
from competition.schema import ELEMENT_ITEMSIZE

_NAME = r"[A-Za-z0-9_.\-]+"
_HEADER = re.compile(r"\s*HloModule\s+(" + _NAME + r")")
_COMP = re.compile(r"(ENTRY\s+)?%?(" + _NAME + r")\s*(\(.*\)\s*->\s*.*?)?\s*\{\s*$")
_INSTR = re.compile(r"(ROOT\s+)?%?(" + _NAME + r")\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\s*\(")
_OPERAND = re.compile(r"%?(" + _NAME + r")\s*$")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_SECTION = re.compile(r"[A-Z][A-Za-z]*$|\d+\s")
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_CALL_KEYS = ("calls", "to_apply", "condition", "body", "select", "scatter", "branch_computations",
              "true_computation", "false_computation", "called_computations")

MAX_STATEMENT_CHARS = 1 << 20
"""The most characters a statement may hold (1 MiB of ASCII): every line is measured when the text is split, before
any is parsed, and a statement spread over several lines as its lines are joined. XLA prints an instruction on one
line, a few kB at most with its metadata; without a bound, one bracket or string left open would join the rest of
the file into one statement before the error, and one huge line (a metadata string of hundreds of MB) would be
scanned character by character."""


class _Fail(Exception):
    """A problem on the current line (the caller adds the file and line)."""


class _Unclosed(_Fail):
    """A bracket or string never closed; ``line`` is the index of the line that opened it."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, bool, bool]]:
    """Each index and character of ``text[start:]``, whether it belongs to a double-quoted string (its quotes
    included), and whether a string is still open after it."""
    quote = escape = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                quote = False
            yield i, ch, True, quote
        elif ch == '"':
            quote = True
            yield i, ch, True, True
        else:
            yield i, ch, False, False


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and strings."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for _, ch, quoted, _ in _scan(text):
        if quoted:
            pass
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise _Fail(f"a {ch!r} that closes nothing")
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``text[start]`` (strings skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack: list[str] = []
    for i, ch, quoted, _ in _scan(text, start):
        if quoted:
            continue
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            if not stack or stack.pop() != ch:
                raise _Fail(f"unbalanced {ch!r} at column {i + 1}")
            if not stack:
                return i
    raise _Fail(f"unclosed {text[start]!r} at column {start + 1}")


def _ints(text: str, what: str) -> tuple[int, ...]:
    text = text.strip().strip("{}").strip()
    if not text:
        return ()
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise _Fail(f"{what}: expected integers, found {_token(text)}") from None


def parse_shape(text: str, pos: int = 0, depth: int = 1) -> tuple[Shape, int]:
    """Parse the shape starting at ``text[pos]`` (``f32[8,16]{1,0}``, ``(f32[], s32[2]{0})``, ``pred[]``,
    ``f32[<=8]``); returns the shape and the index after it. Tuples nested more than :data:`MAX_TUPLE_DEPTH` deep
    are refused (``depth`` is the nesting of this shape)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if text.startswith("(", pos):
        if depth > MAX_TUPLE_DEPTH:
            raise _Fail(f"tuple shapes nested more than {MAX_TUPLE_DEPTH} deep (MAX_TUPLE_DEPTH), far deeper than "
                        "any real program")
        end = _closing(text, pos)
        inner = _COMMENT.sub("", text[pos + 1:end])
        elements = tuple(parse_shape(part, 0, depth + 1)[0] for part in _split_top(inner))
        return Shape("tuple", (), None, elements), end + 1
    m = _ARRAY.match(text, pos)
    if m is None:
        raise _Fail(f"cannot parse a shape at {text[pos:pos + 30]!r}")
    element_type = m.group(1)
    if element_type not in ELEMENT_ITEMSIZE or element_type == "tuple":
        raise _Fail(f"element type {element_type!r} has no column in the TpuGraphs format")
    dims: list[int] = []
    for d in (v.strip() for v in m.group(2).split(",") if v.strip()):
        try:
            dims.append(int(d.removeprefix("<=")))
        except ValueError:
            raise _Fail(f"cannot parse dimension {_token(d)} of shape {_token(m.group(0))}") from None
    pos = m.end()
    layout = None
    if text.startswith("{", pos):
        end = _closing(text, pos)
        body = text[pos + 1:end].split(":")[0]
        layout = _ints(body, f"layout of {m.group(0)}")
        pos = end + 1
        if not dims and not layout:
            layout = None
    try:
        return Shape(element_type, tuple(dims), layout), pos
    except ValueError as exc:
        raise _Fail(f"shape {_token(text[m.start():pos])}: {exc}") from None


def _window(text: str) -> Window:
    fields = dict(item.split("=", 1) for item in text.strip().strip("{}").split() if "=" in item)
    size = tuple(int(v) for v in fields["size"].split("x")) if "size" in fields else ()
    n = len(size)

    def per_dim(key: str, default: int) -> tuple[int, ...]:
        return tuple(int(v) for v in fields[key].split("x")) if key in fields else (default,) * n

    lows, highs = [], []
    for p in fields["pad"].split("x") if "pad" in fields else ["0_0"] * n:
        lo, hi = p.split("_")
        lows.append(int(lo))
        highs.append(int(hi))
    return Window(size, per_dim("stride", 1), tuple(lows), tuple(highs), per_dim("rhs_dilate", 1),
                  per_dim("lhs_dilate", 1), tuple(bool(v) for v in per_dim("rhs_reversal", 0)))


def _dim_labels(text: str) -> ConvDims:
    try:
        lhs, rest = text.split("_", 1)
        rhs, out = rest.split("->")
    except ValueError:
        raise _Fail(f"cannot parse dim_labels={_token(text)}") from None

    def spatial(labels: str) -> tuple[int, ...]:
        digits = sorted((int(ch), i) for i, ch in enumerate(labels) if ch.isdigit())
        return tuple(i for _, i in digits)

    try:
        return ConvDims(lhs.index("b"), lhs.index("f"), spatial(lhs), rhs.index("i"), rhs.index("o"),
                        spatial(rhs), out.index("b"), out.index("f"), spatial(out))
    except ValueError:
        raise _Fail(f"cannot parse dim_labels={_token(text)}") from None


def _slices(text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    starts, limits, strides = [], [], []
    for part in re.findall(r"\[([^\]]*)\]", text):
        v = [int(x) for x in part.split(":")]
        starts.append(v[0])
        limits.append(v[1])
        strides.append(v[2] if len(v) > 2 else 1)
    return tuple(starts), tuple(limits), tuple(strides)


def _padding(text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    lows, highs, interiors = [], [], []
    for p in text.split("x"):
        v = [int(x) for x in p.split("_")]
        lows.append(v[0])
        highs.append(v[1])
        interiors.append(v[2] if len(v) > 2 else 0)
    return tuple(lows), tuple(highs), tuple(interiors)


def _called(value: str) -> list[str]:
    return [v.strip().lstrip("%") for v in value.strip().strip("{}").split(",") if v.strip()]


def _instruction(line: str, names: dict[str, int]) -> tuple[bool, HloInstruction, list[str]]:
    """Parse one instruction line; returns (is_root, instruction, called computation names)."""
    m = _INSTR.match(line)
    if m is None:
        raise _Fail(f"expected an instruction 'name = shape opcode(operands)', found {line[:60]!r}")
    is_root, name = bool(m.group(1)), m.group(2)
    shape, pos = parse_shape(line, m.end())
    om = _OPCODE.match(line, pos)
    if om is None:
        raise _Fail(f"{name}: expected an opcode after the shape, found {line[pos:pos + 30]!r}")
    opcode = om.group(1)
    if not known_opcode(opcode):
        raise _Fail(f"{name}: unknown opcode {_token(opcode)}")
    close = _closing(line, om.end() - 1)
    inside = line[om.end():close]
    operands: list[int] = []
    parameter_number = None
    if opcode == "parameter":
        try:
            parameter_number = int(inside)
        except ValueError:
            raise _Fail(f"{name}: parameter number {_token(inside)} is not an integer") from None
    elif opcode != "constant":
        for op in _split_top(_COMMENT.sub("", inside)):
            om2 = _OPERAND.search(op)
            if om2 is None or om2.group(1) not in names:
                raise _Fail(f"{name}: operand {_token(op)} is not an instruction defined before it in this computation")
            operands.append(names[om2.group(1)])
    attrs: dict[str, Any] = {"name": name, "parameter_number": parameter_number}
    called: list[str] = []
    dot: dict[str, tuple[int, ...]] = {}
    tail = line[close + 1:]
    if tail.strip() and not tail.lstrip().startswith(","):
        raise _Fail(f"{name}: expected ', attribute=value' or the end of the line after the operands, found "
                    f"{tail.strip()[:30]!r}")
    for item in _split_top(tail):
        key, eq, value = item.partition("=")
        key, value = _COMMENT.sub("", key).strip(), value.strip()
        if not key and not eq:  # a comment alone
            continue
        if not eq or _KEY.fullmatch(key) is None:
            raise _Fail(f"{name}: expected an attribute 'key=value', found {item[:30]!r}")
        try:
            if key == "dimensions":
                attrs["dimensions"] = _ints(value, key)
            elif key == "iota_dimension":
                attrs["dimensions"] = (int(value),)
            elif key == "window":
                attrs["window"] = _window(value)
            elif key == "dim_labels":
                attrs["conv_dims"] = _dim_labels(value)
            elif key in ("feature_group_count", "batch_group_count"):
                attrs[key] = int(value)
            elif key == "slice":
                attrs["slice_starts"], attrs["slice_limits"], attrs["slice_strides"] = _slices(value)
            elif key == "dynamic_slice_sizes":
                attrs["dynamic_slice_sizes"] = _ints(value, key)
            elif key == "padding" and opcode == "pad":
                attrs["pad_low"], attrs["pad_high"], attrs["pad_interior"] = _padding(value)
            elif key == "is_stable":
                attrs["is_stable"] = value == "true"
            elif key in ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims"):
                dot[key] = _ints(value, key)
            elif key in _CALL_KEYS:
                called.extend(_called(value))
        except (ValueError, KeyError, IndexError) as exc:
            if isinstance(exc, _Fail):
                raise
            raise _Fail(f"{name}: cannot parse {key}={_token(value)}") from None
    if opcode == "dot":
        attrs["dot_dims"] = DotDims(dot.get("lhs_contracting_dims", ()), dot.get("rhs_contracting_dims", ()),
                                    dot.get("lhs_batch_dims", ()), dot.get("rhs_batch_dims", ()))
    if opcode == "convolution" and "conv_dims" not in attrs:
        raise _Fail(f"{name}: a convolution without dim_labels=")
    if opcode == "convolution" and "window" not in attrs:
        attrs["window"] = Window((), (), (), (), (), (), ())
    return is_root, HloInstruction(opcode, shape, tuple(operands), **attrs), called


def _carry(text: str, depth: int, quote: bool) -> tuple[int, bool]:
    """The bracket depth and whether a string is open after ``text``, from those before it: ``_scan``'s rules
    (a backslash escapes the next character inside a string; brackets inside strings do not count), each
    character read once. A line that ends on a backslash inside a string has it escape the space that joins it to
    the next, so nothing else carries over."""
    pos, n = 0, len(text)
    while pos < n:
        if quote:
            pos = _STRING_BODY.match(text, pos).end()
            if pos < n and text[pos] == '"':
                quote = False
                pos += 1
            else:  # the line ends inside the string (after a backslash or not)
                return depth, True
        else:
            q = text.find('"', pos)
            stop = n if q < 0 else q
            depth += (text.count("(", pos, stop) + text.count("[", pos, stop) + text.count("{", pos, stop)
                      - text.count(")", pos, stop) - text.count("]", pos, stop) - text.count("}", pos, stop))
            if q < 0:
                break
            quote, pos = True, q + 1
    return depth, quote


def _opener(first: int, parts: list[str]) -> tuple[int, str | None]:
    """Where the statement whose lines from ``first`` on are ``parts`` (joined by spaces) was left open: the line
    index and quote of the first string that runs past the end of its line (XLA prints none), else those of the
    outermost bracket still open; ``(first, None)`` if neither. One pass, for the error only."""
    stack: list[tuple[int, str]] = []
    for k, part in enumerate(parts):
        still_open = False
        for _, ch, quoted, after in _scan(part):
            still_open = after
            if quoted:
                continue
            if ch in "([{":
                stack.append((first + k, ch))
            elif ch in ")]}" and stack:
                stack.pop()
        if still_open:  # a string runs past the end of its line
            return first + k, '"'
    return stack[0] if stack else (first, None)


def _unclosed(first: int, parts: list[str], why: str = "is never closed") -> _Unclosed:
    line, ch = _opener(first, parts)
    return _Unclosed(line, f"{ch!r} opened here {why}" if ch else f"a bracket or string opened here {why}")


def _next_code(lines: list[str], i: int) -> str | None:
    """The first line from index ``i`` on that is not blank or a comment (comments removed, stripped); None at the
    end."""
    while i < len(lines):
        line = _COMMENT.sub("", lines[i]).strip()
        if line and not line.startswith("//"):
            return line
        i += 1
    return None


def _statements(lines: list[str], start: int) -> tuple[list[tuple[int, str]], int]:
    """The instruction statements of the computation body from line ``start`` on (lines joined with a space while
    a bracket or string is open), and the index of the closing ``}`` line.

    The bracket depth and string state are carried from line to line, so each line is read once. A bracket or
    string left open is refused naming the line that opened it: when the statement reaches the end of the text,
    passes ``MAX_STATEMENT_CHARS``, or ends on a ``}`` line followed by a computation or the end (the body's own
    ``}`` closed the open bracket).
    """
    out: list[tuple[int, str]] = []
    swallowed: tuple[int, list[str]] | None = None
    i = start
    while i < len(lines):
        line = _COMMENT.sub("", lines[i]).strip()
        if line.startswith("}"):
            return out, i
        if not line or line.startswith("//"):
            i += 1
            continue
        first = i
        depth, quote = _carry(line, 0, False)
        if depth > 0 or quote:
            parts, size = [line], len(line)
            while depth > 0 or quote:
                i += 1
                if i >= len(lines):
                    raise _unclosed(first, parts)
                more = _COMMENT.sub("", lines[i]).strip()
                size += 1 + len(more)
                if size > MAX_STATEMENT_CHARS:
                    raise _unclosed(first, parts, f"is not closed within {MAX_STATEMENT_CHARS} characters "
                                                  f"(by line {i + 1}), far more than any instruction XLA prints")
                depth, quote = _carry(more, depth, quote)
                if more.startswith("}") and depth <= 0 and not quote:
                    after = _next_code(lines, i + 1)
                    if after is None or _COMP.match(after):
                        raise _unclosed(first, parts)
                    if swallowed is None:
                        swallowed = (first, list(parts))
                parts.append(more)
            line = " ".join(parts)
        out.append((first, line))
        i += 1
    if swallowed is not None:
        raise _unclosed(*swallowed)
    raise _Fail("the last computation is not closed by '}'")


_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""What ``str.splitlines`` splits at."""


def _check_size(text: str, source: object) -> None:
    """Refuse text past :data:`MAX_PROGRAM_BYTES` characters or :data:`MAX_HLO_TEXT_LINES` lines, before it is
    split into lines."""
    problem = (over(len(text), MAX_PROGRAM_BYTES, "MAX_PROGRAM_BYTES", "characters")
               or over(sum(text.count(ch) for ch in _LINE_BREAKS), MAX_HLO_TEXT_LINES, "MAX_HLO_TEXT_LINES",
                       "lines"))
    if problem is not None:
        raise HloFormatError(source, f"{problem}; not read")


def _check_lines(lines: list[str], source: object) -> None:
    """Refuse a line of more than :data:`MAX_STATEMENT_CHARS` characters, before any line is parsed."""
    if max(map(len, lines), default=0) > MAX_STATEMENT_CHARS:
        first = next(k for k, line in enumerate(lines) if len(line) > MAX_STATEMENT_CHARS)
        raise HloFormatError(source, f"line {first + 1}: {len(lines[first]):,} characters, more than the limit of "
                                     f"{MAX_STATEMENT_CHARS:,} for one statement (MAX_STATEMENT_CHARS), far more "
                                     "than any instruction XLA prints; not read")


def parse_hlo_text(text: str, source: object = "<text>") -> Module:
    """Parse HLO text into a module: computations in the text's order (XLA prints callees first, the entry
    computation last), instructions in their printed order.

    The text is split into statements first (each line measured against :data:`MAX_STATEMENT_CHARS`); their
    count is checked against :data:`MAX_PROGRAM_INSTRUCTIONS` before any instruction is built. The computation
    marked ``ENTRY`` is put last, where XLA lists it. The module built is checked as a program
    (:func:`competition.hlo.check.check_module`) before it is returned.

    Raises:
        HloFormatError: text that is not HLO, past a limit, an unknown opcode, a shape or attribute that cannot be
            parsed, an undefined operand or computation, two ROOTs in a computation or two ENTRY computations, or a
            module that is not a valid program; the message names ``source`` and the line, or the computation and
            the instruction.
    """
    _check_size(text, source)
    lines = text.splitlines()
    _check_lines(lines, source)
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("//")):
        i += 1
    header = _HEADER.match(lines[i]) if i < len(lines) else None
    if header is None:
        found = lines[i].strip()[:40] if i < len(lines) else "an empty file"
        raise HloFormatError(source, f"not HLO text: expected a first line 'HloModule <name>, ...'; found {found!r}")
    module = Module(header.group(1))
    bodies: list[tuple[int, str, list[tuple[int, str]]]] = []
    entries: list[int] = []  # the bodies marked ENTRY
    total = 0
    i += 1
    while i < len(lines):
        raw = _COMMENT.sub("", lines[i]).strip()
        if not raw or raw.startswith("//") or _SECTION.match(raw):
            i += 1
            continue
        cm = _COMP.match(raw)
        if cm is None:
            raise HloFormatError(source, f"line {i + 1}: expected a computation '[ENTRY] name {{'; found {raw[:60]!r}")
        try:
            statements, close = _statements(lines, i + 1)
        except _Unclosed as exc:
            raise HloFormatError(source, f"line {exc.line + 1}: {exc}") from None
        except _Fail as exc:
            raise HloFormatError(source, f"computation {_token(cm.group(2))}: {exc}") from None
        total += len(statements)
        problem = over(total, MAX_PROGRAM_INSTRUCTIONS, "MAX_PROGRAM_INSTRUCTIONS", "instructions")
        if problem is not None:
            raise HloFormatError(source, f"{problem} by line {close + 1}; not read further")
        if cm.group(1):
            entries.append(len(bodies))
        bodies.append((i, cm.group(2), statements))
        i = close + 1
    called_by: list[tuple[int, str, str]] = []
    for k, (start, name, statements) in enumerate(bodies):
        bodies[k] = (start, name, [])  # each statement's text is dropped once its instruction is built
        comp = Computation(name)
        names: dict[str, int] = {}
        root, root_line = -1, -1
        for lineno, stmt in statements:
            try:
                is_root, ins, called = _instruction(stmt, names)
            except _Fail as exc:
                raise HloFormatError(source, f"line {lineno + 1}: {exc}") from None
            if ins.name in names:
                raise HloFormatError(source, f"line {lineno + 1}: instruction {_token(ins.name)} defined twice")
            names[ins.name] = len(comp.instructions)
            if is_root:
                if root >= 0:
                    raise HloFormatError(source, f"line {lineno + 1}: computation {_quoted(name)}, instruction "
                                                 f"{_quoted(ins.name)}: a second ROOT (the first is "
                                                 f"{_quoted(comp.instructions[root].name)} on line {root_line + 1}); "
                                                 "a computation has one")
                root, root_line = len(comp.instructions), lineno
            ins.called = tuple(dict.fromkeys(called))
            called_by.extend((lineno, ins.name, c) for c in ins.called)
            comp.instructions.append(ins)
        if not comp.instructions:
            raise HloFormatError(source, f"line {start + 1}: computation {_token(comp.name)} has no instructions")
        comp.root = root if root >= 0 else len(comp.instructions) - 1
        module.computations.append(comp)
    if not module.computations:
        raise HloFormatError(source, "no computation found after the HloModule line")
    if len(entries) > 1:
        first, second = bodies[entries[0]], bodies[entries[1]]
        raise HloFormatError(source, f"line {second[0] + 1}: computation {_quoted(second[1])} is a second ENTRY (the "
                                     f"first is {_quoted(first[1])} on line {first[0] + 1}); a module has one")
    if entries and entries[0] != len(module.computations) - 1:
        # XLA lists the entry computation last (callees first), and node ids number it last.
        module.computations.append(module.computations.pop(entries[0]))
    defined = {c.name for c in module.computations}
    for lineno, name, callee in called_by:
        if callee not in defined:
            raise HloFormatError(source, f"line {lineno + 1}: {name} calls {_token(callee)}, a computation the module "
                                         "does not define")
    return check_module(module, source)


def read_hlo_text_file(path: str | os.PathLike[str]) -> Module:
    """Read a file of HLO text (UTF-8), refused before it is read past :data:`MAX_PROGRAM_BYTES`."""
    problem = file_over(path, MAX_PROGRAM_BYTES, "MAX_PROGRAM_BYTES")
    if problem is not None:
        raise HloFormatError(path, f"{problem}; not read")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HloFormatError(path, f"not HLO text: byte {exc.start} is not UTF-8") from None
    return parse_hlo_text(text, path)
