package broker

// keys of one queue, all under its hash tag.
type keys struct {
	scheduled, processing, jobs, attempts, leases, seq, dead, deadIndex string
	hist                                                                string // prefix of the per-minute history keys (history.go)
	wake                                                                string // Pub/Sub channel, not a key
}

func newKeys(ns, queue string) keys {
	p := ns + ":{" + queue + "}:"
	return keys{
		scheduled:  p + "scheduled",
		processing: p + "processing",
		jobs:       p + "jobs",
		attempts:   p + "attempts",
		leases:     p + "leases",
		seq:        p + "seq",
		dead:       p + "dead",
		deadIndex:  p + "dead:index",
		hist:       p + "hist:",
		wake:       ns + ":{" + logicalQueue(queue) + "}:wake", // shards wake their queue's workers
	}
}

func (b *Broker) keys(queue string) keys { return newKeys(b.ns, queue) }

func queuesKey(ns string) string { return ns + ":queues" }
