"""The config file's `[storage]` table (docs/operations.md "Disk full")."""

import pytest

from tempo import limits
from tempo.config import ConfigError, Storage, parse


def test_no_storage_table_sizes_the_map_to_the_disk():
    assert parse("").storage == Storage(None)


def test_map_bytes_is_read():
    assert parse("[storage]\nmap_bytes = 1073741824\n").storage == Storage(1 << 30)
    assert parse(f"[storage]\nmap_bytes = {limits.lmdb_map_bytes_min}\n").storage.map_bytes == limits.lmdb_map_bytes_min


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("storage = 3", "storage: a table"),
        ("[storage]\nmap_size = 5", "storage: unknown keys ['map_size']"),
        ("[storage]\nmap_bytes = 1024", "storage.map_bytes"),
        (f"[storage]\nmap_bytes = {limits.lmdb_map_bytes_max + 1}", "storage.map_bytes"),
        ("[storage]\nmap_bytes = 1.5e9", "storage.map_bytes"),
        ("[storage]\nmap_bytes = true", "storage.map_bytes"),
        ('[storage]\nmap_bytes = "64GiB"', "storage.map_bytes"),
    ],
)
def test_bad_storage_settings_name_the_key(text: str, message: str):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(text)
