"""What every layer shares on the wire: Kafka error codes, CBOR envelopes and the record-batch codec.

It lives apart from broker/ so that raft/, metadata/, broker/ and client/ can all
depend on it without depending on each other.
"""
