"""The consumer's sans-I/O core: subscription, fetch decisions, positions and their validation."""
