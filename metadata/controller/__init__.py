"""The controller's decisions (Kafka's QuorumController and its control managers), sans-I/O."""
