"""The web console at /ui (docs/ui.md): server-rendered pages over the API.

It sits above net/ in the layers and acts only through the API's own
handlers, called in process (`calls.py`), so every page and action keeps the
API's auth, tenant isolation, validation and error text.
"""

from tempo.ui.console import Console

__all__ = ["Console"]
