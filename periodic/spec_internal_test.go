package periodic

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// ticks lists the ticks of spec in loc in (from, to].
func ticks(t *testing.T, spec string, loc *time.Location, from, to time.Time) []string {
	t.Helper()
	s, err := parseSpec(spec, loc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for x := s.Next(from); !x.IsZero() && !x.After(to); x = s.Next(x) {
		out = append(out, x.In(loc).Format("01-02 15:04 MST"))
	}
	return out
}

// TestDaylightSaving: a fixed-time expression runs once on the days the
// clocks change, as cron does; an hourly one follows the clock.
func TestDaylightSaving(t *testing.T) {
	t.Parallel()
	ny, berlin := mustZone(t, "America/New_York"), mustZone(t, "Europe/Berlin")
	for _, tc := range []struct {
		name, spec string
		loc        *time.Location
		from, to   time.Time
		want       []string
	}{
		{"spring forward: 02:30 runs at the end of the gap", "30 2 * * *", ny,
			time.Date(2026, 3, 7, 0, 0, 0, 0, ny), time.Date(2026, 3, 10, 0, 0, 0, 0, ny),
			[]string{"03-07 02:30 EST", "03-08 03:00 EDT", "03-09 02:30 EDT"}},
		{"spring forward, with seconds", "15 30 2 * * *", ny,
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), time.Date(2026, 3, 9, 12, 0, 0, 0, ny),
			[]string{"03-08 03:00 EDT", "03-09 02:30 EDT"}},
		{"spring forward: a time outside the gap is untouched", "30 1 * * *", ny,
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), time.Date(2026, 3, 9, 12, 0, 0, 0, ny),
			[]string{"03-08 01:30 EST", "03-09 01:30 EDT"}},
		{"fall back: 01:30 runs once, the first time", "30 1 * * *", ny,
			time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 3, 0, 0, 0, 0, ny),
			[]string{"10-31 01:30 EDT", "11-01 01:30 EDT", "11-02 01:30 EST"}},
		{"fall back: 02:30 is not repeated", "30 2 * * *", ny,
			time.Date(2026, 10, 31, 12, 0, 0, 0, ny), time.Date(2026, 11, 2, 12, 0, 0, 0, ny),
			[]string{"11-01 02:30 EST", "11-02 02:30 EST"}},
		{"spring forward in Berlin: @daily is unaffected, 02:30 moves to 03:00", "30 2 * * *", berlin,
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), time.Date(2026, 3, 30, 12, 0, 0, 0, berlin),
			[]string{"03-29 03:00 CEST", "03-30 02:30 CEST"}},
		{"fall back in Berlin: 02:30 once", "30 2 * * *", berlin,
			time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), time.Date(2026, 10, 26, 12, 0, 0, 0, berlin),
			[]string{"10-25 02:30 CEST", "10-26 02:30 CET"}},
		{"hourly follows the clock on spring forward", "0 * * * *", ny,
			time.Date(2026, 3, 8, 0, 30, 0, 0, ny), time.Date(2026, 3, 8, 4, 30, 0, 0, ny),
			[]string{"03-08 01:00 EST", "03-08 03:00 EDT", "03-08 04:00 EDT"}},
		{"hourly follows the clock on fall back", "0 * * * *", ny,
			time.Date(2026, 11, 1, 0, 30, 0, 0, ny), time.Date(2026, 11, 1, 2, 30, 0, 0, ny),
			[]string{"11-01 01:00 EDT", "11-01 01:00 EST", "11-01 02:00 EST"}},
		{"@daily", "@daily", ny,
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), time.Date(2026, 3, 9, 12, 0, 0, 0, ny),
			[]string{"03-08 00:00 EST", "03-09 00:00 EDT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ticks(t, tc.spec, tc.loc, tc.from, tc.to)
			if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
				t.Errorf("%q in %s: ticks %v, want %v", tc.spec, tc.loc, got, tc.want)
			}
		})
	}
}

// TestEveryIsAligned: @every ticks at multiples of its duration since the
// epoch, whenever it is asked, so processes started apart agree.
func TestEveryIsAligned(t *testing.T) {
	t.Parallel()
	s, err := parseSpec("@every 30s", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	for _, from := range []time.Time{base, base.Add(time.Nanosecond), base.Add(17 * time.Second), base.Add(29*time.Second + 999*time.Millisecond)} {
		if got, want := s.Next(from), base.Add(30*time.Second); !got.Equal(want) {
			t.Errorf("Next(%s) = %s, want %s", from, got, want)
		}
	}
	if got, want := s.Next(base.Add(30*time.Second)), base.Add(time.Minute); !got.Equal(want) {
		t.Errorf("Next of a tick = %s, want %s", got, want)
	}
}

func TestLatest(t *testing.T) {
	t.Parallel()
	every, _ := parseSpec("@every 1s", time.UTC)
	monthly, _ := parseSpec("0 0 1 * *", time.UTC)
	base := time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		s           schedule
		after, upTo time.Time
		want        time.Time
	}{
		{"every second, a week back", every, base.Add(-7 * 24 * time.Hour), base.Add(500 * time.Millisecond), base},
		{"every second, nothing after", every, base, base.Add(500 * time.Millisecond), time.Time{}},
		{"monthly, a year back", monthly, base.AddDate(-1, 0, 0), base, time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)},
		{"monthly, window too short", monthly, base.AddDate(0, 0, -3), base, time.Time{}},
		{"empty interval", every, base, base, time.Time{}},
	} {
		if got := latest(tc.s, tc.after, tc.upTo); !got.Equal(tc.want) {
			t.Errorf("%s: latest = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestParseSpecErrors(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		"":                 "empty",
		"61 * * * *":       `"61 * * * *"`,
		"* * * *":          `"* * * *"`,
		"@every 500ms":     "whole number of seconds",
		"@every 1.5s":      "whole number of seconds",
		"@every soon":      "whole number of seconds",
		"TZ=UTC 0 * * * *": "periodic.Location",
		"@fortnightly":     `"@fortnightly"`,
	} {
		_, err := parseSpec(spec, time.UTC)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseSpec(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
	for _, spec := range []string{"*/5 * * * *", "0 30 2 * * *", "@every 1m", "@hourly", "0 9 * * MON-FRI"} {
		if _, err := parseSpec(spec, time.UTC); err != nil {
			t.Errorf("parseSpec(%q): %v", spec, err)
		}
	}
}
