package job

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/rawjson"
	"github.com/delayq/delayq/internal/retrycheck"
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

	// Unique refuses a second job with the same id while this one is
	// pending, and for UniqueFor after it succeeded (or died, with
	// UniqueDead); with no ID the broker derives one from Type and
	// Payload (see [Unique]). Stored, so that the worker remembers the job
	// when it ends.
	Unique     bool
	UniqueFor  time.Duration // how long the id is remembered after the job ended; 0: only while pending
	UniqueDead bool          // a dead ending is remembered too

	// Replace (enqueue only): a pending scheduled job with the id gets this
	// envelope and ready time instead; broker.ErrInProgress when a worker
	// holds it.
	Replace bool

	// Debounce (enqueue only), a window over 0: the job's id is its
	// debounce key. While a job with the id is scheduled and not yet due
	// (inside its window), the enqueue replaces its envelope and moves
	// its ready time to Debounce after the server's now, atomically; a
	// job with the id that is due but not claimed gets the envelope and
	// keeps its ready time; one a worker holds is not replaced
	// (broker.ErrInProgress). With no pending job the enqueue stores a new
	// one, ready Debounce from now. Needs an ID; refused with Unique,
	// Replace, In/At (Delay, At) and in a batch or a chain. See [Debounce].
	Debounce time.Duration

	// ExpireAt: a job not started by then never runs; the claim that finds
	// it expired dead-letters it with reason "expired", or drops it and
	// counts it when DropExpired is set. Zero means never.
	ExpireAt    time.Time
	DropExpired bool

	// Snoozes counts the times the job snoozed (retry.Snooze), up to 100.
	Snoozes int

	// Batch is the id of the batch the job is a member of, "" for none.
	// Broker.AddToBatch sets it; the worker reports the member's ending
	// (success or dead) to the batch. See docs/batches.md.
	Batch string

	// Retain is how long the job is kept after it succeeded, with its
	// result, attempts and timings (job.Retain); 0 deletes it at the ack.
	Retain time.Duration

	// Next are the jobs enqueued when this one succeeds (job.Then), in
	// order; see docs/batches.md, "Chains".
	Next []*Envelope

	// Key is the job's flow-control key ([Key], [KeyFrom]): a customer,
	// a recipient, an account. A queue's per-key concurrency cap
	// (broker.Broker.SetKeyConcurrency) counts the running jobs of each
	// key. "" for none. See [Key].
	Key string
}

// Backoff is a per-job exponential retry schedule, stored with the job. It
// overrides the type's retry policy; see retry.Exponential for the formula.
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// validate reports whether b is a usable schedule, by the rules of
// retry.Exponential. Errors wrap ErrInvalid.
func (b *Backoff) validate() error {
	if err := retrycheck.Exponential(b.Initial, b.Multiplier, b.Max, b.Jitter); err != nil {
		return fmt.Errorf("job: %w: %v", ErrInvalid, err)
	}
	return nil
}

// wire is the stored body: short keys keep Redis memory per job small.
//
// It opens with a header of the fields that the scripts decide on (the
// claim's pause, concurrency caps and rate limits, and what an expired job
// leaves behind), in a fixed order and with values that need no escaping,
// so that a script reads them with a string match at the start of the body
// and never decodes the user's payload: a payload cjson cannot decode
// (nested deeper than its limit, an invalid escape) must not hide the type
// from those checks. The header is "t" (the type, whose characters
// the type-name check limits to ones JSON needs no escape for), then "u" and "ud"
// when set, then "k" (the key, whose characters the key check limits the same
// way) when set; a field added for the scripts goes there too. A JSON payload
// follows, spliced in byte for byte as "p", then the rest. Fields at their
// defaults are left out; for "r" the default is naming.DefaultMaxRetries (so
// "r":0 is written out), for the others it is zero.
//
// Bodies stored before the header (payload first: {"p":...,"t":...}) decode
// the same; the scripts read their type by decoding them (type_of in
// broker/scripts/prelude.lua).
type wire struct {
	wireHead
	Payload json.RawMessage `json:"p,omitempty"` // decode only
	wireTail
}

// wireHead is the header of the body: the fields the scripts read.
type wireHead struct {
	Type       string `json:"t"`
	UniqueMS   *int64 `json:"u,omitempty"`  // present when Unique: UniqueFor in ms
	UniqueDead bool   `json:"ud,omitempty"` // with "u"
	Key        string `json:"k,omitempty"`  // the flow-control key (the key check: no escapes)
}

// wireTail is the body after the header and the payload.
type wireTail struct {
	PayloadB   []byte            `json:"pb,omitempty"` // payloads that are not JSON, base64
	MaxRetries *int              `json:"r,omitempty"`  // nil = naming.DefaultMaxRetries
	TimeoutMS  int64             `json:"to,omitempty"`
	CreatedMS  int64             `json:"c,omitempty"`
	Backoff    *wireBackoff      `json:"b,omitempty"`
	Headers    map[string]string `json:"h,omitempty"`
	LastError  string            `json:"e,omitempty"`
	Snoozes    int               `json:"sz,omitempty"`
	Batch      string            `json:"bt,omitempty"`
	RetainMS   int64             `json:"rt,omitempty"`
	Next       []wireNext        `json:"n,omitempty"`
	// Expire must stay the last field: the claim script reads it from the
	// end of the body ("x":"<ms>" or "<ms>d" to drop) without parsing it.
	Expire string `json:"x,omitempty"`
}

type wireBackoff struct {
	InitialMS  int64   `json:"i"`
	Multiplier float64 `json:"m"`
	MaxMS      int64   `json:"x"`
	Jitter     float64 `json:"j,omitempty"`
}

// maxErrorLen caps the last error kept in an envelope, in bytes.
const maxErrorLen = 16 << 10

// MarshalBinary encodes the stored body of e (without ID, Queue and the
// scheduling fields). The payload is kept byte for byte: it is embedded as
// JSON only when it already is compact JSON, and stored as base64 otherwise.
// Durations are stored in whole milliseconds, rounded up, so a positive
// timeout or backoff stays positive.
func (e *Envelope) MarshalBinary() ([]byte, error) {
	w, raw := e.wire()
	if len(e.Next) > 0 {
		next, err := marshalNext(e.Next)
		if err != nil {
			return nil, err
		}
		w.Next = next
	} else if out, ok := w.appendCommon(nil, e.Payload, raw); ok {
		return out, nil
	}
	return w.encode(e.Payload, raw)
}

// wire is the stored form of e but its next jobs (job.Then), and whether
// its payload is spliced in as raw JSON.
func (e *Envelope) wire() (w wire, raw bool) {
	w = wire{
		wireHead: wireHead{Type: e.Type, Key: e.Key},
		wireTail: wireTail{
			TimeoutMS: ceilMS(e.Timeout),
			Headers:   e.Headers,
			LastError: truncate(e.LastError, maxErrorLen),
			Snoozes:   e.Snoozes,
			Batch:     e.Batch,
			RetainMS:  ceilMS(e.Retain),
		},
	}
	if e.MaxRetries != naming.DefaultMaxRetries {
		r := e.MaxRetries
		w.MaxRetries = &r
	}
	if !e.CreatedAt.IsZero() {
		w.CreatedMS = e.CreatedAt.UnixMilli()
	}
	if e.Unique {
		u := ceilMS(e.UniqueFor)
		w.UniqueMS, w.UniqueDead = &u, e.UniqueDead
	}
	if !e.ExpireAt.IsZero() {
		w.Expire = strconv.FormatInt(expireMS(e.ExpireAt), 10)
		if e.DropExpired {
			w.Expire += "d"
		}
	}
	raw = len(e.Payload) > 0 && rawjson.IsCompact(e.Payload)
	if len(e.Payload) > 0 && !raw {
		w.PayloadB = e.Payload
	}
	if b := e.Backoff; b != nil {
		w.Backoff = &wireBackoff{InitialMS: ceilMS(b.Initial), Multiplier: b.Multiplier, MaxMS: ceilMS(b.Max), Jitter: b.Jitter}
	}
	return w, raw
}

// encode is the body of w with encoding/json: the header, a raw JSON
// payload spliced in after it, then the rest.
func (w *wire) encode(payload []byte, raw bool) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(payload) + 64)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&w.wireHead); err != nil {
		return nil, err
	}
	// {"t":...}\n: drop the closing brace and the newline.
	buf.Truncate(buf.Len() - 2)
	if raw {
		buf.WriteString(`,"p":`)
		buf.Write(payload)
	}
	start := buf.Len()
	if err := enc.Encode(&w.wireTail); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out)-start == 2 {
		// {}: nothing after the header and payload.
		return append(out[:start], '}'), nil
	}
	// The tail's "{" becomes the "," that joins it on.
	out[start] = ','
	return out, nil
}

// wireFields is the number of fields of the header and the tail of wire
// that appendCommon knows. A field added to either turns appendCommon off
// (and fails a test) until it writes the new field too.
const wireFields = 16

var wireKnown = reflect.TypeFor[wireHead]().NumField()+reflect.TypeFor[wireTail]().NumField() == wireFields

// appendCommon appends the body of w as encode writes it for the bodies
// most jobs have: no backoff, no headers, no next jobs, strings of
// printable ASCII without quotes or backslashes. It reports false for
// anything else, and MarshalBinary then uses encoding/json: the output is
// the same either way (a test compares them), this way costs no reflection
// and one allocation.
func (w *wire) appendCommon(out, payload []byte, raw bool) ([]byte, bool) {
	if !wireKnown || w.Backoff != nil || len(w.Headers) > 0 || len(w.Next) > 0 || !plainASCII(w.Type) || !plainASCII(w.Key) || !plainASCII(w.LastError) ||
		!plainASCII(w.Batch) || !plainASCII(w.Expire) {
		return nil, false
	}
	n := 64 + len(w.Type) + len(w.Key) + len(w.LastError) + len(w.Batch) + len(w.Expire)
	if raw {
		n += len(payload)
	} else {
		n += base64.StdEncoding.EncodedLen(len(w.PayloadB))
	}
	out = slices.Grow(out, n)
	out = append(out, `{"t":"`...)
	out = append(out, w.Type...)
	out = append(out, '"')
	if w.UniqueMS != nil {
		out = strconv.AppendInt(append(out, `,"u":`...), *w.UniqueMS, 10)
	}
	if w.UniqueDead {
		out = append(out, `,"ud":true`...)
	}
	if w.Key != "" {
		out = append(append(append(out, `,"k":"`...), w.Key...), '"')
	}
	if raw {
		out = append(out, `,"p":`...)
		out = append(out, payload...)
	}
	if len(w.PayloadB) > 0 {
		out = append(out, `,"pb":"`...)
		out = base64.StdEncoding.AppendEncode(out, w.PayloadB)
		out = append(out, '"')
	}
	if w.MaxRetries != nil {
		out = strconv.AppendInt(append(out, `,"r":`...), int64(*w.MaxRetries), 10)
	}
	if w.TimeoutMS != 0 {
		out = strconv.AppendInt(append(out, `,"to":`...), w.TimeoutMS, 10)
	}
	if w.CreatedMS != 0 {
		out = strconv.AppendInt(append(out, `,"c":`...), w.CreatedMS, 10)
	}
	if w.LastError != "" {
		out = append(append(append(out, `,"e":"`...), w.LastError...), '"')
	}
	if w.Snoozes != 0 {
		out = strconv.AppendInt(append(out, `,"sz":`...), int64(w.Snoozes), 10)
	}
	if w.Batch != "" {
		out = append(append(append(out, `,"bt":"`...), w.Batch...), '"')
	}
	if w.RetainMS != 0 {
		out = strconv.AppendInt(append(out, `,"rt":`...), w.RetainMS, 10)
	}
	if w.Expire != "" {
		out = append(append(append(out, `,"x":"`...), w.Expire...), '"')
	}
	return append(out, '}'), true
}

// plainASCII reports whether encoding/json writes s as it is between its
// quotes: printable ASCII without '"' and '\\'.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// expireMS is the expiry t in whole ms, rounded down: a job expires once the
// server's ms clock reaches it, so never after t.
func expireMS(t time.Time) int64 {
	return max(t.UnixMilli(), 1)
}

// ceilMS returns d in milliseconds, rounded up, at most maxDurationMS.
func ceilMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 && ms < maxDurationMS {
		ms++
	}
	return ms
}

// ErrCorrupt is wrapped by [Decode] errors: the stored body is not an
// envelope.
var ErrCorrupt = errors.New("corrupt envelope")

// Decode parses a stored body into an envelope. ID and Queue are left empty
// for the caller to fill in. It never panics; bad input gives an error
// wrapping ErrCorrupt. The envelope's Payload may share data's memory (its
// capacity ends with the payload, so an append copies): data must not be
// changed afterwards.
func Decode(data []byte) (*Envelope, error) {
	var w wire
	if !w.decodeCommon(data) {
		slow := new(wire) // on the heap only on this path
		if err := json.Unmarshal(data, slow); err != nil {
			return nil, fmt.Errorf("job: %w: %v", ErrCorrupt, err)
		}
		w = *slow
	}
	if err := naming.Type(w.Type); err != nil {
		return nil, fmt.Errorf("job: %w: type: %v", ErrCorrupt, err)
	}
	if t, ok := headerTypeBytes(data); ok && string(t) != w.Type {
		// The scripts would check it as one type and the worker run it as
		// another: "t" given twice, by another program.
		return nil, fmt.Errorf("job: %w: its header names type %q, its body type %q", ErrCorrupt, t, w.Type)
	}
	maxRetries := naming.DefaultMaxRetries
	if w.MaxRetries != nil {
		maxRetries = *w.MaxRetries
	}
	if maxRetries < 0 || w.TimeoutMS < 0 || w.Snoozes < 0 || w.RetainMS < 0 {
		return nil, fmt.Errorf("job: %w: negative max retries, timeout or retention", ErrCorrupt)
	}
	if w.TimeoutMS > maxDurationMS || w.RetainMS > maxDurationMS {
		return nil, fmt.Errorf("job: %w: timeout of %d ms or retention of %d ms is out of range", ErrCorrupt, w.TimeoutMS, w.RetainMS)
	}
	e := &Envelope{
		Type:       w.Type,
		MaxRetries: maxRetries,
		Timeout:    time.Duration(w.TimeoutMS) * time.Millisecond,
		Headers:    w.Headers,
		LastError:  w.LastError,
		Snoozes:    w.Snoozes,
		Batch:      w.Batch,
		Retain:     time.Duration(w.RetainMS) * time.Millisecond,
	}
	if w.Key != "" {
		if err := naming.Key(w.Key); err != nil {
			return nil, fmt.Errorf("job: %w: key: %v", ErrCorrupt, err)
		}
		e.Key = w.Key
	}
	if w.Batch != "" && naming.BatchID(w.Batch) != nil {
		return nil, fmt.Errorf("job: %w: batch id %q is not valid", ErrCorrupt, w.Batch)
	}
	if w.CreatedMS != 0 {
		e.CreatedAt = time.UnixMilli(w.CreatedMS)
	}
	if w.UniqueMS != nil {
		if *w.UniqueMS < 0 || *w.UniqueMS > maxDurationMS {
			return nil, fmt.Errorf("job: %w: uniqueness window of %d ms is out of range", ErrCorrupt, *w.UniqueMS)
		}
		e.Unique, e.UniqueFor, e.UniqueDead = true, time.Duration(*w.UniqueMS)*time.Millisecond, w.UniqueDead
	}
	if w.Expire != "" {
		ms, drop := strings.CutSuffix(w.Expire, "d")
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("job: %w: expiry %q is not a time in ms", ErrCorrupt, w.Expire)
		}
		e.ExpireAt, e.DropExpired = time.UnixMilli(v), drop
	}
	next, err := decodeNext(w.Next)
	if err != nil {
		return nil, err
	}
	e.Next = next
	switch {
	case len(w.Payload) > 0:
		e.Payload = []byte(w.Payload)
	case len(w.PayloadB) > 0:
		e.Payload = w.PayloadB
	}
	if b := w.Backoff; b != nil {
		if b.InitialMS <= 0 || b.InitialMS > maxDurationMS || b.MaxMS < b.InitialMS || b.MaxMS > maxDurationMS ||
			!(b.Multiplier >= 1) || !(b.Jitter >= 0 && b.Jitter < 1) {
			return nil, fmt.Errorf("job: %w: backoff %+v is out of range", ErrCorrupt, *b)
		}
		e.Backoff = &Backoff{
			Initial:    time.Duration(b.InitialMS) * time.Millisecond,
			Multiplier: b.Multiplier,
			Max:        time.Duration(b.MaxMS) * time.Millisecond,
			Jitter:     b.Jitter,
		}
	}
	return e, nil
}

// headerType returns the type named in the header of a stored body, as the
// scripts read it (type_of in broker/scripts/prelude.lua): the body opens
// with {"t":" and a type of the characters the type-name check allows, closed by
// a quote and followed by a comma or the closing brace. ok is false for a
// body without such a header (stored before the header layout, with its
// payload first, or written by another program); the scripts then decode
// the whole body.
func headerType(body []byte) (typ string, ok bool) {
	t, ok := headerTypeBytes(body)
	return string(t), ok
}

// headerTypeBytes is headerType without a copy: the type's bytes in body.
func headerTypeBytes(body []byte) ([]byte, bool) {
	const open = `{"t":"`
	if !bytes.HasPrefix(body, []byte(open)) {
		return nil, false
	}
	i := len(open)
	for i < len(body) && typeChar(body[i]) {
		i++
	}
	if i == len(open) || i+1 >= len(body) || body[i] != '"' || (body[i+1] != ',' && body[i+1] != '}') {
		return nil, false
	}
	return body[len(open):i], true
}

// typeChar reports whether c may appear in a type name (the type-name check).
func typeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
}

// maxDurationMS is the longest duration in milliseconds that fits in a
// time.Duration.
const maxDurationMS = math.MaxInt64 / int64(time.Millisecond)

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "… (truncated)"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// decodeCommon parses the bodies MarshalBinary writes for most jobs — a
// JSON payload, a plain ASCII type and integer fields — without reflection,
// at a third of encoding/json's allocations. It reports false for anything
// else (other keys, escapes, white space, duplicate keys, invalid JSON),
// and Decode then uses encoding/json, so both paths give the same result
// wherever this one answers.
func (w *wire) decodeCommon(data []byte) bool {
	n := len(data)
	if n < 2 || data[0] != '{' || data[n-1] != '}' {
		return false
	}
	var seen [5]bool // p, t, r, to, c
	i := 1
	for {
		// key
		if i >= n || data[i] != '"' {
			return false
		}
		end := i + 1
		for end < n && data[end] >= 'a' && data[end] <= 'z' {
			end++
		}
		if end+1 >= n || data[end] != '"' || data[end+1] != ':' {
			return false
		}
		key := data[i+1 : end]
		i = end + 2
		var slot int
		switch string(key) {
		case "p":
			slot = 0
		case "t":
			slot = 1
		case "r":
			slot = 2
		case "to":
			slot = 3
		case "c":
			slot = 4
		default:
			return false
		}
		if seen[slot] {
			return false
		}
		seen[slot] = true
		// value
		switch slot {
		case 0:
			j, ok := skipJSONValue(data, i)
			// White space around the value is left to encoding/json, which
			// drops it from a RawMessage.
			if !ok || isJSONSpace(data[i]) || isJSONSpace(data[j-1]) || !json.Valid(data[i:j]) {
				return false
			}
			w.Payload = json.RawMessage(data[i:j:j]) // shares data (see Decode)
			i = j
		case 1:
			if i >= n || data[i] != '"' {
				return false
			}
			j := i + 1
			for j < n && data[j] != '"' {
				if c := data[j]; c < 0x20 || c >= 0x7f || c == '\\' {
					return false
				}
				j++
			}
			if j >= n {
				return false
			}
			w.Type = typeName(data[i+1 : j])
			i = j + 1
		default:
			v, j, ok := parseJSONInt(data, i)
			if !ok {
				return false
			}
			switch slot {
			case 2:
				r := int(v)
				w.MaxRetries = &r
			case 3:
				w.TimeoutMS = v
			case 4:
				w.CreatedMS = v
			}
			i = j
		}
		if i >= n {
			return false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return i == n-1
		default:
			return false
		}
	}
}

// skipJSONValue returns the end of the JSON value that starts at data[i],
// assuming it is well formed (the caller checks with json.Valid).
func skipJSONValue(data []byte, i int) (int, bool) {
	n := len(data)
	if i >= n {
		return 0, false
	}
	depth := 0
	for j := i; j < n; j++ {
		switch c := data[j]; c {
		case '"':
			j++
			for j < n && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= n {
				return 0, false
			}
			if depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j, j > i // end of a scalar, or a stray closer
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return 0, false
}

// parseJSONInt parses a JSON integer of at most 18 digits at data[i].
func parseJSONInt(data []byte, i int) (v int64, end int, ok bool) {
	n := len(data)
	neg := i < n && data[i] == '-'
	if neg {
		i++
	}
	start := i
	for i < n && data[i] >= '0' && data[i] <= '9' {
		v = v*10 + int64(data[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && data[start] == '0') {
		return 0, 0, false
	}
	if neg {
		v = -v
	}
	return v, i, true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
