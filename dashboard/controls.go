package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// mustKnow answers 404 and returns false when the page's queue was never
// used in the namespace: an action on it would create it (a typo in a
// crafted or stale form).
func (d *Dashboard) mustKnow(w http.ResponseWriter, r *http.Request, q string) bool {
	err := protocol.Admin(d.b).MustKnow(r.Context(), q)
	switch {
	case err == nil:
		return true
	case errors.Is(err, admin.ErrUnknownQueue):
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
	return typ, naming.Type(typ)
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
// job type of it; a "strict" field makes it a sliding window of "per" (plus
// an optional "slack") instead; a "clear" field clears it.
func (d *Dashboard) setLimit(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	typ, err := typeField(r)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var lim job.RateLimit
	clear := r.PostForm.Get("clear") != ""
	if !clear {
		if lim, err = limitForm(r); err != nil {
			d.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
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

// keyField reads the optional "key" field of a key control form: "" for
// the default of every key of the queue.
func keyField(r *http.Request) (string, error) {
	key := strings.TrimSpace(r.PostForm.Get("key"))
	if key == "" {
		return "", nil
	}
	if err := naming.Key(key); err != nil {
		return "", errors.New("Bad key: " + err.Error())
	}
	return key, nil
}

// setKeyCap sets (n > 0) or clears (n = 0) the default concurrency cap of
// every key of the queue or, with a "key" field, that key's own cap
// (SetKeyConcurrency).
func (d *Dashboard) setKeyCap(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	key, err := keyField(r)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("n")))
	if err != nil || n < 0 {
		d.fail(w, r, http.StatusBadRequest, "The key cap must be a whole number of running jobs per key, 0 to clear it, not "+strconv.Quote(strings.TrimSpace(r.PostForm.Get("n")))+".")
		return
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	if err := d.b.SetKeyConcurrency(r.Context(), q, key, n); err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "key-capped"
	if n == 0 {
		done = "key-cap-cleared"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {keyDone(key, done)}, "nid": {keyTarget(q, key)}, "n": {strconv.Itoa(n)}})
}

// setKeyLimit sets the default rate limit of every key of the queue or,
// with a "key" field, that key's own limit (SetKeyRateLimit), read as
// setLimit reads a limit; a "clear" field clears it.
func (d *Dashboard) setKeyLimit(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	key, err := keyField(r)
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var lim job.RateLimit
	clear := r.PostForm.Get("clear") != ""
	if !clear {
		if lim, err = limitForm(r); err != nil {
			d.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	if err := d.b.SetKeyRateLimit(r.Context(), q, key, lim); err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "key-limited"
	if clear {
		done = "key-limit-cleared"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {keyDone(key, done)}, "nid": {keyTarget(q, key)}, "n": {strconv.Itoa(lim.Count)}})
}

// setKeyFair turns fair turns between the keys of the queue on (an "on"
// field of "1") or off ("0") (SetKeyFairness).
func (d *Dashboard) setKeyFair(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	var on bool
	switch v := strings.TrimSpace(r.PostForm.Get("on")); v {
	case "1":
		on = true
	case "0":
	default:
		d.fail(w, r, http.StatusBadRequest, "Fair turns between keys are turned on with 1 or off with 0, not "+strconv.Quote(v)+".")
		return
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	if err := d.b.SetKeyFairness(r.Context(), q, on); err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "key-fair-on"
	if !on {
		done = "key-fair-off"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {q}})
}

// keyDone is the notice of a key control: done, or for the default of
// every key (key "") its "default-" form.
func keyDone(key, done string) string {
	if key == "" {
		return "default-" + done
	}
	return done
}

// keyTarget names what a key control applies to in a notice: the key, or
// the queue for the default of its keys.
func keyTarget(q, key string) string {
	if key == "" {
		return q
	}
	return key
}

// limitForm reads the rate limit of a limit form, or says what is wrong
// with it.
func limitForm(r *http.Request) (job.RateLimit, error) {
	field := func(name string) string { return strings.TrimSpace(r.PostForm.Get(name)) }
	count, err := strconv.Atoi(field("count"))
	if err != nil || count <= 0 {
		return job.RateLimit{}, errors.New("The limit's count must be a positive whole number of starts, not " + strconv.Quote(field("count")) + ".")
	}
	per, err := time.ParseDuration(field("per"))
	if err != nil || per < time.Millisecond {
		return job.RateLimit{}, errors.New("The limit's period must be a duration of at least 1ms (such as 1s, 1m, 250ms), not " + strconv.Quote(field("per")) + ".")
	}
	lim := job.RateLimit{Count: count, Per: per, Strict: r.PostForm.Get("strict") != ""}
	if b := field("burst"); b != "" {
		if lim.Burst, err = strconv.Atoi(b); err != nil || lim.Burst < 0 {
			return job.RateLimit{}, errors.New("The limit's burst must be a whole number that is not negative, not " + strconv.Quote(b) + ".")
		}
	}
	if sl := field("slack"); sl != "" {
		if lim.Slack, err = time.ParseDuration(sl); err != nil || lim.Slack < 0 {
			return job.RateLimit{}, errors.New("The limit's slack must be a duration that is not negative (such as 200ms), not " + strconv.Quote(sl) + ".")
		}
	}
	if lim.Strict && lim.Burst == 1 {
		lim.Burst = 0 // a strict window allows Count at once; 1 is the default burst
	}
	if err := rules.CheckRateLimit(lim); err != nil {
		return job.RateLimit{}, errors.New("The limit was not set: " + strings.TrimPrefix(err.Error(), "job: "+job.ErrInvalid.Error()+": ") + ".")
	}
	return lim, nil
}

// controlTarget names what a control applies to in a notice.
func controlTarget(q, typ string) string {
	if typ != "" {
		return typ
	}
	return q
}

// rateText is "10 per 1s", "10 per 1s, burst 5", "10 in any 1s, strict"
// or "10 in any 1s (+200ms slack), strict".
func rateText(r job.RateLimit) string {
	if r.Strict {
		s := strconv.Itoa(r.Count) + " in any " + shortDur(r.Per)
		if r.Slack > 0 {
			s += " (+" + shortDur(r.Slack) + " slack)"
		}
		return s + ", strict"
	}
	s := strconv.Itoa(r.Count) + " per " + shortDur(r.Per)
	if r.Burst > 1 {
		s += ", burst " + strconv.Itoa(r.Burst)
	}
	return s
}

// shortDur is an exact duration without trailing zero units: 1s, 1m, 1h,
// 1m30s, 250ms.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
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
