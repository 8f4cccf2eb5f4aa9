"""Clients: Producer, Consumer and AdminClient (asyncio first, with sync wrappers)."""
