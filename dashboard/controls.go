package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/job"
)

// mustKnow answers 404 and returns false when the page's queue was never
// used in the namespace: an action on it would create it (a typo in a
// crafted or stale form).
func (d *Dashboard) mustKnow(w http.ResponseWriter, r *http.Request, q string) bool {
	err := d.b.MustKnow(r.Context(), q)
	switch {
	case err == nil:
		return true
	case errors.Is(err, broker.ErrUnknownQueue):
		d.fail(w, r, http.StatusNotFound, "No queue "+strconv.Quote(q)+" in this namespace: nothing was ever enqueued to it, so nothing was changed.")
	default:
		d.actionError(w, r, err)
	}
	return false
}

// typeField reads the optional "type" field of a control form.
func typeField(r *http.Request) (string, error) {
	typ := strings.TrimSpace(r.PostForm.Get("type"))
	if typ == "" {
		return "", nil
	}
	return typ, job.ValidateType(typ)
}

// setCap sets (n > 0) or clears (n = 0) a concurrency cap of the queue or,
// with a "type" field, of one job type of it.
func (d *Dashboard) setCap(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	typ, err := typeField(r)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("n")))
	if err != nil || n < 0 {
		d.fail(w, r, http.StatusBadRequest, "The cap must be a whole number of running jobs, 0 to clear it.")
		return
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	if err := d.b.SetConcurrency(r.Context(), q, typ, n); err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "capped"
	if n == 0 {
		done = "cap-cleared"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {controlTarget(q, typ)}, "n": {strconv.Itoa(n)}})
}

// setLimit sets a rate limit ("count" per "per", a duration such as 1s,
// with an optional "burst") of the queue or, with a "type" field, of one
// job type of it; a "clear" field clears it.
func (d *Dashboard) setLimit(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	typ, err := typeField(r)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var lim broker.RateLimit
	clear := r.PostForm.Get("clear") != ""
	if !clear {
		count, err1 := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("count")))
		per, err2 := time.ParseDuration(strings.TrimSpace(r.PostForm.Get("per")))
		burst := 0
		var err3 error
		if b := strings.TrimSpace(r.PostForm.Get("burst")); b != "" {
			burst, err3 = strconv.Atoi(b)
		}
		if err1 != nil || count <= 0 || err2 != nil || per < time.Millisecond || err3 != nil || burst < 0 {
			d.fail(w, r, http.StatusBadRequest, "A limit needs a positive whole count, a period of at least 1ms (such as 1s, 1m, 250ms) and a burst that is not negative.")
			return
		}
		lim = broker.RateLimit{Count: count, Per: per, Burst: burst}
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	if err := d.b.SetRateLimit(r.Context(), q, typ, lim); err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "limited"
	if clear {
		done = "limit-cleared"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {controlTarget(q, typ)}, "n": {strconv.Itoa(lim.Count)}})
}

// controlTarget names what a control applies to in a notice.
func controlTarget(q, typ string) string {
	if typ != "" {
		return typ
	}
	return q
}

// rateText is "10 per 1s" or "10 per 1s, burst 5".
func rateText(r broker.RateLimit) string {
	per := r.Per.String() // exact: 1s, 1m0s, 250ms
	if strings.HasSuffix(per, "m0s") {
		per = strings.TrimSuffix(per, "0s")
	}
	if strings.HasSuffix(per, "h0m") {
		per = strings.TrimSuffix(per, "0m")
	}
	s := strconv.Itoa(r.Count) + " per " + per
	if r.Burst > 1 {
		s += ", burst " + strconv.Itoa(r.Burst)
	}
	return s
}

type processesData struct {
	Processes []fleet.Process
	More      int64
}

// processes lists the live processes of the namespace's registry.
func (d *Dashboard) processes(w http.ResponseWriter, r *http.Request) {
	snap, err := fleet.List(r.Context(), d.b.Client(), d.b.Namespace())
	if err != nil {
		d.redisError(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "processes", &view{Title: "Processes", Nav: "processes", Live: true, Now: snap.Now,
		Data: &processesData{Processes: snap.Processes, More: snap.More}})
}
