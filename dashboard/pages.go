package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/job"
)

// historySpan is the window of the charts: the current minute and the 59
// before it.
const historySpan = 59 * time.Minute

// pageSize is the rows per page of job lists.
const pageSize = 50

// queueRow is one queue of the overview.
type queueRow struct {
	job.QueueStats
	Handled int64 // attempts ended over the last hour
	Spark   chart
	Flow    flowData // what its caps, rate limits and paused types hold back
}

type overviewData struct {
	// Search is the text the queue names were filtered by ("" for none);
	// Matched how many names match it, of All; Page (from 1) of Pages.
	Search       string
	Matched, All int64
	Page, Pages  int
	Paged        bool // the cards and charts cover only this page's queues
	PrevPage     int  // 0 when none
	NextPage     int  // 0 when none
	Queues       []queueRow
	Total        job.QueueStats // summed counts; NextReady and OldestDue the earliest
	Charts       charts
	Relays       []relaystatus.Status // the outbox relays that recorded their status
	Server       serverMemory         // INFO memory of the server(s)
}

// knownQueues returns the names in ns:queues that delayq could have
// written, sorted, and the stats of each, in the same order.
func (d *Dashboard) knownQueues(r *http.Request) ([]string, []job.QueueStats, error) {
	stats, err := d.b.Stats(r.Context())
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(stats))
	for i := range stats {
		names[i] = stats[i].Queue
	}
	return names, stats, nil
}

// queuesPerPage is how many queues one page of the overview shows: its
// cost (stats, history and bytes) is that of its page, however many queues
// the namespace has.
const queuesPerPage = 100

// maxSearch bounds the overview's search text.
const maxSearch = 200

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qv := r.URL.Query()
	search := strings.TrimSpace(qv.Get("q"))
	if len(search) > maxSearch {
		d.fail(w, r, http.StatusBadRequest, "The search text is too long.")
		return
	}
	page := 1
	if p := qv.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			d.fail(w, r, http.StatusBadRequest, "Bad page number "+strconv.Quote(p)+".")
			return
		}
		page = n
	}
	all, err := protocol.Admin(d.b).Queues(ctx)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	names := slices.DeleteFunc(all, func(q string) bool { return naming.Queue(q) != nil })
	count := len(names)
	if search != "" {
		low := strings.ToLower(search)
		names = slices.DeleteFunc(names, func(q string) bool { return !strings.Contains(strings.ToLower(q), low) })
	}
	slices.Sort(names)
	data := &overviewData{Search: search, Matched: int64(len(names)), All: int64(count), Page: page}
	data.Pages = max((len(names)+queuesPerPage-1)/queuesPerPage, 1)
	data.Paged = search != "" || data.Pages > 1
	if page > 1 {
		data.PrevPage = min(page-1, data.Pages)
	}
	if page < data.Pages {
		data.NextPage = page + 1
	}
	lo := min((page-1)*queuesPerPage, len(names))
	names = names[lo:min(lo+queuesPerPage, len(names))]
	var stats []job.QueueStats
	if len(names) > 0 { // Stats of no queue named reads every one
		var err error
		if stats, err = d.b.Stats(ctx, names...); err != nil {
			d.redisError(w, r, err)
			return
		}
	}
	relays, err := relaystatus.Read(ctx, d.b.Client(), d.b.Namespace())
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	data.Queues, data.Relays = make([]queueRow, len(stats)), relays
	data.Server = d.readServerMemory(ctx)
	v := &view{Title: "Overview", Nav: "overview", Live: true, Flash: d.flash(r), Data: data}
	if len(stats) == 0 {
		d.render(w, r, http.StatusOK, "overview", v)
		return
	}
	now := stats[0].Now
	v.Now = now
	hist, err := protocol.Admin(d.b).History(ctx, names, now.Add(-historySpan), now)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	t := &data.Total
	t.Now = now
	for i, s := range stats {
		row := queueRow{QueueStats: s, Spark: sparkline(hist[i], s.Queue), Flow: flowOf(s)}
		for _, m := range hist[i] {
			row.Handled += m.Handled()
		}
		data.Queues[i] = row
		t.Scheduled += s.Scheduled
		t.Due += s.Due
		t.Processing += s.Processing
		t.Dead += s.Dead
		t.NextReady = earliest(t.NextReady, s.NextReady)
		t.OldestDue = earliest(t.OldestDue, s.OldestDue)
	}
	caption := "all queues, last hour"
	if data.Paged {
		caption = "the queues of this page, last hour"
	}
	data.Charts = historyCharts(sumMinutes(hist), caption, 560, 170)
	d.render(w, r, http.StatusOK, "overview", v)
}

// earliest returns the earlier of two times, ignoring zero ones.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

type queueData struct {
	Stats       job.QueueStats
	Charts      charts
	Search      string // the id searched for and not found
	SearchErr   string
	Scheduled   broker.JobPage
	Processing  broker.JobPage
	NextSched   string // cursor of the next page, or ""
	NextProc    string
	Paged       bool // not on the first page of either list
	SchedCursor string
	ProcCursor  string
	// Served: live processes serving the queue; HeldUnserved: jobs are
	// processing and none does.
	Served       int
	HeldUnserved bool
	// Flow: the queue's pause, caps and rate limits, and what they hold
	// back now.
	Flow flowData
	// Memory: what the queue's keys take in Redis, and the server in all.
	Memory queueMemory
	Server serverMemory
	// Span: the charts' window ("1h" or "24h", ?span=), among Spans.
	Span  string
	Spans []chartSpan
	// Keys: the keys holding the most jobs back (HeldKeys), and paused
	// keys.
	Keys broker.HeldKeys
	// KeysTurn: how many of the keys listed wait for their turn (while
	// fair turns between keys are on, Stats.FairKeys).
	KeysTurn int
}

// heldKeysShown is how many keys the queue page lists.
const heldKeysShown = 20

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.PathValue("queue")
	if err := naming.Queue(q); err != nil {
		d.fail(w, r, http.StatusBadRequest, "Bad queue name: "+err.Error())
		return
	}
	data := &queueData{}
	v := &view{Title: "Queue " + q, Nav: q, Live: true, Flash: d.flash(r), Data: data}
	status := http.StatusOK
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		_, err := d.b.Job(ctx, q, id)
		switch {
		case err == nil:
			d.redirect(w, r, "/queues/"+url.PathEscape(q)+"/job", url.Values{"id": {id}})
			return
		case errors.Is(err, broker.ErrNotFound):
			data.Search, status = id, http.StatusNotFound
		case errors.Is(err, job.ErrInvalid):
			data.Search, data.SearchErr, status = id, err.Error(), http.StatusBadRequest
		default:
			d.redisError(w, r, err)
			return
		}
		v.Live = false // a search result stays as it is
	}
	qv := r.URL.Query()
	span, ok := spanOf(qv.Get("span"))
	if !ok {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Bad chart span %q: it is 1h or 24h", qv.Get("span")))
		return
	}
	sc, pc := qv.Get("s"), qv.Get("p")
	data.SchedCursor, data.ProcCursor = sc, pc
	data.Paged = sc != "" || pc != ""
	sts, err := d.b.Stats(ctx, q)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	data.Stats = sts[0]
	v.Now = data.Stats.Now
	data.Flow = flowOf(data.Stats)
	if data.Keys, err = d.b.HeldKeys(ctx, q, heldKeysShown); err != nil {
		d.redisError(w, r, err)
		return
	}
	for _, k := range data.Keys.Keys {
		if k.WaitsForTurn {
			data.KeysTurn++
		}
	}
	data.Memory = d.readQueueMemory(ctx, data.Stats)
	data.Server = d.readServerMemory(ctx)
	procs, err := fleet.List(ctx, d.b.Client(), d.b.Namespace())
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	data.Served = len(procs.Serving(q))
	data.HeldUnserved = data.Stats.Processing > 0 && data.Served == 0
	hist, err := protocol.Admin(d.b).History(ctx, []string{q}, v.Now.Add(-span.Back), v.Now)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	data.Charts = span.charts(hist[0], 560, 150)
	data.Span, data.Spans = span.Name, chartSpans
	if data.Scheduled, err = d.b.Page(ctx, q, job.StateScheduled, sc, pageSize); err == nil {
		data.Processing, err = d.b.Page(ctx, q, job.StateProcessing, pc, pageSize)
	}
	switch {
	case errors.Is(err, broker.ErrBadCursor):
		d.fail(w, r, http.StatusBadRequest, errBadCursor.Error())
		return
	case err != nil:
		d.redisError(w, r, err)
		return
	}
	data.NextSched, data.NextProc = data.Scheduled.Next, data.Processing.Next
	d.render(w, r, status, "queue", v)
}

// errBadCursor is what a page says of a page cursor it did not make (a
// link edited or cut short): the page calls' broker.ErrBadCursor.
var errBadCursor = errors.New("malformed page cursor: start again from the first page")

// detail reads what a detail page shows: get of the page's queue and id.
// On an error it has answered with the error page, and ok is false.
func detail[T any](d *Dashboard, w http.ResponseWriter, r *http.Request, get func(ctx context.Context, queue, id string) (T, error)) (v T, q, id string, ok bool) {
	q, id = r.PathValue("queue"), r.URL.Query().Get("id")
	v, err := get(r.Context(), q, id)
	if err != nil {
		d.actionError(w, r, err)
		return v, q, id, false
	}
	return v, q, id, true
}

func (d *Dashboard) jobDetail(w http.ResponseWriter, r *http.Request) {
	j, q, id, ok := detail(d, w, r, d.b.Job)
	if !ok {
		return
	}
	if j.State == job.StateDead {
		http.Redirect(w, r, d.opts.Prefix+"/dead/"+url.PathEscape(q)+"/job?"+url.Values{"id": {id}}.Encode(), http.StatusFound)
		return
	}
	// A running job's page refreshes itself, so its progress moves.
	d.render(w, r, http.StatusOK, "job", &view{Title: "Job " + id, Nav: q, Live: j.State == job.StateProcessing, Now: j.Now, Flash: d.flash(r), Data: j})
}

type deadQueue struct {
	Name string
	Dead int64
}

type deadData struct {
	Queues  []deadQueue
	Total   int64  // dead jobs in every queue
	Queue   string // "" for every queue
	Filter  deadletter.Filter
	Cursor  string
	Page    deadletter.Page
	Matched bool  // a filter is set
	Scanned int64 // records the page read
	MaxScan int64 // the most records a filtered page reads
}

func (d *Dashboard) dead(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qv := r.URL.Query()
	names, stats, err := d.knownQueues(r)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	data := &deadData{
		Queue:  qv.Get("queue"),
		Filter: deadletter.Filter{Type: strings.TrimSpace(qv.Get("type")), ErrorContains: qv.Get("error")},
		Cursor: qv.Get("cursor"),
	}
	data.Matched = data.Filter != (deadletter.Filter{})
	for _, s := range stats {
		data.Queues = append(data.Queues, deadQueue{s.Queue, s.Dead})
		data.Total += s.Dead
	}
	v := &view{Title: "Dead letters", Nav: "dead", Flash: d.flash(r), Data: data}
	if len(stats) > 0 {
		v.Now = stats[0].Now
	}
	if len(names) == 0 {
		d.render(w, r, http.StatusOK, "dead", v)
		return
	}
	maxScan := d.opts.DeadMaxScan
	if maxScan == 0 {
		maxScan = protocol.DeadScanDefault
	}
	data.MaxScan = int64(maxScan)
	data.Page, err = d.dl.List(ctx, data.Queue, deadletter.ListOptions{Filter: data.Filter, Cursor: data.Cursor, Limit: pageSize, MaxScan: maxScan})
	data.Scanned = int64(data.Page.Scanned)
	switch {
	case errors.Is(err, broker.ErrBadCursor):
		d.fail(w, r, http.StatusBadRequest, errBadCursor.Error())
		return
	case errors.Is(err, job.ErrInvalid):
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		d.redisError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "dead", v)
}

func (d *Dashboard) deadDetail(w http.ResponseWriter, r *http.Request) {
	rec, _, id, ok := detail(d, w, r, d.dl.Get)
	if !ok {
		return
	}
	d.render(w, r, http.StatusOK, "deadjob", &view{Title: "Dead job " + id, Nav: "dead", Flash: d.flash(r), Data: rec})
}

// redisError reports a failure to read or write Redis.
func (d *Dashboard) redisError(w http.ResponseWriter, r *http.Request, err error) {
	d.log.Error().Err(err).Str("path", r.URL.Path).Msg("dashboard: redis call failed")
	d.fail(w, r, http.StatusInternalServerError, "Redis call failed: "+err.Error())
}

// actionError maps a broker error to a status and a page.
func (d *Dashboard) actionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, job.ErrInvalid):
		d.fail(w, r, http.StatusBadRequest, "Bad request: "+err.Error())
	case errors.Is(err, broker.ErrNotFound):
		d.fail(w, r, http.StatusNotFound, "Not found: "+err.Error())
	case errors.Is(err, broker.ErrInProgress):
		d.fail(w, r, http.StatusConflict, "The job is being handled by a worker now: "+err.Error())
	case errors.Is(err, broker.ErrDuplicate):
		d.fail(w, r, http.StatusConflict, "A job with this id is pending again, so the dead one was kept: "+err.Error())
	default:
		d.redisError(w, r, err)
	}
}
