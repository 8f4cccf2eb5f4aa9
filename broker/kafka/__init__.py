"""Kafka's binary protocol on a broker: each API's request read into the broker's terms, its answer written back."""
