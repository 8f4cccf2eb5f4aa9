"""Consumer groups on the broker: the group coordinator (sans-I/O) and `__consumer_offsets` records."""
