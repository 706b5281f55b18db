"""What a data directory is, checked before LMDB maps it (docs/operations.md
"Data directory" and "Corrupt data").

LMDB trusts its files: a `data.mdb` shorter than its meta pages say is mapped
anyway and the first read past its end is SIGBUS; a garbled meta page asks
for a map past memory; a 0-byte file is taken for a new environment and
started empty; any LMDB environment opens, whoever made it. So before
`lmdb.open`, `check_files` reads the directory and the two meta pages itself,
and once the environment is open `check_tables` looks at the names of its
databases. Anything wrong is a `DataDirError` that says what is wrong and what
to do; `tempo serve` prints it and exits 2.

The identity record (`Identity`, in the database `identity`, which no
snapshot copies) says whose directory it is: a single node's, or one cluster
member's. It is written in the transaction that first creates tempo's tables
and compared with the flags at every start (`check_identity`).

## The meta pages (LMDB's format, lmdb.h and mdb.c, 64-bit builds)

`data.mdb` is an array of pages of one size. Pages 0 and 1 are the meta
pages; a commit writes the one its transaction ID's parity picks, so the
newer of the two is the current state and the other the one before it. Each
begins with a page header, then the meta fields (native byte order):

| offset | field | size | what |
|---|---|---|---|
| 0 | `mp_pgno` | 8 | the page's own number: 0 or 1 |
| 10 | `mp_flags` | 2 | `P_META` (0x08) on a meta page |
| 16 | `mm_magic` | 4 | `0xBEEFC0DE` |
| 20 | `mm_version` | 4 | the data format, 1 |
| 40 | `mm_dbs[0].md_pad` | 4 | the page size (stored in the free DB's pad field) |
| 80 | `mm_dbs[0].md_root` | 8 | root page of the free-page DB, or all ones when empty |
| 120 | `mm_dbs[1].md_entries` | 8 | entries of the main DB: the named databases |
| 128 | `mm_dbs[1].md_root` | 8 | root page of the main DB, or all ones when empty |
| 136 | `mm_last_pg` | 8 | the last page in use |
| 144 | `mm_txnid` | 8 | the transaction that wrote it |

`mm_last_pg` is the highest page number ever handed out, not the end of
what was written: pages that a transaction takes at the end of the file and
frees again before it commits are counted there but never written, so a
healthy file may be shorter than `(mm_last_pg + 1) * page size`. What must be
in the file are the pages LMDB reads first, the two roots of each meta page
(written before the meta page that names them: tempo opens LMDB with
`sync=True, metasync=True`); a file that cuts one of them off was truncated.
And `mm_last_pg` may run past the file's end by at most what one transaction
can take and free (`_UNWRITTEN_BYTES_MAX` beyond the file's own size); past
that it is garbled, and LMDB would ask for a map of that size.
"""

import fcntl
import hashlib
import os
import re
import stat
import struct
from dataclasses import dataclass
from typing import Literal

import msgspec

# Identity format: 1 is the first with an identity record. A directory of an
# earlier version (tempo's tables, no record) is adopted once: see
# `check_identity`.
FORMAT_VERSION = 1
IDENTITY_DB = b"identity"
IDENTITY_KEY = b"identity"
# The raft state's database and the key that exists once a member has
# founded or joined (engine/raftlog.py): how an earlier version's directory
# tells a member's from a single node's.
RAFT_META_DB = b"raft_meta"
SNAPSHOT_META_KEY = b"snapshot_meta"

DATA_FILE = "data.mdb"
LOCK_FILE = "lock.mdb"
SNAPSHOT_DIR = "snapshot"  # a cluster member's raft snapshots (engine/raftlog.py)
# What tempo writes into its directory, and what a file system puts at the
# root of a volume, where a data directory is often mounted.
_OWN_ENTRIES = frozenset({DATA_FILE, LOCK_FILE, SNAPSHOT_DIR})
_VOLUME_ENTRIES = frozenset({"lost+found"})

_PAGE_HEADER = struct.Struct("=QHHI")  # mp_pgno, mp_pad, mp_flags, lower/upper
_META = struct.Struct("=IIQQ")  # mm_magic, mm_version, mm_address, mm_mapsize
_DB = struct.Struct("=IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow pages, entries, root
_META_TAIL = struct.Struct("=QQ")  # mm_last_pg, mm_txnid
_META_BYTES = _PAGE_HEADER.size + _META.size + 2 * _DB.size + _META_TAIL.size
_P_META = 0x08
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_NO_PAGE = (1 << 64) - 1  # P_INVALID: the root of an empty DB
# How far a healthy meta page's last page may run past the end of the file:
# pages taken and freed within one transaction are never written (see the
# module's docstring). One batch takes at most a few hundred MiB; 1 GiB
# beyond twice the file's size is far past that and far below a garbled
# page count (a map of 2^48 bytes and more).
_UNWRITTEN_BYTES_MAX = 1 << 30
_PAGE_BYTES_MIN = 512
_PAGE_BYTES_MAX = 1 << 16
assert _META_BYTES == 152, "the 64-bit layout of a meta page"

_HIST = re.compile(rb"hist:\d+")  # history buckets (engine/tables/layout.py bucket_name)
_RESTORE = (
    "restore the data directory from a backup, or, for a cluster member, replace it with an empty "
    "one (docs/operations.md \"Corrupt data\")"
)


class DataDirError(Exception):
    """The data directory cannot be used as it is; the text says why and
    what to do."""


def hold(path: str) -> int:
    """Takes the data directory for this process: an exclusive `flock` on the
    directory itself, held until the returned descriptor is closed (or the
    process ends, however it ends). A second `tempo serve` on the same
    directory would share LMDB's data safely but keep its own timing wheel,
    leases and log position, handing out the same runs twice; it is refused
    instead. LMDB's own locks are `fcntl` locks on `lock.mdb`, which `flock`
    does not touch."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirError(
            f"{path} is in use by another tempo serve: one data directory serves one node; "
            "stop the other, or give this one its own --data-dir"
        ) from None
    return fd


class Identity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Whose data directory this is. `cluster_id` is, for a founding member,
    a fingerprint of the founding `--peers` (the same on every founder); it
    is empty for a single node and for a member that joined (`--join`),
    which takes the cluster's state from its leader."""

    format: int
    mode: Literal["single", "cluster"]
    cluster_id: str
    node_id: str

    def describe(self) -> str:
        if self.mode == "single":
            return "a single node's data directory"
        if not self.node_id:
            return "a cluster member's data directory"
        cluster = f" of cluster {self.cluster_id}" if self.cluster_id else ""
        return f"the data directory of cluster member {self.node_id}{cluster}"

    def node_flag(self) -> str:
        return f"--node {self.node_id}" if self.node_id else "its --node"


_identity_enc = msgspec.msgpack.Encoder()
_identity_dec = msgspec.msgpack.Decoder(Identity)


def single_identity() -> Identity:
    return Identity(FORMAT_VERSION, "single", "", "n1")


def earlier_identity(member: bool) -> Identity:
    """What an earlier version's directory is, as far as its tables tell:
    a member's node ID is not among them."""
    return Identity(FORMAT_VERSION, "cluster", "", "") if member else single_identity()


def member_identity(node_id: str, founders: list[tuple[str, str]] | None) -> Identity:
    """A member's identity: `founders` are the (ID, URL) of the founding
    `--peers`, None for a node that joins."""
    cluster_id = ""
    if founders is not None:
        text = ",".join(f"{node}={url}" for node, url in sorted(founders))
        cluster_id = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Identity(FORMAT_VERSION, "cluster", cluster_id, node_id)


def encode_identity(identity: Identity) -> bytes:
    return _identity_enc.encode(identity)


def decode_identity(path: str, raw: bytes) -> Identity:
    try:
        identity = _identity_dec.decode(raw)
    except msgspec.DecodeError as exc:
        raise DataDirError(
            f"{path}: the identity record does not decode ({exc}): the data is damaged; {_RESTORE}"
        ) from None
    if identity.format > FORMAT_VERSION:
        raise DataDirError(
            f"{path} was written by a newer tempo (data directory format {identity.format}; this one reads "
            f"format {FORMAT_VERSION} and earlier): run the newer version on it"
        )
    return identity


# -- the files, before mapping ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Meta:
    """The fields of one meta page that the checks use."""

    page_bytes: int
    last_page: int
    txn_id: int
    main_entries: int
    # The highest root page of the free-page and main DBs (1 when both are empty).
    root_page_max: int


def parse_meta(data_path: str, raw: bytes, page: int) -> Meta:
    """The meta page `page` (0 or 1) from its first bytes; DataDirError when
    it is not a valid one."""
    where = f"{data_path}: meta page {page}"
    if len(raw) < _META_BYTES:
        raise DataDirError(f"{where} is cut short (the file is truncated): {_RESTORE}")
    pgno, _, flags, _ = _PAGE_HEADER.unpack_from(raw, 0)
    magic, version, _, _ = _META.unpack_from(raw, _PAGE_HEADER.size)
    free = _DB.unpack_from(raw, _PAGE_HEADER.size + _META.size)
    main = _DB.unpack_from(raw, _PAGE_HEADER.size + _META.size + _DB.size)
    last_page, txn_id = _META_TAIL.unpack_from(raw, _PAGE_HEADER.size + _META.size + 2 * _DB.size)
    page_bytes = free[0]
    if magic != _MAGIC or not flags & _P_META or pgno != page:
        raise DataDirError(f"{where} is not an LMDB meta page (garbled, or not an LMDB file): {_RESTORE}")
    if version != _DATA_VERSION:
        raise DataDirError(f"{where} has LMDB data format {version}, not {_DATA_VERSION} (garbled?): {_RESTORE}")
    if page_bytes & (page_bytes - 1) or not _PAGE_BYTES_MIN <= page_bytes <= _PAGE_BYTES_MAX:
        raise DataDirError(f"{where} gives a page size of {page_bytes} bytes (garbled): {_RESTORE}")
    if last_page < 1:
        raise DataDirError(f"{where} gives {last_page} as the last page (garbled): {_RESTORE}")
    for name, root in (("free-page", free[7]), ("main", main[7])):
        if root != _NO_PAGE and not 2 <= root <= last_page:
            raise DataDirError(
                f"{where} puts the {name} root at page {root}, outside pages 2..{last_page} (garbled): {_RESTORE}"
            )
    roots = [root for root in (free[7], main[7]) if root != _NO_PAGE]
    return Meta(page_bytes, last_page, txn_id, main[6], max(roots, default=1))


def check_files(path: str) -> Meta | None:
    """Checks the directory and `data.mdb` without mapping it. Returns the
    newer meta page, or None when there is no data file yet (a fresh start:
    a missing or empty directory)."""
    try:
        return _check_files(path)
    except OSError as exc:  # a permission, an I/O error
        raise DataDirError(f"--data-dir {path}: {exc}") from None


def _check_files(path: str) -> Meta | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        # Created at start, with any parents missing: where it would be.
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        _check_writable(parent, path)
        return None
    except OSError as exc:
        raise DataDirError(f"--data-dir {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DataDirError(f"--data-dir {path} is not a directory: give a directory (it is created if missing)")
    entries = set(os.listdir(path))
    foreign = sorted(entries - _OWN_ENTRIES - _VOLUME_ENTRIES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise DataDirError(
            f"{path} holds files that are not tempo's ({shown}): give --data-dir a directory of tempo's own "
            f"(tempo keeps {DATA_FILE}, {LOCK_FILE} and {SNAPSHOT_DIR}/ there)"
        )
    _check_writable(path, path)
    data_path = os.path.join(path, DATA_FILE)
    if SNAPSHOT_DIR in entries and not os.path.isdir(os.path.join(path, SNAPSHOT_DIR)):
        raise DataDirError(f"{os.path.join(path, SNAPSHOT_DIR)} is not a directory: {_RESTORE}")
    if DATA_FILE not in entries:
        if SNAPSHOT_DIR in entries:
            raise DataDirError(
                f"{data_path} is missing, and {SNAPSHOT_DIR}/ beside it shows a cluster member kept its data here: "
                f"started empty it would forget its votes and log; {_RESTORE}"
            )
        return None
    return _check_data_file(data_path)


def _check_data_file(data_path: str) -> Meta:
    """`data.mdb`: a regular file, not empty, two valid meta pages, and as
    long as both say."""
    st = os.stat(data_path)
    if not stat.S_ISREG(st.st_mode):
        raise DataDirError(f"{data_path} is not a regular file: {_RESTORE}")
    if st.st_size == 0:
        raise DataDirError(
            f"{data_path} is empty (0 bytes), so whatever it held is gone; tempo does not start it as a new store: "
            f"{_RESTORE}. If this directory never held data, remove it and start again"
        )
    with open(data_path, "rb") as f:
        first = f.read(_META_BYTES)
        meta0 = parse_meta(data_path, first, 0)
        f.seek(meta0.page_bytes)
        meta1 = parse_meta(data_path, f.read(_META_BYTES), 1)
    if meta1.page_bytes != meta0.page_bytes:
        raise DataDirError(f"{data_path}: the meta pages disagree on the page size (garbled): {_RESTORE}")
    for page, meta in enumerate((meta0, meta1)):
        needed = (meta.root_page_max + 1) * meta.page_bytes
        if st.st_size < needed:
            raise DataDirError(
                f"{data_path} is truncated: it has {st.st_size} bytes, and its meta page {page} puts a root at "
                f"page {meta.root_page_max} of {meta.page_bytes} bytes ({needed} bytes): {_RESTORE}"
            )
        claimed = (meta.last_page + 1) * meta.page_bytes
        if claimed > 2 * st.st_size + _UNWRITTEN_BYTES_MAX:
            raise DataDirError(
                f"{data_path} is truncated or garbled: it has {st.st_size} bytes, and its meta page {page} says "
                f"pages up to {meta.last_page} of {meta.page_bytes} bytes were handed out ({claimed} bytes): {_RESTORE}"
            )
    return meta0 if meta0.txn_id > meta1.txn_id else meta1


def _check_writable(path: str, shown: str) -> None:
    try:
        read_only = os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError as exc:
        raise DataDirError(f"--data-dir {shown}: {exc.strerror}") from None
    if read_only:
        raise DataDirError(f"--data-dir {shown} is on a read-only file system: tempo writes every change there")
    if not os.access(path, os.W_OK | os.X_OK):
        raise DataDirError(f"--data-dir {shown}: this user may not write in {path}")


# -- the tables, once open ----------------------------------------------------------


def check_tables(
    path: str, names: set[bytes], meta: Meta | None, tables: tuple[str, ...], added: tuple[str, ...] = ()
) -> bool:
    """Given the names in the environment's main database, before tempo
    creates anything: True when they are tempo's tables (an existing store),
    False for an environment that never held any (a fresh start).
    DataDirError for anything else. `added`: tables of `tables` that a later
    version added, which a store made before lacks (they are created)."""
    own = {name.encode() for name in tables} | {RAFT_META_DB, b"raft_log", IDENTITY_DB}
    foreign = sorted(name.decode(errors="replace") for name in names if name not in own and not _HIST.fullmatch(name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise DataDirError(
            f"{path} holds an LMDB environment that is not tempo's (it has {shown}): tempo leaves it alone; "
            "give --data-dir a directory of tempo's own"
        )
    if not names:
        if meta is None or meta.txn_id == 0:
            return False  # created, never committed: nothing in it to lose
        raise DataDirError(
            f"{path} holds an LMDB environment with no tables, so it is not tempo's: give --data-dir a "
            "directory of tempo's own"
        )
    missing = sorted(name for name in tables if name.encode() not in names and name not in added)
    if missing:
        raise DataDirError(f"{path} lacks tempo's tables {', '.join(missing)}: the data is damaged; {_RESTORE}")
    return True


def check_identity(path: str, stored: Identity, wanted: Identity) -> None:
    """The directory's identity against this start's flags."""
    if stored.mode == "cluster" and wanted.mode == "single":
        raise DataDirError(
            f"{path} is {stored.describe()}, and this start has no --node and --peers, as a single node's. "
            "Served alone it would take writes the cluster never sees, and lose them when the member leads again. "
            f"Start it as before, with {stored.node_flag()} --peers ...; for a single node, give --data-dir "
            "a new directory"
        )
    if stored.mode == "single" and wanted.mode == "cluster":
        raise DataDirError(
            f"{path} is {stored.describe()}, and this start is cluster member {wanted.node_id} "
            f"(--node {wanted.node_id}). A member needs a data directory of its own: give --data-dir a new "
            "directory (a member added to a running cluster starts with --join), or start without --node "
            "and --peers to serve this one as a single node"
        )
    if stored.node_id != wanted.node_id and stored.node_id:
        raise DataDirError(
            f"{path} is {stored.describe()}, and this start is --node {wanted.node_id}. A member's data (its "
            f"votes and its copy of the log) is its own: start it with {stored.node_flag()}, or give "
            f"{wanted.node_id} a new data directory (and --join, to add it to a running cluster)"
        )
