"""The producer's sans-I/O core: accumulator, batches, idempotence, partitioner, sender decisions."""
