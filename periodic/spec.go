package periodic

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// schedule gives the tick after t; the zero time when there is none.
type schedule interface {
	Next(t time.Time) time.Time
}

// parser reads 5-field expressions, 6 with a leading seconds field, and the
// descriptors (@daily, @hourly, …). @every is read by parseSpec itself.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSpec parses a schedule expression for the time zone loc. The error
// says what is wrong with it; the caller names the schedule.
func parseSpec(spec string, loc *time.Location) (schedule, error) {
	s := strings.TrimSpace(spec)
	switch {
	case s == "":
		return nil, fmt.Errorf("the cron expression is empty")
	case strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ="):
		return nil, fmt.Errorf("cron expression %q sets a time zone; set it with periodic.Location", spec)
	}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("cron expression %q: @every needs a whole number of seconds, at least 1s", spec)
		}
		return every{d}, nil
	}
	sch, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q: %v", spec, err)
	}
	sp, ok := sch.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron expression %q is not a calendar schedule", spec)
	}
	local := *sp
	local.Location = loc
	wall := *sp
	wall.Location = time.UTC
	const allHours = 1<<24 - 1
	return &calendar{spec: &local, wall: &wall, loc: loc, fixedHours: sp.Hour&allHours != allHours}, nil
}

// every ticks at the multiples of d since the Unix epoch, so that every
// process computes the same ticks whenever it started (cron's own @every
// counts from the moment it is asked).
type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	n, d := t.UnixNano(), e.d.Nanoseconds()
	k := n / d
	if n < 0 && n%d != 0 {
		k-- // floor
	}
	return time.Unix(0, (k+1)*d).In(t.Location())
}

// calendar is a cron expression in a time zone, with the daylight-saving
// rules of cron (Vixie cron, cronie) for expressions with fixed hours:
//
//   - a wall-clock time skipped when the clocks go forward runs once, at the
//     end of the gap (a daily 02:30 runs at 03:00 on the spring-forward day);
//   - a wall-clock time that happens twice when the clocks go back runs only
//     the first time (a daily 01:30 runs once on the fall-back day).
//
// An expression that matches every hour (its hour field is * or */1) ticks
// by the clock as it is: nothing in the skipped hour, both of the repeated
// hour's ticks, as an hourly job should.
type calendar struct {
	spec       *cron.SpecSchedule // in loc
	wall       *cron.SpecSchedule // the same fields read as UTC: matches wall-clock readings
	loc        *time.Location
	fixedHours bool
}

func (c *calendar) Next(t time.Time) time.Time {
	t = t.In(c.loc)
	for range 1000 { // each round passes one repeated tick; a year has few
		n := c.spec.Next(t)
		if !c.fixedHours || n.IsZero() {
			return n
		}
		if g := c.gapTick(t, n); !g.IsZero() {
			return g
		}
		if !c.repeated(n) {
			return n
		}
		t = n
	}
	return time.Time{}
}

// gapTick returns the end of the first forward jump of the clocks in
// (t, n] whose skipped wall-clock times the expression matches, or the zero
// time.
func (c *calendar) gapTick(t, n time.Time) time.Time {
	for x := t; ; {
		_, end := x.ZoneBounds()
		if end.IsZero() || end.After(n) {
			return time.Time{}
		}
		_, before := end.Add(-time.Second).Zone()
		_, after := end.Zone()
		if after > before {
			// Wall clock [w0, w0+skipped) did not happen.
			w := end.In(time.FixedZone("", before))
			w0 := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC)
			skipped := time.Duration(after-before) * time.Second
			if m := c.wall.Next(w0.Add(-time.Second)); !m.IsZero() && m.Before(w0.Add(skipped)) {
				return end
			}
		}
		x = end
	}
}

// repeated reports whether n is the second reading of a wall-clock time
// that the clocks going back made happen twice.
func (c *calendar) repeated(n time.Time) bool {
	start, _ := n.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Second).Zone()
	_, after := n.Zone()
	return before > after && n.Before(start.Add(time.Duration(before-after)*time.Second))
}

// latest returns the last tick of s in (after, upTo], or the zero time. It
// looks back from upTo in doubling steps, so that it costs about as many
// Next calls as there are ticks in the last step, not as many as there are
// since after.
func latest(s schedule, after, upTo time.Time) time.Time {
	if !upTo.After(after) {
		return time.Time{}
	}
	for d := time.Second; ; d *= 2 {
		from := upTo.Add(-d)
		if !from.After(after) {
			from = after
		}
		if n := s.Next(from); !n.IsZero() && !n.After(upTo) {
			for {
				m := s.Next(n)
				if m.IsZero() || m.After(upTo) {
					return n
				}
				n = m
			}
		}
		if from.Equal(after) {
			return time.Time{}
		}
	}
}
