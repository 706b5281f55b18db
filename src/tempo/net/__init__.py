"""Everything that touches sockets: the HTTP API, the client, peer links."""
