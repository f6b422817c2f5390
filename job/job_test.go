package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retrydecide"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

type SMS struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.UnixMilli(1_800_000_000_123)
	cases := []*job.Envelope{
		{Type: "sms.send", Payload: []byte(`{"to":"+1"}`), MaxRetries: 8, Timeout: 3 * time.Second, CreatedAt: created,
			Backoff: &job.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.1},
			Headers: map[string]string{"traceparent": "00-abc-def-01"}, LastError: "boom"},
		{Type: "raw", Payload: []byte{0, 1, 2, 0xff}}, // not JSON: stored as base64
		{Type: "empty"}, // no payload
		{Type: "default.retries", MaxRetries: naming.DefaultMaxRetries, Payload: []byte(`1`)},
		{Type: "a/b:c", Payload: []byte(`"<script>x</script>"`)}, // JSON string, not escaped
		{Type: "spaced", Payload: []byte(`{ "a" : [1, 2.50] }`)}, // kept byte for byte
	}
	for _, want := range cases {
		data, err := want.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := job.Decode(data)
		if err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
		if got.Type != want.Type || string(got.Payload) != string(want.Payload) || got.MaxRetries != want.MaxRetries ||
			got.Timeout != want.Timeout || !got.CreatedAt.Equal(want.CreatedAt) || got.LastError != want.LastError ||
			len(got.Headers) != len(want.Headers) || (want.Backoff != nil && *got.Backoff != *want.Backoff) {
			t.Errorf("round trip of %+v gave %+v (wire %s)", want, got, data)
		}
	}
}

func TestEnvelopeWireIsCompact(t *testing.T) {
	t.Parallel()
	e := &job.Envelope{ID: "not-stored", Queue: "not-stored", Type: "sms.send", Payload: []byte(`{"to":"+1"}`), MaxRetries: 3,
		CreatedAt: time.UnixMilli(1_800_000_000_000), Delay: time.Hour}
	data, _ := e.MarshalBinary()
	if want := `{"t":"sms.send","p":{"to":"+1"},"r":3,"c":1800000000000}`; string(data) != want {
		t.Fatalf("wire %s, want %s", data, want)
	}
	// The default retry budget is left out; none at all is written out.
	for retries, want := range map[int]string{
		naming.DefaultMaxRetries: `{"t":"sms.send","p":{"to":"+1"}}`,
		0:                        `{"t":"sms.send","p":{"to":"+1"},"r":0}`,
	} {
		e := &job.Envelope{Type: "sms.send", Payload: []byte(`{"to":"+1"}`), MaxRetries: retries}
		data, _ := e.MarshalBinary()
		if string(data) != want {
			t.Errorf("MaxRetries %d: wire %s, want %s", retries, data, want)
		}
		if got, err := job.Decode(data); err != nil || got.MaxRetries != retries {
			t.Errorf("MaxRetries %d decoded as %v (%v)", retries, got, err)
		}
	}
}

func TestDecodeRejectsCorruptBodies(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "\x00\xff", "[]", `{"t":""}`, `{"t":"x{y}"}`, `{"t":"ok","r":-1}`, `{"t":"ok","to":-5}`, `{"t":"ok","pb":"!!"}`} {
		if _, err := job.Decode([]byte(body)); !errors.Is(err, job.ErrCorrupt) {
			t.Errorf("Decode(%q) = %v, want ErrCorrupt", body, err)
		}
	}
}

func TestLastErrorIsCapped(t *testing.T) {
	t.Parallel()
	e := &job.Envelope{Type: "t", LastError: strings.Repeat("e", job.MaxErrorLen*2)}
	data, _ := e.MarshalBinary()
	got, _ := job.Decode(data)
	if len(got.LastError) > job.MaxErrorLen || !strings.HasSuffix(got.LastError, "(truncated)") {
		t.Fatalf("last error kept %d bytes", len(got.LastError))
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{naming.ID(""), "id must not be empty"},
		{naming.ID(strings.Repeat("i", 257)), "id is 257 bytes long, the limit is 256"},
		{naming.ID("a}b"), `id "a}b" contains '}'`},
		{naming.ID("a\nb"), `contains '\n'`},
		{naming.ID("\xff"), "not valid UTF-8"},
		{naming.Queue("a b"), `queue name "a b" contains ' '`},
		{naming.Queue("q:x"), `queue name "q:x" contains ':'`},
		{naming.Queue("q#1"), `queue name "q#1" contains '#'`},
		{naming.Queue("."), `queue name "." is a relative path segment`},
		{naming.Queue(".."), `queue name ".." is a relative path segment`},
		{naming.Queue("a/b"), `queue name "a/b" contains '/'`},
		{naming.Queue("a%2e"), `queue name "a%2e" contains '%'`},
		{naming.Type("sms send"), `job type "sms send" contains ' '`},
		{naming.Delay(-time.Millisecond), "delay -1ms is negative"},
	} {
		if !errors.Is(tc.err, job.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("err = %v, want ErrInvalid mentioning %q", tc.err, tc.want)
		}
	}
	for _, ok := range []error{naming.ID("order-42/ünïcode ok"), naming.Queue("emails.high_prio-2"), naming.Queue("..."), naming.Queue(".q"), naming.Queue("q.."), naming.Type("sms.send:v2/x")} {
		if ok != nil {
			t.Errorf("valid name refused: %v", ok)
		}
	}
}

func TestTypeOptions(t *testing.T) {
	t.Parallel()
	typ := job.New[SMS]("sms.send", job.Queue("sms"), job.MaxRetries(8), job.Timeout(time.Second))
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	env, err := typ.Envelope(SMS{To: "+1", Text: "hi"}, job.ID("id-1"), job.At(at), job.MaxRetries(2), job.Header("k", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if env.Queue != "sms" || env.ID != "id-1" || !env.At.Equal(at) || env.MaxRetries != 2 || env.Timeout != time.Second ||
		env.Headers["k"] != "v" || string(env.Payload) != `{"to":"+1","text":"hi"}` {
		t.Fatalf("envelope %+v", env)
	}
	env, _ = typ.Envelope(SMS{}, job.At(at), job.In(time.Minute))
	if !env.At.IsZero() || env.Delay != time.Minute {
		t.Fatalf("the last of In/At should win: %+v", env)
	}

	for _, tc := range []struct {
		opts []job.Option
		want string
	}{
		{[]job.Option{job.In(-time.Second)}, "delay -1s is negative"},
		{[]job.Option{job.ID("")}, "id must not be empty"},
		{[]job.Option{job.Queue("{x}")}, "contains '{'"},
		{[]job.Option{job.MaxRetries(-2)}, "max retries -2 is negative"},
		{[]job.Option{job.Timeout(-1)}, "timeout -1ns is negative"},
		{[]job.Option{job.At(time.Time{})}, "zero time"},
		{[]job.Option{nil}, `option 1 of a job of type "sms.send" is nil`},
		{[]job.Option{job.WithBackoff(retry.Exponential{Initial: time.Second, Multiplier: 0.5, Max: time.Hour})}, "multiplier must be finite and >= 1"},
	} {
		if _, err := typ.Envelope(SMS{}, tc.opts...); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
		}
	}
	if err := handlePanic(func() { job.New[SMS]("x", job.Queue("q"), nil) }); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), `option 2 of job type "x" is nil`) {
		t.Errorf("nil option on a type: %v", err)
	}
	if err := handlePanic(func() { job.New[SMS]("bad name") }); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("bad type name: %v", err)
	}
	fn := job.New[func()]("fn") // a type that does not encode is defined; its enqueue fails
	if _, err := fn.Envelope(func() {}); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), `cannot encode arguments of job type "fn"`) {
		t.Errorf("unencodable args: %v", err)
	}
}

type memEnqueuer struct{ got []*job.Envelope }

func (m *memEnqueuer) Enqueue(_ context.Context, envs ...*job.Envelope) error {
	m.got = append(m.got, envs...)
	return nil
}

func TestEnqueueItems(t *testing.T) {
	t.Parallel()
	typ := job.New[SMS]("sms.send")
	var m memEnqueuer
	envs, err := typ.EnqueueItems(context.Background(), &m, []job.Item[SMS]{
		{Args: SMS{To: "1"}, Opts: []job.Option{job.In(time.Second)}},
		{Args: SMS{To: "2"}, Opts: []job.Option{job.ID("b"), job.In(time.Minute)}},
	})
	if err != nil || len(envs) != 2 || len(m.got) != 2 || m.got[0].Delay != time.Second || m.got[1].Delay != time.Minute ||
		m.got[0].ID != "" || m.got[1].ID != "b" || !strings.HasPrefix(string(m.got[1].Payload), `{"to":"2"`) {
		t.Fatalf("EnqueueItems: %v; got %+v %+v", err, m.got[0], m.got[len(m.got)-1])
	}
	items := []job.Item[SMS]{{Opts: []job.Option{job.ID("same")}}, {Opts: []job.Option{job.ID("same")}}}
	if _, err := typ.EnqueueItems(context.Background(), &m, items); !errors.Is(err, job.ErrInvalid) ||
		!strings.Contains(err.Error(), `items 1 and 2 of 2 have the same id "same"`) || len(m.got) != 2 {
		t.Fatalf("one id twice: %v (stored %d)", err, len(m.got))
	}
	items = []job.Item[SMS]{{}, {Opts: []job.Option{job.MaxRetries(-1)}}}
	if _, err := typ.EnqueueItems(context.Background(), &m, items); !errors.Is(err, job.ErrInvalid) ||
		!strings.HasPrefix(err.Error(), "item 2 of 2: ") || len(m.got) != 2 {
		t.Fatalf("a bad item: %v (stored %d)", err, len(m.got))
	}
	if envs, err := typ.EnqueueItems(context.Background(), &m, nil); err != nil || len(envs) != 0 || len(m.got) != 2 {
		t.Fatalf("no items: %v %v", envs, err)
	}
}

// handlePanic runs f, which should panic with an error, and returns it (nil
// when f did not panic).
func handlePanic(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = fmt.Errorf("panic with %T %v, not an error", r, r)
			}
		}
	}()
	f()
	return nil
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg := job.NewRegistry()
	typ := job.New[SMS]("sms.send", job.Retry(retry.Constant(time.Second)), job.Timeout(time.Minute))
	var got SMS
	typ.Handle(reg, func(ctx context.Context, j *job.Job[SMS]) error { got = j.Args; return nil })
	if err := handlePanic(func() { typ.Handle(reg, func(context.Context, *job.Job[SMS]) error { return nil }) }); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "has a handler already") {
		t.Fatalf("second registration: %v", err)
	}
	table := reg.Table(registry.Key{})
	e, ok := table.Lookup("sms.send")
	if !ok || e.Timeout != time.Minute || e.Retry.Delay(3) != time.Second {
		t.Fatalf("entry %+v", e)
	}
	m := &job.Message{Envelope: job.Envelope{Type: "sms.send", Payload: []byte(`{"to":"+1"}`)}, Attempt: 1}
	if err := e.Handler.Handle(context.Background(), m); err != nil || got.To != "+1" {
		t.Fatalf("handle: %v, args %+v", err, got)
	}
	m.Payload = []byte(`{"to":5}`)
	err := e.Handler.Handle(context.Background(), m)
	var de *job.DecodeError
	if !errors.As(err, &de) || !retrydecide.IsPermanent(err) || !strings.Contains(err.Error(), `payload of type "sms.send" does not decode into job_test.SMS`) {
		t.Fatalf("bad payload: %v", err)
	}
	if err := handlePanic(func() { job.New[SMS]("x").Handle(reg, nil) }); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), `nil handler for job type "x"`) {
		t.Fatalf("nil handler: %v", err)
	}
	if names := table.Types(); len(names) != 1 || names[0] != "sms.send" {
		t.Fatalf("types %v", names)
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := job.NewID()
		if len(id) != 12 || naming.ID(id) != nil || naming.BatchID(id) != nil || naming.Queue(id) != nil || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestBatchError(t *testing.T) {
	t.Parallel()
	dup := errors.New("dup")
	err := error(&job.BatchError{Errs: []error{nil, dup, nil}})
	if !errors.Is(err, dup) || err.Error() != "1 of 3 jobs failed, first: dup" {
		t.Fatalf("%v", err)
	}
}
