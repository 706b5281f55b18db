"""The tables layer: the LMDB databases of the state machine, their keys
and the upkeep of their indexes, behind typed operations (docs/design.md
"Apply: the rules and the tables"). With engine/store.py, which opens the
environment, and engine/raftlog.py, the only modules that import lmdb.

- layout.py: the tables' names, the rows of `meta`, the codecs, and which
  index rows a run has (no LMDB);
- reads.py: one transaction's lookups (`Reads`);
- keyed.py: request keys, claim keys, members, the notifier's cursor;
- buckets.py: the history buckets of days, taken into use and dropped whole;
- writes.py: `Tables`, the operations the rules write with, and the
  change feed (`Changes`);
- build.py: indexes built at open for a store of an older version.
"""

from tempo.engine.tables.reads import Bucket, Reads
from tempo.engine.tables.writes import Changes, NewRows, Tables

__all__ = ["Bucket", "Changes", "NewRows", "Reads", "Tables"]
