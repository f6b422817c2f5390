package job_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/retrycheck"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/retry"
)

// Seed corpora live in testdata/fuzz/<Target>; .ci/run fuzzes each target
// for 20 s. Run one locally with
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 20s ./job

// sameEnvelope reports how a and b differ in their stored fields, or "".
func sameEnvelope(a, b *job.Envelope) string {
	switch {
	case a.Type != b.Type:
		return "Type"
	case !bytes.Equal(a.Payload, b.Payload):
		return "Payload"
	case a.MaxRetries != b.MaxRetries:
		return "MaxRetries"
	case a.Timeout != b.Timeout:
		return "Timeout"
	case !a.CreatedAt.Equal(b.CreatedAt):
		return "CreatedAt"
	case (a.Backoff == nil) != (b.Backoff == nil) || a.Backoff != nil && *a.Backoff != *b.Backoff:
		return "Backoff"
	case !maps.Equal(a.Headers, b.Headers):
		return "Headers"
	case a.LastError != b.LastError:
		return "LastError"
	}
	return ""
}

// FuzzDecode: Decode never panics; it either fails with ErrCorrupt or
// returns an envelope that MarshalBinary stores and Decode reads back the
// same, so a stored job survives being retried (re-encoded) any number of
// times.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"t":"sms.send","p":{"to":"+15550100"},"r":8,"to":5000,"c":1700000000000,"h":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"e":"boom"}`,
		`{"t":"x","pb":"AAEC/w==","b":{"i":1000,"m":2,"x":60000,"j":0.2}}`,
		`{"t":"x","p":null}`,
		`{"t":"x","p":"","pb":"AA=="}`,
		`{"t":"x","to":9223372036854}`,
		`{"t":"x","c":-62135596800000}`,
		`{"t":"x","h":{}}`,
		`{"t":"x","e":"\ud800"}`,
		"\xde\xad\xbe\xef",
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := job.Decode(data)
		if err != nil {
			if !errors.Is(err, job.ErrCorrupt) || e != nil {
				t.Fatalf("Decode(%q) = %v, %v; want nil and an error wrapping ErrCorrupt", data, e, err)
			}
			return
		}
		if err := naming.Type(e.Type); err != nil {
			t.Fatalf("decoded type %q is invalid: %v", e.Type, err)
		}
		if e.MaxRetries < 0 || e.Timeout < 0 {
			t.Fatalf("decoded negative MaxRetries %d or Timeout %v", e.MaxRetries, e.Timeout)
		}
		if e.Backoff != nil {
			if err := e.Backoff.Validate(); err != nil {
				t.Fatalf("decoded backoff the worker cannot use: %v", err)
			}
		}
		body, err := e.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary of decoded %+v: %v", e, err)
		}
		again, err := job.Decode(body)
		if err != nil {
			t.Fatalf("Decode(MarshalBinary(Decode(%q))) = %v", data, err)
		}
		if len(e.LastError) > job.MaxErrorLen {
			if len(again.LastError) > job.MaxErrorLen || !utf8.ValidString(again.LastError) {
				t.Fatalf("an over-long last error was not truncated cleanly")
			}
			again.LastError = e.LastError
		}
		if len(e.Headers) == 0 && len(again.Headers) == 0 {
			again.Headers = e.Headers
		}
		if diff := sameEnvelope(e, again); diff != "" {
			t.Fatalf("%s changed on re-encoding %q: %+v became %+v", diff, data, e, again)
		}
	})
}

type codecArgs struct {
	S string            `json:"s"`
	B []byte            `json:"b"`
	M map[string]string `json:"m,omitempty"`
}

// FuzzPayload: payload bytes, whatever they are (compact JSON, JSON with
// whitespace or HTML characters, binary), come back from the stored envelope
// byte for byte; and typed arguments encoded by the JSON codec decode back to
// what the codec itself decodes.
func FuzzPayload(f *testing.F) {
	f.Add([]byte(`{"n":1}`), "plain")
	f.Add([]byte(`{ "s": "<b>&</b>" }`), "<script>redis.call('FLUSHALL')</script>")
	f.Add([]byte("\x00\xff\xfe"), "\xff\xfe")
	f.Add([]byte("\"\u2028\""), "\u2028\u2029")
	f.Add([]byte("*1\r\n$8\r\nFLUSHALL\r\n"), "]]; redis.call('DEL', KEYS[1]) --")
	f.Add([]byte(nil), "")
	typ := job.New[codecArgs]("fuzz.payload")
	f.Fuzz(func(t *testing.T, payload []byte, s string) {
		e := &job.Envelope{Type: "fuzz.raw", Payload: payload}
		body, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := job.Decode(body)
		if err != nil {
			t.Fatalf("Decode of a stored raw payload %q: %v", payload, err)
		}
		if !bytes.Equal(got.Payload, payload) {
			t.Fatalf("raw payload %q came back as %q", payload, got.Payload)
		}

		args := codecArgs{S: s, B: payload, M: map[string]string{s: s}}
		env, err := typ.Envelope(args)
		if err != nil {
			t.Fatal(err)
		}
		body, err = env.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err = job.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Payload, env.Payload) {
			t.Fatalf("codec output %q came back as %q", env.Payload, got.Payload)
		}
		var want, have codecArgs
		if err := json.Unmarshal(env.Payload, &want); err != nil {
			t.Fatal(err)
		}
		if err := job.JSON().Unmarshal(got.Payload, &have); err != nil {
			t.Fatal(err)
		}
		if have.S != want.S || !bytes.Equal(have.B, payload) || !maps.Equal(have.M, want.M) {
			t.Fatalf("arguments %+v came back as %+v", want, have)
		}
		if utf8.ValidString(s) && have.S != s {
			t.Fatalf("valid UTF-8 string %q came back as %q", s, have.S)
		}
	})
}

// FuzzValidate: the name validators never panic, refuse with ErrInvalid,
// and accept only names that cannot leave their key: no braces (the hash
// tag), no control characters, valid UTF-8, within the length limits; a
// valid queue name is also a URL path segment that needs no escaping and is
// not "." or "..".
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"default", "order-42", "a{b}", "}", "{", "a b", "sms.send", "a:b/c", "\x00", "\xff", "é", "q*", "q?", "[q]", "\u2028", ".", "..", "...", "a/b", "%2e", strings.Repeat("a", 257)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		token := func(extra string) bool {
			for _, r := range s {
				ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-"+extra, r)
				if !ok {
					return false
				}
			}
			return true
		}
		for _, v := range []struct {
			name  string
			err   error
			valid bool
		}{
			{"ValidateID", naming.ID(s), s != "" && len(s) <= naming.MaxIDLen && utf8.ValidString(s) &&
				!strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '{' || r == '}' })},
			{"ValidateQueue", naming.Queue(s), s != "" && len(s) <= naming.MaxQueueLen && token("") && s != "." && s != ".." &&
				url.PathEscape(s) == s},
			{"ValidateType", naming.Type(s), s != "" && len(s) <= naming.MaxTypeLen && token(":/")},
		} {
			if (v.err == nil) != v.valid {
				t.Fatalf("%s(%q) = %v, want valid = %v", v.name, s, v.err, v.valid)
			}
			if v.err != nil && (!errors.Is(v.err, job.ErrInvalid) || !strings.Contains(v.err.Error(), "job: invalid: ")) {
				t.Fatalf("%s(%q) = %v, want an error wrapping ErrInvalid", v.name, s, v.err)
			}
		}
	})
}

// FuzzOptions: every job option either refuses its value with ErrInvalid,
// changing nothing, or yields an envelope whose stored form reads back the
// same (durations rounded up to whole milliseconds).
func FuzzOptions(f *testing.F) {
	f.Add("order-42", "default", 3, int64(time.Second), int64(time.Minute), int64(0), "traceparent", "00-x", int64(time.Second), 2.0, int64(time.Hour), 0.2)
	f.Add("", "", -1, int64(-1), int64(-1), int64(1), "", "", int64(0), 0.5, int64(0), 1.0)
	f.Add("a{b}", "q q", 0, int64(1500), int64(0), int64(-62135596800000), "k", "\xff", int64(999), 1.0, int64(999), 0.0)
	f.Add("max", "q", math.MaxInt, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), "k", "v", int64(math.MaxInt64-1), 1.0, int64(math.MaxInt64), 0.999)
	f.Add("nan", "q", 1, int64(0), int64(0), int64(0), "k", "v", int64(time.Second), math.NaN(), int64(time.Hour), 0.1)
	f.Add("inf", "q", 1, int64(0), int64(0), int64(0), "k", "v", int64(time.Second), math.Inf(1), int64(time.Hour), math.NaN())
	typ := job.New[codecArgs]("fuzz.options")
	f.Fuzz(func(t *testing.T, id, queue string, maxRetries int, timeout, delay, atMS int64, hk, hv string, bInit int64, bMult float64, bMax int64, bJitter float64) {
		b := retry.Exponential{Initial: time.Duration(bInit), Multiplier: bMult, Max: time.Duration(bMax), Jitter: bJitter}
		opts := []job.Option{
			job.ID(id), job.Queue(queue), job.MaxRetries(maxRetries), job.Timeout(time.Duration(timeout)),
			job.In(time.Duration(delay)), job.Header(hk, hv), job.WithBackoff(b),
		}
		at := time.UnixMilli(atMS)
		if atMS != 0 {
			opts = append(opts, job.At(at))
		}
		valid := naming.ID(id) == nil && naming.Queue(queue) == nil && maxRetries >= 0 &&
			timeout >= 0 && delay >= 0 && job.ValidateHeader(hk, hv) == nil && retrycheck.Exponential(b.Initial, b.Multiplier, b.Max, b.Jitter) == nil && (atMS == 0 || !at.IsZero())
		env, err := typ.Envelope(codecArgs{S: id}, opts...)
		if (err == nil) != valid {
			t.Fatalf("Envelope with %+v: error %v, want valid = %v", b, err, valid)
		}
		if err != nil {
			if !errors.Is(err, job.ErrInvalid) || env != nil {
				t.Fatalf("refused with %v and envelope %+v; want ErrInvalid and no envelope", err, env)
			}
			return
		}
		if env.ID != id || env.Queue != queue || env.MaxRetries != maxRetries || env.Headers[hk] != hv {
			t.Fatalf("envelope %+v does not carry the options", env)
		}
		if atMS != 0 && (!env.At.Equal(at) || env.Delay != 0) || atMS == 0 && env.Delay != time.Duration(delay) {
			t.Fatalf("envelope At %v Delay %v; want At %v or Delay %v", env.At, env.Delay, at, delay)
		}
		body, err := env.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary: %v", err)
		}
		got, err := job.Decode(body)
		if err != nil {
			t.Fatalf("Decode of a valid envelope: %v", err)
		}
		ceil := func(d time.Duration) time.Duration {
			r := d.Truncate(time.Millisecond)
			if r != d && r <= math.MaxInt64-time.Millisecond {
				r += time.Millisecond
			}
			return r
		}
		want := *env
		want.Timeout = ceil(env.Timeout)
		want.Backoff = &job.Backoff{Initial: ceil(b.Initial), Multiplier: b.Multiplier, Max: ceil(b.Max), Jitter: b.Jitter}
		if diff := sameEnvelope(&want, got); diff != "" {
			t.Fatalf("%s changed in storage: %+v became %+v", diff, want, got)
		}
	})
}
