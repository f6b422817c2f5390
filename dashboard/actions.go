package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/deadletter"
	"github.com/delayq/delayq/internal/naming"
)

// confirmField is set to "yes" by the confirmation dialog (or the
// confirmation page when scripts are off); destructive actions without it
// render a confirmation page and change nothing.
const confirmField = "confirmed"

type field struct{ Name, Value string }

type confirmData struct {
	Question string
	Action   string // path under the prefix
	Fields   []field
	Button   string
	Back     string // path under the prefix
}

// confirmed reports whether the request was confirmed; if not, it renders
// the confirmation page, which posts the same form with the field set.
func (d *Dashboard) confirmed(w http.ResponseWriter, r *http.Request, question, button, back string) bool {
	if r.PostForm.Get(confirmField) == "yes" {
		return true
	}
	c := &confirmData{Question: question, Action: r.URL.EscapedPath(), Button: button, Back: back}
	c.Action = strings.TrimPrefix(c.Action, d.opts.Prefix)
	for _, name := range []string{"id", "queue", "type", "error"} {
		if r.PostForm.Has(name) {
			c.Fields = append(c.Fields, field{name, r.PostForm.Get(name)})
		}
	}
	d.render(w, r, http.StatusOK, "confirm", &view{Title: "Confirm", Data: c})
	return false
}

func queuePath(q string) string { return "/queues/" + url.PathEscape(q) }

func deadPath(q string) string { return "/dead?" + url.Values{"queue": {q}}.Encode() }

func (d *Dashboard) cancel(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PostForm.Get("id")
	back := queuePath(q) + "/job?" + url.Values{"id": {id}}.Encode()
	if !d.confirmed(w, r, fmt.Sprintf("Cancel job %q of queue %q? If it waits it will never run; if a worker runs it, the worker is told to stop it.", id, q), "Cancel the job", back) {
		return
	}
	res, err := d.b.Cancel(r.Context(), q, id)
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	done := "cancelled"
	if res.Running {
		done = "cancelled-running"
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {id}})
}

func (d *Dashboard) reschedule(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PostForm.Get("id")
	in, at := strings.TrimSpace(r.PostForm.Get("in")), strings.TrimSpace(r.PostForm.Get("at"))
	var err error
	switch {
	case in != "" && at != "":
		d.fail(w, r, http.StatusBadRequest, "Give either a delay or a time, not both.")
		return
	case at != "":
		t, perr := parseAt(at)
		if perr != nil {
			d.fail(w, r, http.StatusBadRequest, perr.Error())
			return
		}
		_, err = d.b.Reschedule(r.Context(), q, id, t)
	default:
		delay := time.Duration(0)
		if in != "" {
			if delay, err = time.ParseDuration(in); err != nil || delay < 0 {
				d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Delay %q is not a duration like 90s, 15m or 2h30m (0 means now).", in))
				return
			}
		}
		_, err = d.b.RescheduleAfter(r.Context(), q, id, delay)
	}
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, queuePath(q)+"/job", url.Values{"id": {id}, "done": {"rescheduled"}, "nid": {id}})
}

// parseAt reads an RFC 3339 time, or a datetime-local value taken as UTC.
func parseAt(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q is not like 2030-01-02T15:04:05Z (RFC 3339; without a zone it is UTC)", s)
}

func (d *Dashboard) redrive(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PostForm.Get("id")
	if err := d.dl.Redrive(r.Context(), q, 0, id); err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, "/dead", url.Values{"queue": {q}, "done": {"redriven"}, "nid": {id}})
}

func (d *Dashboard) redriveAll(w http.ResponseWriter, r *http.Request) {
	q := r.PostForm.Get("queue") // "" means every queue
	if q != "" {
		if err := naming.Queue(q); err != nil {
			d.fail(w, r, http.StatusBadRequest, "Bad queue name: "+err.Error())
			return
		}
	}
	f := deadletter.Filter{Type: strings.TrimSpace(r.PostForm.Get("type")), ErrorContains: r.PostForm.Get("error")}
	what := "every dead job"
	if f != (deadletter.Filter{}) {
		what = "every dead job that matches the filter"
	}
	where := "of every queue"
	if q != "" {
		where = fmt.Sprintf("of queue %q", q)
	}
	back := "/dead?" + url.Values{"queue": {q}, "type": {f.Type}, "error": {f.ErrorContains}}.Encode()
	if !d.confirmed(w, r, fmt.Sprintf("Send %s %s back to be run now?", what, where), "Redrive them", back) {
		return
	}
	res, err := d.dl.RedriveAll(r.Context(), q, f, deadletter.BulkOptions{})
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, "/dead", url.Values{"queue": {q}, "done": {"redrive-all"},
		"n": {strconv.Itoa(res.Done)}, "failed": {strconv.Itoa(res.Failed)}})
}

func (d *Dashboard) deleteDead(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PostForm.Get("id")
	back := "/dead/" + url.PathEscape(q) + "/job?" + url.Values{"id": {id}}.Encode()
	if !d.confirmed(w, r, fmt.Sprintf("Delete dead job %q of queue %q for good?", id, q), "Delete it", back) {
		return
	}
	if err := d.dl.Delete(r.Context(), q, id); err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, "/dead", url.Values{"queue": {q}, "done": {"deleted"}, "nid": {id}})
}

func (d *Dashboard) purge(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if !d.confirmed(w, r, fmt.Sprintf("Delete every dead job of queue %q for good?", q), "Purge the dead letters", deadPath(q)) {
		return
	}
	res, err := d.dl.DeleteAll(r.Context(), q, deadletter.Filter{}, deadletter.BulkOptions{})
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, "/dead", url.Values{"queue": {q}, "done": {"purged"}, "n": {strconv.Itoa(res.Done)}})
}
