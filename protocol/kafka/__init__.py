"""Kafka's binary wire protocol: the message codec and the table of APIs we serve (docs/kafka-codec.md)."""
