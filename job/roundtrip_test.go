package job_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/job"
)

func roundTrip(t *testing.T, e *job.Envelope) *job.Envelope {
	t.Helper()
	body, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := job.Decode(body)
	if err != nil {
		t.Fatalf("Decode(%q): %v", body, err)
	}
	return got
}

func TestPayloadKeptByteForByte(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`{"n":1}`,
		`{ "n": 1 }`,                             // valid JSON with whitespace
		"{\"n\":1}\n",                            // trailing newline
		`{"s":"<script>a && b</script>"}`,        // HTML characters
		"\"line\u2028separator\u2029\"",          // U+2028, U+2029
		"\"\xff\xfe\"",                           // invalid UTF-8 inside a JSON string
		"\x00\x01binary\xff",                     // not JSON
		`redis.call('FLUSHALL') -- ]]`,           // Lua-looking text
		"*1\r\n$8\r\nFLUSHALL\r\n",               // RESP-looking text
		`{"t":"other.type","p":{"x":1},"r":999}`, // envelope-looking JSON
	} {
		got := roundTrip(t, &job.Envelope{Type: "t", Payload: []byte(p)})
		if !bytes.Equal(got.Payload, []byte(p)) {
			t.Errorf("payload %q came back as %q", p, got.Payload)
		}
	}
}

func TestDecodeRejectsOutOfRangeValues(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"t":"x","to":9223372036855}`, // overflows time.Duration
		`{"t":"x","to":-1}`,
		`{"t":"x","r":-1}`,
		`{"t":"x","b":{"i":0,"m":2,"x":10}}`,
		`{"t":"x","b":{"i":10,"m":0.5,"x":10}}`,
		`{"t":"x","b":{"i":10,"m":2,"x":5}}`,
		`{"t":"x","b":{"i":10,"m":2,"x":10,"j":1}}`,
		`{"t":"x","b":{"i":10,"m":2,"x":9223372036855}}`,
		`{"t":"bad type"}`,
		`{"t":""}`,
		`[]`,
		``,
	} {
		if e, err := job.Decode([]byte(body)); !errors.Is(err, job.ErrCorrupt) {
			t.Errorf("Decode(%s) = %+v, %v; want an error wrapping ErrCorrupt", body, e, err)
		}
	}
}

func TestSubMillisecondDurationsStayPositive(t *testing.T) {
	t.Parallel()
	got := roundTrip(t, &job.Envelope{
		Type:    "t",
		Timeout: 500 * time.Microsecond,
		Backoff: &job.Backoff{Initial: 300 * time.Microsecond, Multiplier: 2, Max: 1500 * time.Microsecond},
	})
	if got.Timeout != time.Millisecond {
		t.Errorf("Timeout 500µs came back as %v, want 1ms", got.Timeout)
	}
	if b := got.Backoff; b.Initial != time.Millisecond || b.Max != 2*time.Millisecond {
		t.Errorf("Backoff came back as %+v, want Initial 1ms, Max 2ms", b)
	}
}

func TestLongLastErrorIsCutOnARuneBoundary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", job.MaxErrorLen) // 2 bytes a rune
	got := roundTrip(t, &job.Envelope{Type: "t", LastError: long})
	if !utf8.ValidString(got.LastError) || len(got.LastError) > job.MaxErrorLen || !strings.HasSuffix(got.LastError, "(truncated)") {
		t.Fatalf("LastError of %d bytes came back as %d bytes, valid UTF-8 %v, ending %q",
			len(long), len(got.LastError), utf8.ValidString(got.LastError), got.LastError[len(got.LastError)-20:])
	}
	if strings.ContainsRune(got.LastError, utf8.RuneError) {
		t.Fatal("LastError contains U+FFFD: a rune was cut in half")
	}
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()
	ok := job.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 0.1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Max = time.Millisecond
	if err := bad.Validate(); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("Validate(%+v) = %v, want ErrInvalid", bad, err)
	}
}
