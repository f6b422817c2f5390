package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// Retained succeeded jobs (job.Retain) and progress reports
// (job.ReportProgress). See docs/batches.md#results-and-retention.

// doneRecord is the stored form of a retained succeeded job, after the
// "<finished ms>\n" the settle script puts in front.
type doneRecord struct {
	Body      string        `json:"b"`
	Attempts  int           `json:"a"`
	StartedMS int64         `json:"s,omitempty"`
	Result    []byte        `json:"r,omitempty"`
	Progress  *wireProgress `json:"g,omitempty"`
}

type wireProgress struct {
	Fraction float64 `json:"f"`
	Message  string  `json:"m,omitempty"`
	AtMS     int64   `json:"t"`
}

func marshalDone(d *protocol.Done) ([]byte, error) {
	rec := doneRecord{Body: string(d.Body), Attempts: d.Attempts, Result: d.Result}
	if !d.StartedAt.IsZero() {
		rec.StartedMS = d.StartedAt.UnixMilli()
	}
	if p := d.Progress; p != nil {
		rec.Progress = &wireProgress{Fraction: p.Fraction, Message: p.Message, AtMS: p.At.UnixMilli()}
	}
	return json.Marshal(&rec)
}

// succeededInfo decodes what job.lua returns for a retained job: the kept
// record and how long it is still kept (ms).
func succeededInfo(queue, id string, now time.Time, stored string, ttl int64) *job.JobInfo {
	fin, data, _ := strings.Cut(stored, "\n")
	var rec doneRecord
	finished, err := strconv.ParseInt(fin, 10, 64)
	if err == nil {
		err = json.Unmarshal([]byte(data), &rec)
	}
	if err != nil {
		return &job.JobInfo{ID: id, Queue: queue, State: job.StateSucceeded, Now: now, Body: []byte(stored),
			Err: fmt.Errorf("job %q in queue %q: %w: retained record: %v", id, queue, job.ErrCorrupt, err)}
	}
	j := newJobInfo(queue, id, job.StateSucceeded, now, time.Time{}, int64(rec.Attempts), []byte(rec.Body))
	j.Result = rec.Result
	j.FinishedAt = fromMS(finished)
	if rec.StartedMS > 0 {
		j.StartedAt = fromMS(rec.StartedMS)
	}
	if ttl > 0 {
		j.ExpiresAt = now.Add(time.Duration(ttl) * time.Millisecond)
	}
	if p := rec.Progress; p != nil {
		j.Progress = &job.Progress{Fraction: p.Fraction, Message: p.Message, At: fromMS(p.AtMS)}
	}
	return j
}

// parseProgress decodes a progress report as progress.lua stores it,
// "<ms>\n<fraction>\n<message>"; nil when there is none or it is garbage.
func parseProgress(s string) *job.Progress {
	at, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return nil
	}
	frac, msg, _ := strings.Cut(rest, "\n")
	ms, err1 := strconv.ParseInt(at, 10, 64)
	f, err2 := strconv.ParseFloat(frac, 64)
	if err1 != nil || err2 != nil {
		return nil
	}
	return &job.Progress{Fraction: f, Message: msg, At: fromMS(ms)}
}

// Progress stores a running job's progress, fenced by its lease.
func (w workerSide) Progress(ctx context.Context, l protocol.Lease, p job.Progress) (time.Time, error) {
	k := l.Shard.Keys()
	v := strconv.FormatFloat(p.Fraction, 'g', -1, 64) + "\n" + p.Message
	res, err := w.b.run(ctx, progressScript, []string{k.Leases, k.Progress}, l.ID, tokenArg(l.Token), v)
	if err != nil {
		return time.Time{}, queueErr(l.Queue(), err)
	}
	ms, ok := res.(int64)
	switch {
	case !ok:
		return time.Time{}, fmt.Errorf("broker: progress: unexpected reply %v", res)
	case ms < 0:
		return time.Time{}, lostErr(l)
	}
	return fromMS(ms), nil
}
