package dashserve

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	const long = "0123456789abcdef" // MinRemoteSecret bytes
	with := func(o Options) Options { return o }
	none, token, basic := with(Options{}), with(Options{BearerToken: long}), with(Options{BasicAuthUser: "ops", BasicAuthPassword: long})
	short, shortPass := with(Options{BearerToken: long[1:]}), with(Options{BasicAuthUser: "ops", BasicAuthPassword: long[1:]})
	mixed := with(Options{BearerToken: long, BasicAuthUser: "ops", BasicAuthPassword: "pw"})
	for _, c := range []struct {
		addr   string
		remote bool
		d      Options
		want   error
	}{
		{"127.0.0.1:8080", false, none, nil},
		{"127.1.2.3:80", false, none, nil},
		{"[::1]:8080", false, none, nil},
		{"localhost:8080", false, none, nil},
		{"127.0.0.1:8080", true, short, nil}, // loopback: no minimum
		{":8080", false, token, ErrNotLoopback},
		{"0.0.0.0:8080", false, token, ErrNotLoopback},
		{"0.0.0.0:8080", true, none, ErrNotLoopback},
		{"0.0.0.0:8080", true, token, nil},
		{"0.0.0.0:8080", true, basic, nil},
		{"0.0.0.0:8080", true, short, ErrWeakCredentials},
		{"0.0.0.0:8080", true, shortPass, ErrWeakCredentials},
		{"0.0.0.0:8080", true, mixed, ErrWeakCredentials},
		{"192.0.2.7:8080", true, token, nil},
		{"example.com:8080", true, token, nil},
		{"example.com:8080", false, token, ErrNotLoopback},
	} {
		o := c.d
		o.AllowRemote = c.remote
		_, err := checkAddr(c.addr, o)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("checkAddr(%q, remote %v, %+v) = %v, want %v", c.addr, c.remote, c.d, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), long[1:]) || strings.Contains(err.Error(), `"pw"`)) {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}
