"""The admin client's sans-I/O core: request shapes and answers."""
