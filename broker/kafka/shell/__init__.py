"""The broker's Kafka APIs: the dispatcher and the handlers that call the broker and the controller."""
