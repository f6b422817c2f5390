// Package tickid makes the job id of a periodic schedule's tick, as
// package periodic gives it and docs/periodic.md states it:
// "name@2030-01-02T03:04:05Z", the tick's time in UTC to the second.
// Users find a tick's job through periodic.List (Status.LastID),
// periodic.RunNow and periodic.LookupRun (Run.ID); delayq's tests build
// the id of a given tick with ID.
package tickid

import "time"

// Layout is a tick's time in ids and headers: UTC, whole seconds (cron's
// resolution).
const Layout = "2006-01-02T15:04:05Z"

// ID returns the job id of the tick at t of the schedule name:
// "name@2030-01-02T03:04:05Z" (the tick's time in UTC).
func ID(name string, t time.Time) string {
	return name + "@" + t.UTC().Format(Layout)
}
