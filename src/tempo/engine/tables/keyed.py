"""The small keyed tables: request keys (idempotent creates), claim keys
(idempotent claims), members and the notifier's cursor. `Tables`
(tables/writes.py) has these operations with the rest."""

from tempo import limits
from tempo.engine import keys
from tempo.engine.records import ClaimKeyEntry, RequestKeyEntry
from tempo.engine.tables.layout import NOTIFY_CURSOR, U64, claimkey_dec, enc, must, reqkey_dec
from tempo.engine.tables.reads import Reads


class Keyed(Reads):
    __slots__ = ()

    def request_key_entry(self, req_key: bytes) -> RequestKeyEntry | None:
        """What the request key (`keys.request_key`) names, if it is recorded."""
        raw = self.txn.get(req_key, db=self.reqkeys)
        return None if raw is None else reqkey_dec.decode(raw)

    def put_request_key(self, req_key: bytes, entry: RequestKeyEntry) -> None:
        self.txn.put(req_key, enc.encode(entry), db=self.reqkeys)

    def claim_key_entry(self, record_key: bytes) -> ClaimKeyEntry | None:
        """The record at `record_key` (`keys.claim_key`), expired or not."""
        raw = self.txn.get(record_key, db=self.claim_keys)
        return None if raw is None else claimkey_dec.decode(bytes(raw))

    def put_claim_key(self, record_key: bytes, owner: str, key: str, entry: ClaimKeyEntry) -> None:
        """A claim key's record and its row in the expiry index."""
        self.txn.put(record_key, enc.encode(entry), db=self.claim_keys)
        self.txn.put(keys.claim_key_expiry(entry.expires_ms, owner, key), b"", db=self.claim_keys)

    def drop_claim_keys(self, at_ms: int) -> None:
        """Drops up to `limits.claim_keys_dropped_per_claim` records that
        expired by `at_ms`, soonest first: from the command's stamp alone,
        so every replica drops the same ones."""
        cur = self.txn.cursor(db=self.claim_keys)
        found = cur.set_range(keys.CLAIM_KEY_EXPIRY_HEAD)
        expired: list[tuple[bytes, int]] = []
        while found and len(expired) < limits.claim_keys_dropped_per_claim:
            index_key = bytes(cur.key())
            if not index_key.startswith(keys.CLAIM_KEY_EXPIRY_HEAD):
                break
            expires_ms, record_key = keys.parse_claim_key_expiry(index_key)
            if expires_ms > at_ms:
                break
            expired.append((record_key, expires_ms))
            found = cur.next()
        for record_key, expires_ms in expired:
            self.drop_claim_key(record_key, expires_ms)

    def drop_claim_key(self, record_key: bytes, expires_ms: int) -> None:
        """A record and its expiry index entry."""
        index_key = keys.claim_key_expiry_of(expires_ms, record_key)
        must(self.txn.delete(index_key, db=self.claim_keys), "a claim key's record has its expiry entry")
        raw = self.txn.get(record_key, db=self.claim_keys)
        # The record under that key may be a later one (the key used again
        # after it expired): only the one that expires then goes.
        if raw is not None and claimkey_dec.decode(bytes(raw)).expires_ms == expires_ms:
            self.txn.delete(record_key, db=self.claim_keys)

    def put_member(self, node_id: str, url: str) -> None:
        self.txn.put(node_id.encode(), url.encode(), db=self.members)

    def raise_notify_cursor(self, seq: int) -> None:
        """The notifier's cursor moves to `seq`, never back."""
        raw = self.txn.get(NOTIFY_CURSOR, db=self.meta)
        if raw is None or U64.unpack(raw)[0] < seq:
            self.txn.put(NOTIFY_CURSOR, U64.pack(seq), db=self.meta)
