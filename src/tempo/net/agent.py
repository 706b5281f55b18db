"""How tempo names itself to the servers and targets it calls: `User-Agent:
tempo/<version>`, so a target's log tells tempo's deliveries apart from
other clients (and from whatever HTTP library tempo uses)."""

from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("tempo")
    except metadata.PackageNotFoundError:  # run from a source tree not installed
        return "0+unknown"


USER_AGENT = f"tempo/{_version()}"
