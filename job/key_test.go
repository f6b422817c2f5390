package job_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/job"
)

type sms struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

// TestKeyFromArgumentsAndPerJob: a type's KeyFrom derives each job's key
// from its arguments, a per-job Key wins over it, "" from KeyFrom leaves
// the job without one, and the key survives the stored body.
func TestKeyFromArgumentsAndPerJob(t *testing.T) {
	typ := job.New[sms]("sms.send", job.KeyFrom(func(a sms) string { return a.To }))
	cases := []struct {
		args sms
		opts []job.Option
		want string
	}{
		{sms{To: "+15550100"}, nil, "+15550100"},
		{sms{To: "+15550100"}, []job.Option{job.Key("acct:7")}, "acct:7"},
		{sms{To: ""}, nil, ""},
	}
	for _, c := range cases {
		env, err := typ.Envelope(c.args, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if env.Key != c.want {
			t.Errorf("key of %+v %v = %q, want %q", c.args, c.opts, env.Key, c.want)
		}
		body, err := env.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if c.want != "" && !strings.HasPrefix(string(body), `{"t":"sms.send","k":"`+c.want+`",`) {
			t.Errorf("body %s does not carry the key in its header", body)
		}
		back, err := job.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		if back.Key != c.want {
			t.Errorf("decoded key = %q, want %q", back.Key, c.want)
		}
	}
	plain := job.New[sms]("sms.plain")
	env, err := plain.Envelope(sms{To: "x"}, job.Key("user@example.com"))
	if err != nil || env.Key != "user@example.com" {
		t.Fatalf("Key on a type without KeyFrom: %v, %q", err, env.Key)
	}
	unique, err := plain.Envelope(sms{To: "x"}, job.Key("k1"), job.Unique(0), job.ID("i"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := unique.MarshalBinary()
	if !strings.HasPrefix(string(body), `{"t":"sms.plain","u":0,"k":"k1",`) {
		t.Errorf("key after the uniqueness fields: %s", body)
	}
}

// TestBadKeysAreRefused: keys too long, empty or with characters the
// scripts cannot carry are refused with an error naming the key, from
// Key and from KeyFrom; a KeyFrom of another argument type is refused by
// New panicking with an error naming both types.
func TestBadKeysAreRefused(t *testing.T) {
	typ := job.New[sms]("sms.send", job.KeyFrom(func(a sms) string { return a.To }))
	for _, k := range []string{"", strings.Repeat("a", naming.MaxKeyLen+1), "a b", `a"b`, "a{b}", "é", "a\nb", "a#b"} {
		if _, err := typ.Envelope(sms{}, job.Key(k)); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "key") {
			t.Errorf("Key(%q): err = %v, want ErrInvalid naming the key", k, err)
		}
		if k == "" {
			continue
		}
		_, err := typ.Envelope(sms{To: k})
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "KeyFrom") {
			t.Errorf("KeyFrom giving %q: err = %v, want ErrInvalid naming KeyFrom", k, err)
		}
	}
	if err := handlePanic(func() { job.New[sms]("x", job.KeyFrom(func(s string) string { return s })) }); !errors.Is(err, job.ErrInvalid) ||
		!strings.Contains(err.Error(), "func(string) string") || !strings.Contains(err.Error(), "job_test.sms") {
		t.Errorf("KeyFrom of another type: err = %v", err)
	}
	if err := handlePanic(func() { job.New[sms]("x", job.KeyFrom[sms](nil)) }); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("nil KeyFrom: err = %v", err)
	}
	for _, k := range []string{"a", "A.b_c-d:e/f@g+h=i", strings.Repeat("z", naming.MaxKeyLen)} {
		if err := naming.Key(k); err != nil {
			t.Errorf("naming.Key(%q) = %v", k, err)
		}
	}
}
