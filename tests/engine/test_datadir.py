"""The data directory's checks (engine/datadir.py): the meta pages read
before LMDB maps the file, the names of the tables once it is open, and the
identity record against what a start says the directory is."""

import os
import struct
from pathlib import Path

import lmdb
import pytest

from tempo.engine import datadir
from tempo.engine.datadir import DataDirError, Identity
from tempo.engine.raftlog import RaftLog
from tempo.engine.store import Store

MAP_BYTES = 1 << 26
SINGLE = datadir.single_identity()
N1 = datadir.member_identity("n1", [("n1", "http://a:1"), ("n2", "http://b:1"), ("n3", "http://c:1")])
N2 = datadir.member_identity("n2", [("n1", "http://a:1"), ("n2", "http://b:1"), ("n3", "http://c:1")])


def open_store(path: Path, identity: Identity | None = None) -> Store:
    return Store(str(path), map_bytes=MAP_BYTES, identity=identity)


@pytest.fixture
def used(tmp_path: Path) -> Path:
    """A store with a few transactions in it, closed."""
    store = open_store(tmp_path / "d", SINGLE)
    for k in range(5):
        with store.env.begin(write=True) as txn:
            txn.put(b"k%d" % k, b"v" * 3000, db=store.db["meta"])
    store.close()
    return tmp_path / "d"


def patch(path: Path, offset: int, raw: bytes) -> None:
    with open(path / "data.mdb", "r+b") as f:
        f.seek(offset)
        f.write(raw)


def test_the_meta_reader_agrees_with_lmdb(used: Path):
    meta = datadir.check_files(str(used))
    env = lmdb.open(str(used), readonly=True, max_dbs=1)
    try:
        info, page_bytes = env.info(), env.stat()["psize"]
    finally:
        env.close()
    assert meta is not None
    assert (meta.page_bytes, meta.last_page, meta.txn_id) == (page_bytes, info["last_pgno"], info["last_txnid"])
    assert meta.main_entries > 0  # the named databases


@pytest.mark.parametrize(
    ("offset", "raw", "words"),
    [
        (0, struct.pack("=Q", 7), "not an LMDB meta page"),  # the page's own number
        (10, struct.pack("=H", 0x01), "not an LMDB meta page"),  # flags: a branch page
        (16, struct.pack("=I", 0xDEADBEEF), "not an LMDB meta page"),  # magic
        (20, struct.pack("=I", 2), "data format 2"),
        (40, struct.pack("=I", 3000), "page size of 3000"),
        (80, struct.pack("=Q", 1 << 40), "free-page root"),
        (128, struct.pack("=Q", 1), "main root"),
        (136, struct.pack("=Q", 0), "last page"),
        (136, struct.pack("=Q", 1 << 50), "truncated or garbled"),
    ],
)
@pytest.mark.parametrize("page", [0, 1])
def test_a_damaged_meta_page_is_named(used: Path, page: int, offset: int, raw: bytes, words: str):
    page_bytes = datadir.check_files(str(used)).page_bytes
    patch(used, page * page_bytes + offset, raw)
    with pytest.raises(DataDirError, match=f"meta page {page}") as caught:
        datadir.check_files(str(used))
    assert words in str(caught.value)


def test_pages_handed_out_but_never_written_are_no_damage(used: Path):
    """A transaction that takes pages at the end of the file and frees them
    before it commits leaves `mm_last_pg` past the file's end (seen on a
    full disk): the store opens, and its data is all there."""
    meta = datadir.check_files(str(used))
    assert meta is not None
    for page in (0, 1):
        patch(used, page * meta.page_bytes + 136, struct.pack("=Q", meta.last_page + 300))
    assert datadir.check_files(str(used)).last_page == meta.last_page + 300
    store = open_store(used, SINGLE)
    try:
        with store.env.begin() as txn:
            assert txn.get(b"k4", db=store.db["meta"]) == b"v" * 3000
    finally:
        store.close()


def test_a_file_that_cuts_off_a_root_is_truncated(used: Path):
    meta = datadir.check_files(str(used))
    assert meta is not None
    os.truncate(used / "data.mdb", meta.root_page_max * meta.page_bytes)
    with pytest.raises(DataDirError, match="truncated"):
        datadir.check_files(str(used))


@pytest.mark.parametrize("size_pages", [0.5, 1, 1.5])
def test_a_file_shorter_than_two_pages_is_refused(used: Path, size_pages: float):
    os.truncate(used / "data.mdb", int(4096 * size_pages))
    with pytest.raises(DataDirError, match=r"truncated|cut short"):
        datadir.check_files(str(used))


def test_a_missing_or_empty_directory_is_a_fresh_start(tmp_path: Path):
    assert datadir.check_files(str(tmp_path / "a" / "b")) is None
    (tmp_path / "e" / "lost+found").mkdir(parents=True)
    assert datadir.check_files(str(tmp_path / "e")) is None
    open_store(tmp_path / "e", SINGLE).close()


def test_a_members_snapshots_without_its_data_file_are_refused(tmp_path: Path):
    store = open_store(tmp_path / "d", N1)
    RaftLog(store, voters=(1, 2, 3))
    store.close()
    os.unlink(tmp_path / "d" / "data.mdb")
    with pytest.raises(DataDirError, match="forget its votes"):
        open_store(tmp_path / "d", N1)


def test_a_missing_snapshot_file_is_refused(tmp_path: Path):
    store = open_store(tmp_path / "d", N1)
    RaftLog(store, voters=(1, 2, 3))
    with store.env.begin(write=True) as txn:
        raft_meta = store.env.open_db(datadir.RAFT_META_DB, txn=txn)
        txn.put(datadir.SNAPSHOT_META_KEY, b"\x93\x07\x01\x91\x93\x01\x02\x03", db=raft_meta)
    store.close()
    store = open_store(tmp_path / "d", N1)
    try:
        with pytest.raises(DataDirError, match="snapshot at index 7"):
            RaftLog(store, voters=(1, 2, 3))
    finally:
        store.close()


def test_an_environment_created_and_never_committed_is_a_fresh_start(tmp_path: Path):
    lmdb.open(str(tmp_path / "d"), map_size=MAP_BYTES).close()  # a crash before tempo's first commit
    store = open_store(tmp_path / "d", SINGLE)
    assert store.identity == SINGLE
    store.close()


def test_an_environment_without_tables_is_not_tempos(tmp_path: Path):
    env = lmdb.open(str(tmp_path / "d"), map_size=MAP_BYTES)
    with env.begin(write=True) as txn:
        txn.put(b"x", b"1")
    with env.begin(write=True) as txn:
        txn.delete(b"x")
    env.close()
    with pytest.raises(DataDirError, match="no tables"):
        open_store(tmp_path / "d", SINGLE)


def test_a_plain_key_in_the_main_database_is_foreign(tmp_path: Path):
    env = lmdb.open(str(tmp_path / "d"), map_size=MAP_BYTES)
    with env.begin(write=True) as txn:
        txn.put(b"config", b"{}")
    env.close()
    with pytest.raises(DataDirError, match=r"not tempo's .*config"):
        open_store(tmp_path / "d", SINGLE)


def test_tempos_tables_missing_is_damage(used: Path):
    env = lmdb.open(str(used), map_size=MAP_BYTES, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"runs", txn=txn), delete=True)
    env.close()
    with pytest.raises(DataDirError, match="lacks tempo's tables runs"):
        open_store(used, SINGLE)


def test_the_identity_is_written_at_first_start_and_checked_after(tmp_path: Path):
    store = open_store(tmp_path / "d", N1)
    assert (store.identity, store.adopted) == (N1, False)
    store.close()
    open_store(tmp_path / "d", N1).close()
    # A later --peers (membership changed since the founding) is the same member.
    open_store(tmp_path / "d", datadir.member_identity("n1", [("n1", "http://a:1"), ("n4", "http://d:1")])).close()
    with pytest.raises(DataDirError, match=r"cluster member n1 .*--node n2.*--node n1"):
        open_store(tmp_path / "d", N2)
    with pytest.raises(DataDirError, match=r"cluster member n1.*no --node and --peers"):
        open_store(tmp_path / "d", SINGLE)
    # Tools and tests open it without an identity: nothing checked or written.
    open_store(tmp_path / "d").close()
    assert open_store(tmp_path / "d", N1).identity == N1


def test_founders_agree_on_the_cluster_id_and_a_joiner_has_none():
    peers = [("n3", "http://c:1"), ("n1", "http://a:1"), ("n2", "http://b:1")]
    assert datadir.member_identity("n3", peers).cluster_id == N1.cluster_id != ""
    assert datadir.member_identity("n4", None).cluster_id == ""


def test_an_identity_from_a_newer_version_or_garbled_is_refused(tmp_path: Path):
    open_store(tmp_path / "d", SINGLE).close()
    for raw, words in [
        (datadir.encode_identity(Identity(datadir.FORMAT_VERSION + 1, "single", "", "n1")), "newer tempo"),
        (b"\xc1garbage", "does not decode"),
    ]:
        env = lmdb.open(str(tmp_path / "d"), map_size=MAP_BYTES, max_dbs=4)
        with env.begin(write=True) as txn:
            txn.put(datadir.IDENTITY_KEY, raw, db=env.open_db(datadir.IDENTITY_DB, txn=txn))
        env.close()
        with pytest.raises(DataDirError, match=words):
            open_store(tmp_path / "d", SINGLE)


def earlier_member_dir(path: Path) -> None:
    """A member's directory as the version before identity records left it."""
    store = open_store(path)
    RaftLog(store, voters=(1, 2, 3))
    store.close()


def test_an_earlier_members_dir_is_adopted_by_a_member_and_refused_to_a_single_node(tmp_path: Path):
    earlier_member_dir(tmp_path / "d")
    with pytest.raises(DataDirError, match=r"a cluster member's data directory.*its --node --peers"):
        open_store(tmp_path / "d", SINGLE)
    store = open_store(tmp_path / "d", N1)
    assert (store.identity, store.adopted) == (N1, True)
    store.close()
    store = open_store(tmp_path / "d", N1)
    assert (store.identity, store.adopted) == (N1, False)
    store.close()
    with pytest.raises(DataDirError, match="n2"):
        open_store(tmp_path / "d", N2)


def test_an_earlier_single_nodes_dir_is_adopted_by_a_single_node_and_refused_to_a_member(tmp_path: Path):
    open_store(tmp_path / "d").close()
    with pytest.raises(DataDirError, match="a single node's data directory"):
        open_store(tmp_path / "d", N1)
    store = open_store(tmp_path / "d", SINGLE)
    assert (store.identity, store.adopted) == (SINGLE, True)
    store.close()
    with pytest.raises(DataDirError, match="a single node's data directory"):
        open_store(tmp_path / "d", N1)


def test_a_damaged_applied_index_is_refused(used: Path):
    store = open_store(used)
    with store.env.begin(write=True) as txn:
        txn.put(b"applied_index", b"\x01\x02", db=store.db["meta"])
    store.close()
    with pytest.raises(DataDirError, match="applied index is 2 bytes"):
        open_store(used, SINGLE)
