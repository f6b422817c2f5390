package broker

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/delayq/delayq/job"
)

// Seed corpora live in testdata/fuzz/<Target>; .ci/run fuzzes each target
// for 20 s.

// FuzzDecodeDeadRecord: DecodeDeadRecord never panics; it fails with
// ErrCorruptRecord or returns a record that stores and reads back the same,
// its body byte for byte (so a redrive enqueues what was stored).
func FuzzDecodeDeadRecord(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","q":"default","t":"sms.send","env":{"t":"sms.send","p":{"n":1}},"err":"boom","att":3}`,
		`{"id":"a","q":"default","envb":"3q2+7w==","err":"job: corrupt envelope","att":1}`,
		`{"id":"a","q":"default","env":[ 1, "<x>" ],"err":"","att":0}`,
		`{"id":"","q":"default"}`,
		`{"id":"a","q":"q","err":"\ud800"}`,
		"\xde\xad",
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeDeadRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) || r != nil {
				t.Fatalf("DecodeDeadRecord(%q) = %v, %v; want nil and ErrCorruptRecord", data, r, err)
			}
			return
		}
		if r.ID == "" || r.Queue == "" {
			t.Fatalf("decoded a record without id or queue: %+v", r)
		}
		if env, err := job.Decode(r.Body); (err == nil) != (r.Envelope != nil) || env != nil && !bytes.Equal(env.Payload, r.Envelope.Payload) {
			t.Fatalf("Envelope %+v does not match the body %q", r.Envelope, r.Body)
		}
		stored, err := marshalDead(r)
		if err != nil {
			t.Fatalf("marshal of decoded %+v: %v", r, err)
		}
		again, err := DecodeDeadRecord(stored)
		if err != nil {
			t.Fatalf("DecodeDeadRecord(marshal(DecodeDeadRecord(%q))) = %v", data, err)
		}
		if len(r.Error) > MaxDeadErrorLen {
			if !utf8.ValidString(again.Error) || !strings.HasSuffix(again.Error, "(truncated)") {
				t.Fatal("an over-long error was not truncated cleanly")
			}
			again.Error = r.Error
		}
		if !bytes.Equal(r.Body, again.Body) {
			t.Fatalf("body %q came back as %q", r.Body, again.Body)
		}
		r.Body, again.Body = nil, nil
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("record changed on re-encoding: %+v became %+v", r, again)
		}
	})
}
