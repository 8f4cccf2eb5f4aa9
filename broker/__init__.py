"""The broker: partition storage, replication, produce/fetch, groups and the HTTP API."""
