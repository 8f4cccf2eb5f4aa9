"""kraftpy's client on Kafka's wire protocol: version choice and each API's request and answer (cores)."""
