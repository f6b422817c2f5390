package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/delayq/delayq/periodic"
)

type periodicData struct {
	Schedules []periodic.Status
	// Request is the run-now request id of the page's "Run now" forms:
	// made anew with each render, so that a form sent twice (a reload
	// after a lost answer) is one request and runs once.
	Request string
}

// periodic lists the periodic schedules; outside read-only mode each has
// pause or resume and run-now buttons.
func (d *Dashboard) periodic(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, err := d.b.Client().Time(ctx).Result()
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	list, err := periodic.List(ctx, d.b, now)
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "periodic", &view{Title: "Periodic", Nav: "periodic", Live: true, Now: now, Flash: d.flash(r),
		Data: &periodicData{Schedules: list, Request: newRequestID()}})
}

func newRequestID() string {
	raw := make([]byte, 8)
	_, _ = rand.Read(raw) // never fails on supported platforms
	return hex.EncodeToString(raw)
}

// pauseSchedule pauses the schedule named by the "name" field.
func (d *Dashboard) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	d.setSchedulePause(w, r, true)
}

// resumeSchedule resumes the schedule named by the "name" field.
func (d *Dashboard) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	d.setSchedulePause(w, r, false)
}

func (d *Dashboard) setSchedulePause(w http.ResponseWriter, r *http.Request, pause bool) {
	name := r.PostForm.Get("name")
	set, done := periodic.Resume, "schedule-resumed"
	if pause {
		set, done = periodic.Pause, "schedule-paused"
	}
	if err := set(r.Context(), d.b, name); err != nil {
		d.scheduleError(w, r, name, err)
		return
	}
	d.redirect(w, r, "/periodic", url.Values{"done": {done}, "nid": {name}})
}

// runSchedule requests a run now of the schedule named by the "name"
// field, with the form's "request" id (a random one when empty).
func (d *Dashboard) runSchedule(w http.ResponseWriter, r *http.Request) {
	name := r.PostForm.Get("name")
	run, err := periodic.RunNow(r.Context(), d.b, name, strings.TrimSpace(r.PostForm.Get("request")))
	if err != nil {
		d.scheduleError(w, r, name, err)
		return
	}
	done := "run-requested"
	if run.State == periodic.RunEnqueued {
		done = "run-enqueued"
	}
	d.redirect(w, r, "/periodic", url.Values{"done": {done}, "nid": {run.ID}})
}

// scheduleError answers a refused schedule action: 404 for a name that is
// no schedule, 409 for one no running scheduler declares, 400 for bad
// input.
func (d *Dashboard) scheduleError(w http.ResponseWriter, r *http.Request, name string, err error) {
	switch {
	case errors.Is(err, periodic.ErrUnknownSchedule):
		d.fail(w, r, http.StatusNotFound, "No schedule "+strconv.Quote(name)+" in this namespace: no scheduler declared it, or it went stale and was removed. Nothing was changed.")
	case errors.Is(err, periodic.ErrNotRunning):
		d.fail(w, r, http.StatusConflict, "No running scheduler declares schedule "+strconv.Quote(name)+", so none would run it: nothing was requested. "+err.Error())
	default:
		d.actionError(w, r, err)
	}
}
