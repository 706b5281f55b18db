"""The TLS context of tempo's HTTP clients: the CLI, `Client`, the worker
library, the load generator and a node's links to its peers.

A client verifies a server's certificate, and that it names the host of the
URL, against `ca_file` when one is given (a private CA, such as the one that
signed a cluster's certificates: then only that CA is trusted), else against
the system trust store (OpenSSL's default paths, which `SSL_CERT_FILE` and
`SSL_CERT_DIR` override). The HTTP executor, which calls users' targets,
keeps its own default.
"""

import ssl

# httpx, httpcore and trio each wrap an ssl error once; a longer chain of
# causes is not one of theirs.
cause_links_max = 8


class TlsError(ValueError):
    """`ca_file` cannot be used; the message says why."""


def client_context(ca_file: str | None = None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise TlsError(f"no PEM certificate in {ca_file} ({exc.reason or exc})") from None
    except OSError as exc:
        raise TlsError(f"cannot read {ca_file}: {exc.strerror or exc}") from None


def ssl_error_of(exc: BaseException) -> ssl.SSLError | None:
    """The ssl error behind a connection error, if one is: httpx, httpcore
    and trio each wrap it once, as the cause of their own exception."""
    seen: BaseException | None = exc
    for _ in range(cause_links_max):
        if seen is None or isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def certificate_refused(exc: BaseException) -> bool:
    """True when a connection failed because the server's certificate was
    refused (not signed by a trusted CA, expired, or not for that host)."""
    return isinstance(ssl_error_of(exc), ssl.SSLCertVerificationError)
