package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Envelope is one job as the broker stores it, plus where and when it goes.
//
// ID and Queue are part of the key, not of the stored body. Delay and At say
// when the job becomes ready and are read only at enqueue; ReadyAt is filled
// in by the broker (on enqueue and on claim) with the ready time it stored,
// in the Redis server's clock.
type Envelope struct {
	ID         string            // unique within the queue while pending; generated when empty
	Queue      string            // queue name; "default" when empty
	Type       string            // job type name: selects the handler
	Payload    []byte            // encoded arguments
	MaxRetries int               // retries after the first attempt; 0 means none
	Timeout    time.Duration     // per-attempt handler deadline; 0 means the type's or worker's
	CreatedAt  time.Time         // when the job was first enqueued
	Backoff    *Backoff          // per-job retry schedule; nil means the type's policy
	Headers    map[string]string // metadata, e.g. W3C trace context
	LastError  string            // the error of the last failed attempt

	Delay   time.Duration // ready this long after the server's now (enqueue only)
	At      time.Time     // ready at this instant; wins over Delay when set (enqueue only)
	ReadyAt time.Time     // the ready time stored by the broker
}

// DefaultQueue is the queue of jobs that name none.
const DefaultQueue = "default"

// Backoff is a per-job exponential retry schedule, stored with the job. It
// overrides the type's retry policy; see retry.Exponential for the formula.
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// wire is the stored body: short keys keep Redis memory per job small. A
// JSON payload is spliced in byte for byte as "p", in front of the rest.
type wire struct {
	Payload    json.RawMessage   `json:"p,omitempty"` // decode only
	Type       string            `json:"t"`
	PayloadB   []byte            `json:"pb,omitempty"` // payloads that are not JSON, base64
	MaxRetries int               `json:"r,omitempty"`
	TimeoutMS  int64             `json:"to,omitempty"`
	CreatedMS  int64             `json:"c,omitempty"`
	Backoff    *wireBackoff      `json:"b,omitempty"`
	Headers    map[string]string `json:"h,omitempty"`
	LastError  string            `json:"e,omitempty"`
}

type wireBackoff struct {
	InitialMS  int64   `json:"i"`
	Multiplier float64 `json:"m"`
	MaxMS      int64   `json:"x"`
	Jitter     float64 `json:"j,omitempty"`
}

// MaxErrorLen caps the last error kept in an envelope, in bytes.
const MaxErrorLen = 16 << 10

// MarshalBinary encodes the stored body of e (without ID, Queue and the
// scheduling fields). A JSON payload is kept byte for byte (white space
// around it aside).
func (e *Envelope) MarshalBinary() ([]byte, error) {
	w := wire{
		Type:       e.Type,
		MaxRetries: e.MaxRetries,
		TimeoutMS:  e.Timeout.Milliseconds(),
		Headers:    e.Headers,
		LastError:  truncate(e.LastError, MaxErrorLen),
	}
	if !e.CreatedAt.IsZero() {
		w.CreatedMS = e.CreatedAt.UnixMilli()
	}
	raw := len(e.Payload) > 0 && json.Valid(e.Payload)
	if len(e.Payload) > 0 && !raw {
		w.PayloadB = e.Payload
	}
	if b := e.Backoff; b != nil {
		w.Backoff = &wireBackoff{InitialMS: b.Initial.Milliseconds(), Multiplier: b.Multiplier, MaxMS: b.Max.Milliseconds(), Jitter: b.Jitter}
	}
	var buf bytes.Buffer
	if raw {
		buf.Grow(len(e.Payload) + 64)
		buf.WriteString(`{"p":`)
		buf.Write(bytes.TrimSpace(e.Payload))
		buf.WriteByte(',')
	}
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	start := buf.Len()
	if err := enc.Encode(&w); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if raw {
		// Drop the "{" that opened the rest: the payload's object already did.
		out = append(out[:start], out[start+1:]...)
	}
	return out, nil
}

// ErrCorrupt is wrapped by [Decode] errors: the stored body is not an
// envelope.
var ErrCorrupt = errors.New("corrupt envelope")

// Decode parses a stored body into an envelope. ID and Queue are left empty
// for the caller to fill in. It never panics; bad input gives an error
// wrapping ErrCorrupt.
func Decode(data []byte) (*Envelope, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("job: %w: %v", ErrCorrupt, err)
	}
	if err := ValidateType(w.Type); err != nil {
		return nil, fmt.Errorf("job: %w: type: %v", ErrCorrupt, err)
	}
	if w.MaxRetries < 0 || w.TimeoutMS < 0 {
		return nil, fmt.Errorf("job: %w: negative max retries or timeout", ErrCorrupt)
	}
	e := &Envelope{
		Type:       w.Type,
		MaxRetries: w.MaxRetries,
		Timeout:    time.Duration(w.TimeoutMS) * time.Millisecond,
		Headers:    w.Headers,
		LastError:  w.LastError,
	}
	if w.CreatedMS != 0 {
		e.CreatedAt = time.UnixMilli(w.CreatedMS)
	}
	switch {
	case len(w.Payload) > 0:
		e.Payload = []byte(w.Payload)
	case len(w.PayloadB) > 0:
		e.Payload = w.PayloadB
	}
	if b := w.Backoff; b != nil {
		e.Backoff = &Backoff{
			Initial:    time.Duration(b.InitialMS) * time.Millisecond,
			Multiplier: b.Multiplier,
			Max:        time.Duration(b.MaxMS) * time.Millisecond,
			Jitter:     b.Jitter,
		}
	}
	return e, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "… (truncated)"
	return s[:n-len(mark)] + mark
}
