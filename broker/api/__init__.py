"""Kafka's API handlers on the broker, one module per API; they drive the cores and await their waits."""
