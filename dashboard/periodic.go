package dashboard

import (
	"net/http"

	"github.com/delayq/delayq/periodic"
)

type periodicData struct {
	Schedules []periodic.Status
}

// periodic lists the periodic schedules, read-only.
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
	d.render(w, r, http.StatusOK, "periodic", &view{Title: "Periodic", Nav: "periodic", Live: true, Now: now, Data: &periodicData{Schedules: list}})
}
