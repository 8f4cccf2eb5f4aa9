"""Kafka's v2 RecordBatch codec, byte for byte: header, records, compression."""
