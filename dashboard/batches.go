package dashboard

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/job"
)

// batchRow is a batch as the batch pages show it.
type batchRow struct{ *broker.BatchStatus }

// State is open (members can still be added), sealed (some pending) or
// complete.
func (b batchRow) State() string {
	switch {
	case b.Complete:
		return "complete"
	case b.Sealed:
		return "sealed"
	}
	return "open"
}

// batchCallback is one callback of a batch: its job's queue and id, and
// whether it fired.
type batchCallback struct {
	Name  string // "success" or "complete"
	Queue string
	ID    string
	State string // fired, waiting, or skipped (a success callback of a batch that completed with a dead or gone member)
}

// Callbacks are the batch's callbacks, success first; none when it has
// none.
func (b batchRow) Callbacks() []batchCallback {
	var out []batchCallback
	add := func(name, ref string, fired bool) {
		if ref == "" {
			return
		}
		q, id, _ := strings.Cut(ref, "/")
		st := "waiting"
		switch {
		case fired:
			st = "fired"
		case name == "success" && b.Complete && (b.Dead > 0 || b.Gone > 0):
			st = "skipped"
		}
		out = append(out, batchCallback{Name: name, Queue: q, ID: id, State: st})
	}
	add("success", b.OnSuccess, b.SuccessFired)
	add("complete", b.OnComplete, b.CompleteFired)
	return out
}

type batchesData struct {
	Batches []batchRow
	Paged   bool   // a page after the first
	Next    string // the cursor of the next page; "" for none
}

// batches lists the batches, newest first, read-only.
func (d *Dashboard) batches(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cursor := r.URL.Query().Get("cursor")
	page, err := d.b.Batches(ctx, cursor, pageSize)
	switch {
	case errors.Is(err, broker.ErrBadCursor):
		d.fail(w, r, http.StatusBadRequest, errBadCursor.Error())
		return
	case err != nil:
		d.redisError(w, r, err)
		return
	}
	data := &batchesData{Batches: make([]batchRow, len(page.Batches)), Paged: cursor != "", Next: page.Next}
	for i, s := range page.Batches {
		data.Batches[i] = batchRow{s}
	}
	now, err := d.b.Client().Time(ctx).Result()
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "batches", &view{Title: "Batches", Nav: "batches", Live: true, Now: now, Data: data})
}

// readBatch reads the page's batch; on an error it has answered with the
// error page, and returns nil.
func (d *Dashboard) readBatch(w http.ResponseWriter, r *http.Request) *broker.BatchStatus {
	id := r.PathValue("id")
	s, err := d.b.Batch(r.Context(), id)
	switch {
	case errors.Is(err, job.ErrInvalid):
		d.fail(w, r, http.StatusBadRequest, "Bad batch id: "+err.Error())
	case errors.Is(err, broker.ErrBatchNotFound):
		d.fail(w, r, http.StatusNotFound, "Not found: batch "+strconv.Quote(id)+" (never created, or its record expired).")
	case err != nil:
		d.redisError(w, r, err)
	default:
		return s
	}
	return nil
}

// batch shows one batch, read-only.
func (d *Dashboard) batch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	s := d.readBatch(w, r)
	if s == nil {
		return
	}
	now, err := d.b.Client().Time(ctx).Result()
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "batch", &view{Title: "Batch " + id, Nav: "batches", Live: true, Now: now, Data: batchRow{s}})
}

// batchDeadScan is how many dead records, newest first and only those that
// died since the batch was created, one page of a batch's dead members
// reads at most; the page offers to continue with older ones.
const batchDeadScan = protocol.DeadPageMax

type batchDeadData struct {
	Batch   batchRow
	Members []*job.DeadRecord // the batch's members among the records read
	Scanned int64             // dead records read
	Cursor  string            // where this page started ("" at the newest)
	Next    string            // where the next page starts; "" when none
}

// batchDead lists the batch's members that ended dead: the dead-letter
// store (every queue) read newest first back to the batch's creation, at
// most batchDeadScan records a page, keeping the records of its members.
func (d *Dashboard) batchDead(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s := d.readBatch(w, r)
	if s == nil {
		return
	}
	data := &batchDeadData{Batch: batchRow{s}, Cursor: r.URL.Query().Get("cursor")}
	v := &view{Title: "Dead members of batch " + s.ID, Nav: "batches", Data: data}
	if s.Dead > 0 || data.Cursor != "" {
		// Its members died after it was created: older records are not
		// read. The filter is on time only, so every record read is listed
		// or skipped here, and the page's cursor is exact.
		page, err := d.dl.List(ctx, "", deadletter.ListOptions{
			Filter: deadletter.Filter{DiedAfter: s.CreatedAt.Truncate(time.Millisecond)},
			Cursor: data.Cursor, Limit: batchDeadScan, MaxScan: batchDeadScan,
		})
		switch {
		case errors.Is(err, broker.ErrBadCursor):
			d.fail(w, r, http.StatusBadRequest, errBadCursor.Error())
			return
		case err != nil:
			d.redisError(w, r, err)
			return
		}
		data.Scanned, data.Next = int64(page.Scanned), page.Next
		for _, rec := range page.Records {
			if rec.Envelope != nil && rec.Envelope.Batch == s.ID {
				data.Members = append(data.Members, rec)
			}
		}
		if data.Cursor == "" && len(data.Members) >= s.Dead {
			data.Next = "" // all of them found: older records hold none
		}
	}
	now, err := d.b.Client().Time(ctx).Result()
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	v.Now = now
	d.render(w, r, http.StatusOK, "batchdead", v)
}
