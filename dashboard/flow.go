package dashboard

import (
	"slices"
	"strconv"

	"github.com/delayq/delayq/job"
)

// flowRow is one row of a queue's flow controls: the whole queue (Type
// "") or one job type with a control or held jobs.
type flowRow struct {
	Type    string
	Paused  bool
	Cap     int // 0: none
	Limit   job.RateLimit
	Limited bool // Limit is set
	// HeldByRate: due jobs held by this row's rate limit now; HeldByCap
	// and Parked: those held by its cap and parked by its pause
	// (job.QueueStats.HeldByCap and ParkedByType).
	HeldByRate, HeldByCap, Parked int64
}

// flowData is what a queue's page says about its pause, caps and rate
// limits, and the jobs they hold back now.
type flowData struct {
	Rows []flowRow
	// HeldBack: due jobs held back now (by caps, rate limits and paused
	// types; a paused queue's due jobs are counted in Due only). Why: one
	// plain line per cause, such as "31 held by the rate limit of sms.send
	// (10 per 1s)".
	HeldBack int64
	Why      []string
	// ByRate: the due jobs (in Due) that a rate limit holds; DueFree the
	// other due jobs.
	ByRate, DueFree int64
}

// flowOf reads the controls of s and what they hold back.
func flowOf(s job.QueueStats) flowData {
	var f flowData
	types := map[string]bool{}
	for _, t := range s.PausedTypes {
		types[t] = true
	}
	for t := range s.Caps {
		types[t] = true
	}
	for t := range s.RateLimits {
		types[t] = true
	}
	for t, n := range s.HeldByRate {
		if n > 0 {
			types[t] = true
		}
	}
	for t, n := range s.ParkedByType {
		if n > 0 {
			types[t] = true
		}
	}
	delete(types, "")
	names := make([]string, 0, len(types))
	for t := range types {
		names = append(names, t)
	}
	slices.Sort(names)
	// The queue's cap-held jobs are those of its capped types that have no
	// rate limit of their own (the others count in HeldByRate).
	var capOnly []string
	for _, t := range names {
		if _, limited := s.RateLimits[t]; s.Caps[t] > 0 && !limited {
			capOnly = append(capOnly, t)
		}
	}
	row := func(t string) flowRow {
		r := flowRow{Type: t, Cap: s.Caps[t], HeldByRate: s.HeldByRate[t]}
		if t == "" {
			r.Paused = s.Paused
		} else {
			r.Paused = slices.Contains(s.PausedTypes, t)
		}
		r.Limit, r.Limited = s.RateLimits[t]
		if t != "" {
			r.HeldByCap = s.HeldByCap[t]
		}
		if t != "" {
			r.Parked = s.ParkedByType[t]
		}
		return r
	}
	if q := row(""); q.Paused || q.Cap > 0 || q.Limited || q.HeldByRate > 0 {
		f.Rows = append(f.Rows, q)
	}
	for _, t := range names {
		f.Rows = append(f.Rows, row(t))
	}
	for _, r := range f.Rows {
		if r.HeldByRate > 0 {
			f.ByRate += r.HeldByRate
			line := formatCount(r.HeldByRate) + " held by the rate limit of " + target(r.Type)
			if r.Limited {
				line += " (" + rateText(r.Limit) + ")"
			}
			f.Why = append(f.Why, line)
		}
	}
	// One line per capped type holding jobs (and, should the counts by
	// type not add up to Held, the rest as a whole).
	var byType int64
	for _, t := range capOnly {
		if n := s.HeldByCap[t]; n > 0 {
			byType += n
			f.Why = append(f.Why, formatCount(n)+" held by the concurrency cap of "+target(t)+
				" (at most "+strconv.Itoa(s.Caps[t])+" running), until one of their type ends")
		}
	}
	if s.HeldByKey > 0 {
		byType += s.HeldByKey
		f.Why = append(f.Why, formatCount(s.HeldByKey)+" held by their keys: a key's concurrency cap, pause or rate limit, or its wait for a fair turn (see the keys holding jobs back)")
	}
	if rest := s.Held - byType; rest > 0 {
		f.Why = append(f.Why, formatCount(rest)+" held by the concurrency cap of their type, until one of their type ends")
	}
	// One line per type holding parked jobs (and, should the counts by
	// type not add up to Parked, such as jobs parked by a version that did
	// not count them, the rest as a whole).
	var parked int64
	for _, t := range names {
		if n := s.ParkedByType[t]; n > 0 {
			parked += n
			f.Why = append(f.Why, formatCount(n)+" parked while type "+t+" is paused")
		}
	}
	if rest := s.Parked - parked; rest > 0 {
		f.Why = append(f.Why, formatCount(rest)+" parked while their type is paused")
	}
	f.HeldBack = s.Held + s.Parked + f.ByRate
	f.DueFree = max(s.Due-f.ByRate, 0)
	return f
}

// target names what a control applies to in a sentence.
func target(t string) string {
	if t == "" {
		return "the queue"
	}
	return t
}
