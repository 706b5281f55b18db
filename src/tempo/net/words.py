"""msgspec's validation messages in plain words (docs/api.md "Errors").

msgspec says `Invalid enum value 'sometimes'`, `Expected `int | null`, got
`str`` and `Invalid RFC3339 encoded datetime`: true, but in the library's
words, without the values a client may send instead. `plain` rewrites a
message at the edge, where net/ turns it into problem+json; the field path
(`loc`) is kept as msgspec gives it. A message this module does not know is
kept as it is rather than guessed at.
"""

import functools
import re
from collections.abc import Callable
from typing import Any

import msgspec

# An example of every time a request carries (docs/api.md "General").
TIME_EXAMPLE = "2027-01-01T09:00:00Z"

# msgspec's names of JSON (and MessagePack) types, in words.
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "null": "null",
    "object": "an object",
    "array": "a list",
    "datetime": f"an RFC 3339 time such as {TIME_EXAMPLE}",
    "bytes": "binary data",
}
_SIZE_WORDS = {"str": "characters", "array": "items", "object": "keys", "bytes": "bytes"}
_BOUND_WORDS = {">=": "at least", "<=": "at most", ">": "greater than", "<": "less than"}

_ENUM = re.compile(r"^Invalid enum value (?P<value>.*)$", re.S)
_EXPECTED_GOT = re.compile(r"^Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`$")
_BOUND = re.compile(r"^Expected `(?P<type>\w+)` (?P<op>>=|<=|>|<) (?P<bound>\S+)$")
_LENGTH = re.compile(r"^Expected `(?P<type>\w+)` of length (?P<op>>=|<=) (?P<bound>\d+)$")
_PATTERN = re.compile(r"^Expected `str` matching regex (?P<pattern>.*)$", re.S)
_TIME = re.compile(r"^Invalid RFC3339 encoded (?:datetime|date|time)$")
_NO_OFFSET = re.compile(r"^Expected `datetime` with a timezone component$")
_UNKNOWN = re.compile(r"^Object contains unknown field `[^`]*`$")
_MISSING = re.compile(r"^Object missing required field `[^`]*`$")
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def type_words(spelled: str) -> str:
    """`int | null` → `an integer or null`."""
    names = [name.strip() for name in spelled.split("|")]
    words = [_TYPE_WORDS.get(name, f"`{name}`") for name in names]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _enum(m: re.Match[str], kind: Any, path: str) -> str:
    values = enum_values(kind, path)
    if not values:
        return f"{m.group('value')} is not a valid value here"
    listed = ", ".join(msgspec.json.encode(v).decode() for v in values)
    return f"{m.group('value')} is not a valid value: use one of {listed}"


def _length(m: re.Match[str]) -> str:
    size = _SIZE_WORDS.get(m.group("type"), "items")
    return f"expected {type_words(m.group('type'))} of {_BOUND_WORDS[m.group('op')]} {m.group('bound')} {size}"


# msgspec's messages, each with its words: (pattern, words of the match).
_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], Any, str], str]], ...] = (
    (_ENUM, _enum),
    (_EXPECTED_GOT, lambda m, _k, _p: f"expected {type_words(m.group('want'))}, got {type_words(m.group('got'))}"),
    (_TIME, lambda _m, _k, _p: f"not an RFC 3339 time: write it as {TIME_EXAMPLE} (UTC) "
                               "or with an offset, 2027-01-01T10:00:00+01:00"),
    (_NO_OFFSET, lambda _m, _k, _p: f"a time needs an offset: write it as {TIME_EXAMPLE} (UTC) "
                                    "or 2027-01-01T10:00:00+01:00"),
    (_BOUND, lambda m, _k, _p: f"expected {type_words(m.group('type'))} {_BOUND_WORDS[m.group('op')]} "
                               f"{m.group('bound')}"),
    (_LENGTH, lambda m, _k, _p: _length(m)),
    (_PATTERN, lambda m, _k, _p: f"expected a string matching the pattern {m.group('pattern')}"),
    (_UNKNOWN, lambda _m, _k, _p: "unknown field: this object has no field of that name"),
    (_MISSING, lambda _m, _k, _p: "a required field is missing"),
)


def plain(msg: str, kind: Any = None, path: str = "") -> str:
    """msgspec's `msg` about the value at `path` (`.schedule.cron`,
    `.jobs[0]`) of a body decoded as `kind`, in plain words."""
    for pattern, words in _RULES:
        m = pattern.match(msg)
        if m:
            return words(m, kind, path)
    return msg


def enum_values(kind: Any, path: str) -> list[Any]:
    """The values the field at `path` of `kind` may take, when it is a
    `Literal` or an `Enum` (optional or not); [] when that cannot be told."""
    if kind is None:
        return []
    try:
        info: Any = _type_info(kind)
    except (TypeError, ValueError):
        return []
    for m in _PATH_PART.finditer(path):
        info = _step(info, m.group(1), m.group(2))
        if info is None:
            return []
    values: list[Any] = []
    for one in _members(info):
        if isinstance(one, msgspec.inspect.LiteralType):
            values += list(one.values)
        elif isinstance(one, msgspec.inspect.EnumType):
            values += [member.value for member in one.cls]
    return values


@functools.lru_cache(maxsize=32)
def _type_info(kind: Any) -> Any:
    """Once per type: a batch of 1,000 bad items asks 1,000 times."""
    return msgspec.inspect.type_info(kind)


def _members(info: Any) -> list[Any]:
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    if isinstance(info, msgspec.inspect.UnionType):
        return [m for t in info.types for m in _members(t)]
    return [info]


def _step(info: Any, name: str | None, index: str | None) -> Any:
    """The type one step down `info`: the field `name`, or an item."""
    for one in _members(info):
        if name is not None and isinstance(one, msgspec.inspect.StructType):
            for f in one.fields:
                if f.encode_name == name:
                    return f.type
        if index is not None:
            if isinstance(one, msgspec.inspect.DictType):
                return one.value_type
            if isinstance(one, (msgspec.inspect.ListType, msgspec.inspect.VarTupleType,
                                msgspec.inspect.SetType, msgspec.inspect.FrozenSetType)):
                return one.item_type
            if isinstance(one, msgspec.inspect.TupleType) and index.isdecimal() and int(index) < len(one.item_types):
                return one.item_types[int(index)]
    return None
