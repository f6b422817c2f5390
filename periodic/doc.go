// Package periodic enqueues jobs on schedules declared in code: a cron
// expression, a time zone, a job type and its arguments.
//
//	var Report = job.New[ReportArgs]("report.nightly", job.Queue("reports"))
//
//	berlin, err := time.LoadLocation("Europe/Berlin")
//	s, err := periodic.New(b, periodic.Options{})
//	err = periodic.Add(s, "nightly-report", "30 2 * * *", Report, ReportArgs{Kind: "sales"},
//		periodic.Location(berlin), periodic.RunMissedOnce(6*time.Hour))
//	go s.Run(ctx)
//
// and, in the worker, record each tick's outcome for `delayq periodic ls`
// and the dashboard:
//
//	worker.Options{..., Middleware: []job.Middleware{periodic.Outcomes(b)}}
//
// Only the job a scheduler enqueued for a tick records an outcome: its id
// is the tick's and it carries the scheduler's signature (the header
// delayq-periodic-sig).
//
// # No leader
//
// Run a Scheduler in as many processes as you like, all with the same
// schedules. Each enqueues every tick; the job of a tick has the id
// name@T, the schedule's name and the tick's time T in UTC to the second
// ("nightly-report@2030-01-02T01:30:00Z"; [Status].LastID is the id of a
// schedule's last tick), and the broker stores
// one job per id: the others are refused as duplicates. The tick's queue is
// claimed first, namespace-wide, by the first scheduler to reach it, and
// every scheduler enqueues the tick there, so that processes that declare
// the schedule on different queues (a rolling deploy that moves it) still
// run it once. So exactly one job runs per tick, and no process is
// special: any of them can die.
//
// # Missed ticks
//
// A scheduler enqueues each tick when it is due, and every tick it reached
// within Options.Tolerance (5 s) of its time when it woke late. A tick
// reached later than that, or due before the scheduler started, was
// missed, and follows the schedule's policy: [RunMissedOnce] (the default,
// within an hour) enqueues one job for the latest of them, [SkipMissed]
// drops them, [RunMissedAll] enqueues each within a window (at most 1,000
// a step; a longer catch-up goes on at once in further steps). Whatever
// the policy but RunMissedAll, a scheduler that comes back enqueues at most one job
// for the time it was away.
//
// # A tick that cannot be enqueued
//
// Each tick's job is built and checked on its own before a step's one
// enqueue call, and enqueued one by one when the broker refuses that call
// whole. A tick whose job cannot be enqueued (an expiry that passed, a
// payload beyond the broker's cap) is skipped, logged with the schedule's
// name and why, and stored as the schedule's last outcome, "refused"; the
// other schedules, and the schedule's own later ticks, go on.
//
// # Pause, resume and run now
//
// [Pause] stops a schedule's ticks in every scheduler, from its next step
// (within Options.Poll), until [Resume]; the pause is stored in Redis, and
// each tick passed over is the schedule's last outcome, ResultPaused.
// The ticks due while it was paused never run: a resumed schedule goes on
// from the moment of the resume, its missed-tick policy counted from
// there. [RunNow] records a request that the schedulers declaring the
// schedule pick up at their next step: they enqueue one job built as a
// tick's, with the id name@run:request (Run.ID), once per request id
// however often it is sent. The request goes through the schedulers
// because only they hold the schedule's arguments. See docs/periodic.md.
//
// # Daylight saving
//
// Expressions are read in their time zone, as cron does: on the day the
// clocks go forward a daily 02:30 runs once, at 03:00 (the end of the gap);
// on the day they go back a daily 01:30 runs once, the first time 01:30
// comes. Hourly expressions follow the clock.
//
// # Schedules in Redis
//
// Run writes the schedules it declares to Redis and refreshes them every
// Options.Heartbeat; [List] reads them. A schedule that no running scheduler
// declares any more (an old deploy's) turns stale after Options.StaleAfter,
// is shown as such, is removed by the next scheduler's heartbeat, and is
// never run. See docs/periodic.md.
//
// These keys (ns:{:periodic}:...) are the package's own, written with
// plain commands on the broker's client ([broker.Broker.Client]), no
// script; the broker's scripts never touch them. A tick's job goes
// through the broker's Enqueue like any other job.
package periodic
