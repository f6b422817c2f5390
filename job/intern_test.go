package job

import (
	"bytes"
	"testing"
)

// TestDecodeSharesDeclaredTypeNames: a stored job of a type the program
// declared decodes with the declared name (no copy of it per job); one of
// an undeclared type gets its own copy, equal to what was stored.
func TestDecodeSharesDeclaredTypeNames(t *testing.T) {
	New[struct{}]("intern.declared")
	body := func(typ string) []byte { return []byte(`{"t":"` + typ + `","p":{"n":1},"c":1733140000000}`) }
	declared, undeclared := body("intern.declared"), body("intern.undeclared")
	for _, b := range [][]byte{declared, undeclared} {
		e, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(b[6 : 6+len(e.Type)]); e.Type != want {
			t.Fatalf("type %q, want %q", e.Type, want)
		}
	}
	a := testing.AllocsPerRun(100, func() { _, _ = Decode(declared) })
	b := testing.AllocsPerRun(100, func() { _, _ = Decode(undeclared) })
	if a != b-1 {
		t.Errorf("Decode allocates %v times for a declared type, %v for an undeclared one; want one fewer", a, b)
	}
	// The payload shares the body: no copy either.
	e, _ := Decode(declared)
	at := bytes.Index(declared, []byte(`{"n":1}`))
	if &e.Payload[0] != &declared[at] || cap(e.Payload) != len(e.Payload) {
		t.Errorf("payload at %p (cap %d), body's at %p; want the body's bytes, capacity ending with the payload", &e.Payload[0], cap(e.Payload), &declared[at])
	}
}
