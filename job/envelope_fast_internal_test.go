package job

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/naming"
)

// The encoder of common bodies writes what encoding/json writes, for every
// combination of the fields it handles and for the bodies it leaves to
// encoding/json.
func TestAppendCommonMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	if n := reflect.TypeFor[wireHead]().NumField() + reflect.TypeFor[wireTail]().NumField(); n != wireFields {
		t.Fatalf("wire's header and tail have %d fields, appendCommon knows %d: teach appendCommon the new field (and set wireFields)", n, wireFields)
	}
	strs := []string{"", "order.cancel", "a", "with space <&>", `quote"d`, `back\slash`, "tab\there", "ünïcode", "\u2028", "x\x7f"}
	payloads := [][]byte{nil, []byte(`{"order_id":"ord-000123","amount_cents":4599}`), []byte(`[1,2]`), []byte(`"s"`), []byte(`12`),
		[]byte("not json"), []byte{0, 1, 2, 0xff}, []byte(`{"a": 1}`)}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(ss []string) string { return ss[r.IntN(len(ss))] }
	for i := range 20000 {
		e := &Envelope{Type: pick(strs[1:]), Payload: payloads[r.IntN(len(payloads))], MaxRetries: r.IntN(12)}
		if r.IntN(2) == 0 {
			e.CreatedAt = time.UnixMilli(1_733_140_000_000 + r.Int64N(1e9))
		}
		if r.IntN(3) == 0 {
			e.Timeout = time.Duration(r.Int64N(5e9))
		}
		if r.IntN(3) == 0 {
			e.LastError = pick(strs)
		}
		if r.IntN(3) == 0 {
			e.Unique, e.UniqueFor, e.UniqueDead = true, time.Duration(r.Int64N(5e9)), r.IntN(2) == 0
		}
		if r.IntN(3) == 0 {
			e.Snoozes = r.IntN(4)
		}
		if r.IntN(3) == 0 {
			e.Batch = pick([]string{"", "b1", "batch-42"})
		}
		if r.IntN(3) == 0 {
			e.Retain = time.Duration(r.Int64N(5e9))
		}
		if r.IntN(3) == 0 {
			e.ExpireAt, e.DropExpired = time.UnixMilli(1_733_140_000_000+r.Int64N(1e9)), r.IntN(2) == 0
		}
		if r.IntN(10) == 0 {
			e.Headers = map[string]string{"traceparent": "00-abc-def-01", "b": pick(strs)}
		}
		if r.IntN(10) == 0 {
			e.Backoff = &Backoff{Initial: time.Second, Multiplier: 1.5, Max: time.Minute, Jitter: 0.1}
		}
		got, err := e.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		w, raw := e.wire()
		want, err := w.encode(e.Payload, raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("envelope %d %+v:\nappendCommon %s\nencoding/json %s", i, e, got, want)
		}
		if naming.Type(e.Type) != nil {
			continue // Prepare refuses it before it is encoded
		}
		back, err := Decode(got)
		if err != nil || back.Type != e.Type {
			t.Fatalf("envelope %d: %s does not decode: %v", i, got, err)
		}
		if typ, ok := headerType(got); !ok || typ != e.Type {
			t.Fatalf("envelope %d: the header of %s names %q (%v), not its type %q", i, got, typ, ok, e.Type)
		}
	}
}
