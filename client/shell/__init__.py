"""The asyncio clients (Producer, Consumer, AdminClient, the group member) and the sync wrappers."""
