"""Log lines as JSON objects, one a line (`tempo serve --log-format json`).

Each object has `time` (RFC 3339, UTC, milliseconds), `level`, `logger` and
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


class NodeFilter(logging.Filter):
    """Names this node on every record (a cluster's nodes may share a log)."""

    def __init__(self, node: str):
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node"):
            record.node = self.node
        return True
