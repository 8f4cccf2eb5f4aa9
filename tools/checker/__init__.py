"""The linearizability checker and the Kafka log checker behind `kraftpy check`."""
