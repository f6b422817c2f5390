package deadletter_test

import "github.com/delayq/delayq/job"

// oneStats reads the stats of the one queue a Broker.Stats call named.
func oneStats(sts []job.QueueStats, err error) (job.QueueStats, error) {
	if err != nil {
		return job.QueueStats{}, err
	}
	return sts[0], nil
}
