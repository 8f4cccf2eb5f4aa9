"""The Kafka protocol's I/O: the listener that reads request frames and writes answers."""
