r"""Log lines: one event, one line, in text (the default) or as JSON
objects (`tempo serve --log-format json`).

A text line escapes every control character of the event (message and
traceback alike: `\n`, `\r`, `\t`, `\xHH`, `\uHHHH`, and `\\` for a
backslash), so text that came from outside (a target's answer, a worker's
error) can neither end the line nor write one that looks like tempo's own.

A JSON object has `time` (RFC 3339, UTC, milliseconds), `level`, `logger` and
`message`, then every field the log call passed with `extra=` (`job_id`,
`run_id`, `attempt`, `worker`, …) and `node` in a cluster, so a log pipeline
can select all lines about one run without parsing messages.
"""

import logging

import msgspec

from tempo import clock

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_encoder = msgspec.json.Encoder(enc_hook=repr)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": clock.iso_from_ms(int(record.created * 1000)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        # msgspec escapes newlines inside strings: one object stays one line.
        return _encoder.encode(line).decode()


TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def _escapes() -> dict[int, str]:
    """C0 and C1 controls, DEL, the Unicode line and paragraph separators
    (which some readers break lines at), and the backslash, so the escaped
    form reads back unambiguously."""
    table = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
    table.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\\"): "\\\\"})
    table.update({code: f"\\u{code:04x}" for code in (0x2028, 0x2029)})
    return table


_ESCAPES = _escapes()


def escape_line(text: str) -> str:
    """`text` with no character that could end or forge a log line."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, the whole event on one line: control characters in the
    message, its arguments or its traceback are escaped."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return escape_line(super().format(record))


class NodeFilter(logging.Filter):
    """Names this node on every record (a cluster's nodes may share a log)."""

    def __init__(self, node: str):
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node"):
            record.node = self.node
        return True
