"""Where a store's bytes go, table by table: LMDB's pages of each named
table per job, its rows' key and value bytes, and how full its leaf pages
are (docs/performance.md "Pages filled in key order")."""

import lmdb

from _server import table

NODE_BYTES = 8 + 2  # a row's node header in its page, and its slot
PAGE_HEAD = 16


def pages_table(env: lmdb.Environment, jobs: int, most: int = 10) -> str:
    """The `most` largest tables of `env`, and the pages of the whole file
    (`last_pgno`, free pages included), per job."""
    psize = env.stat()["psize"]
    rows = []
    with env.begin() as txn:
        names = [key for key, _ in txn.cursor()]
        for name in names:
            try:
                db = env.open_db(name, txn=txn, create=False)
            except lmdb.Error:
                continue  # a key of the main table that names no table
            stat = txn.stat(db)
            pages = stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
            if not pages:
                continue
            key_bytes = value_bytes = 0
            for key, value in txn.cursor(db=db):
                key_bytes += len(key)
                value_bytes += len(value)
            entries = max(1, stat["entries"])
            fill = (key_bytes + value_bytes + NODE_BYTES * stat["entries"]) / max(1, stat["leaf_pages"] * (psize - PAGE_HEAD))
            rows.append((pages * psize / jobs, name.decode(), stat["entries"], key_bytes / entries, value_bytes / entries, fill))
    rows.sort(reverse=True)
    in_tables = sum(r[0] for r in rows)
    in_file = (env.info()["last_pgno"] + 1) * psize / jobs
    body = [(name, f"{per_job:.1f}", entries, f"{k:.1f}", f"{v:.1f}", f"{fill:.2f}") for per_job, name, entries, k, v, fill in rows[:most]]
    body.append(("(all tables)", f"{in_tables:.1f}", "", "", "", ""))
    body.append(("(file's pages)", f"{in_file:.1f}", "", "", "", ""))
    return table(body, ("table", "B/job", "rows", "key B", "value B", "leaf fill"))
