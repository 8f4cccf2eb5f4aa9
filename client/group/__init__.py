"""The consumer group member's sans-I/O core: membership, heartbeats, commits, assignors."""
