"""The I/O edge of the protocol package: the internal RPC transport, credential files, the clock."""
