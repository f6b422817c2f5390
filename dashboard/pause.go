package dashboard

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/naming"
)

// pause pauses the queue, or with a "type" field one job type of it.
func (d *Dashboard) pause(w http.ResponseWriter, r *http.Request) { d.setPause(w, r, true) }

// resume resumes the queue, or with a "type" field one job type of it.
func (d *Dashboard) resume(w http.ResponseWriter, r *http.Request) { d.setPause(w, r, false) }

func (d *Dashboard) setPause(w http.ResponseWriter, r *http.Request, pause bool) {
	q, typ := r.PathValue("queue"), strings.TrimSpace(r.PostForm.Get("type"))
	if typ != "" {
		if err := naming.Type(typ); err != nil {
			d.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	var (
		back int64
		err  error
		done string
	)
	if pause {
		err, done = d.b.Pause(r.Context(), q, typ), "paused"
	} else {
		back, err = d.b.Resume(r.Context(), q, typ)
		done = "resumed"
	}
	if typ != "" {
		done = "type-" + done
	}
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	nid := q
	if typ != "" {
		nid = typ
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {nid}, "n": {strconv.FormatInt(back, 10)}})
}

// pauseKey pauses the jobs of the key in the "key" field (PauseKey).
func (d *Dashboard) pauseKey(w http.ResponseWriter, r *http.Request) { d.setKeyPause(w, r, true) }

// resumeKey resumes the jobs of the key in the "key" field (ResumeKey).
func (d *Dashboard) resumeKey(w http.ResponseWriter, r *http.Request) { d.setKeyPause(w, r, false) }

func (d *Dashboard) setKeyPause(w http.ResponseWriter, r *http.Request, pause bool) {
	q, key := r.PathValue("queue"), strings.TrimSpace(r.PostForm.Get("key"))
	if key == "" {
		d.fail(w, r, http.StatusBadRequest, "Give the key whose jobs to pause or resume.")
		return
	}
	if err := naming.Key(key); err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if !d.mustKnow(w, r, q) {
		return
	}
	var (
		back int64
		err  error
		done = "key-paused"
	)
	if pause {
		err = d.b.PauseKey(r.Context(), q, key)
	} else {
		back, err = d.b.ResumeKey(r.Context(), q, key)
		done = "key-resumed"
	}
	if err != nil {
		d.actionError(w, r, err)
		return
	}
	d.redirect(w, r, queuePath(q), url.Values{"done": {done}, "nid": {key}, "n": {strconv.FormatInt(back, 10)}})
}
