package keyspace

// OutboxRelaysKey is the HASH relay name -> the status a running outbox
// relay last recorded (JSON, see package outbox). It is a key of the
// namespace, outside every queue's slot.
func OutboxRelaysKey(ns string) string { return ns + ":outbox:relays" }
