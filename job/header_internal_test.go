package job

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The scripts read a job's type, and its uniqueness window, from the start
// of the stored body, never from the payload: whatever the payload holds
// (nested deeper than cjson decodes, a lone surrogate, text that looks like
// an envelope), the header comes first and names the job's own type.
func TestHeaderComesBeforeThePayload(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 1500) + strings.Repeat("]", 1500)
	for _, tc := range []struct {
		env  *Envelope
		head string
	}{
		{&Envelope{Type: "sms.send", Payload: []byte(`{"to":"+1"}`)}, `{"t":"sms.send","p":{"to":"+1"}`},
		{&Envelope{Type: "deep", Payload: []byte(deep)}, `{"t":"deep","p":[[[`},
		{&Envelope{Type: "lone", Payload: []byte(`{"x":"\ud800"}`)}, `{"t":"lone","p":{"x":"\ud800"}`},
		{&Envelope{Type: "mimic", Payload: []byte(`{"t":"other","u":1}`)}, `{"t":"mimic","p":{"t":"other","u":1}`},
		{&Envelope{Type: "bin", Payload: []byte{0, 1, 2}}, `{"t":"bin","pb":"AAEC"`},
		{&Envelope{Type: "none"}, `{"t":"none","r":0}`},
		{&Envelope{Type: "u", Payload: []byte(`1`), Unique: true, UniqueFor: time.Minute, UniqueDead: true}, `{"t":"u","u":60000,"ud":true,"p":1`},
		{&Envelope{Type: "u0", Unique: true}, `{"t":"u0","u":0,"r":0}`},
		// encoding/json's path (headers, backoff) writes the same header.
		{&Envelope{Type: "a:b/c-d_e.f", Payload: []byte(`{}`), Unique: true, UniqueFor: time.Second, Headers: map[string]string{"k": "v"}},
			`{"t":"a:b/c-d_e.f","u":1000,"p":{},"r":0,"h":{"k":"v"}}`},
		{&Envelope{Type: "bo", Payload: []byte(`[]`), Backoff: &Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute}},
			`{"t":"bo","p":[],"r":0,"b":{"i":1000,"m":2,"x":60000}}`},
	} {
		body, err := tc.env.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(body, []byte(tc.head)) {
			t.Errorf("%s: body %.80s does not open with %s", tc.env.Type, body, tc.head)
		}
		if typ, ok := headerType(body); !ok || typ != tc.env.Type {
			t.Errorf("%s: header type %q (%v)", tc.env.Type, typ, ok)
		}
		back, err := Decode(body)
		if err != nil || back.Type != tc.env.Type || !bytes.Equal(back.Payload, tc.env.Payload) || back.Unique != tc.env.Unique ||
			back.UniqueFor != tc.env.UniqueFor || back.UniqueDead != tc.env.UniqueDead {
			t.Errorf("%s: decoded as %+v, %v", tc.env.Type, back, err)
		}
	}
}

// Bodies stored before the header (payload first) still decode; they have
// no header, and the scripts decode them whole.
func TestBodiesWithoutHeaderDecode(t *testing.T) {
	t.Parallel()
	for body, typ := range map[string]string{
		`{"p":{"to":"+1"},"t":"sms.send","r":3,"c":1800000000000}`: "sms.send",
		`{"p":{"t":"inner"},"t":"outer"}`:                          "outer",
		`{"p":1,"t":"u","u":5000,"ud":true}`:                       "u",
		`{"t":"a\u0062"}`:                                          "ab",
	} {
		if h, ok := headerType([]byte(body)); ok {
			t.Errorf("%s: header type %q, want none", body, h)
		}
		e, err := Decode([]byte(body))
		if err != nil || e.Type != typ {
			t.Errorf("%s decoded as %+v, %v; want type %q", body, e, err, typ)
		}
	}
}

// A body whose header names another type than the one it decodes to ("t"
// given twice, written by another program) is corrupt: the claim would
// check it as one type and the worker run it as another.
func TestHeaderAndBodyMustAgree(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"t":"paused","p":{},"t":"free"}`, `{"t":"a","t":"b"}`} {
		if e, err := Decode([]byte(body)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s decoded as %+v, %v; want ErrCorrupt", body, e, err)
		}
	}
	for _, body := range []string{`{"t":"a"}`, `{"t":"a","p":{"t":"b"}}`, `{"t":"a","h":{"t":"b"}}`} {
		if e, err := Decode([]byte(body)); err != nil || e.Type != "a" {
			t.Errorf("%s decoded as %+v, %v; want type a", body, e, err)
		}
	}
}
