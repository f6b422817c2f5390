package job

import (
	"encoding/json"
	"reflect"
	"testing"
)

var decodeSeeds = []string{
	`{"p":{"order_id":"ord-000123","amount_cents":4599},"t":"order.cancel","c":1800000000000}`,
	`{"p":{"to":"+1"},"t":"sms.send","r":3,"c":1800000000000}`,
	`{"p":[1,"a\"]}",{"b":[]}],"t":"x","r":0,"to":5000}`,
	`{"p":"str\"},","t":"s"}`,
	`{"p":12.5e3,"t":"n"}`,
	`{"p":null,"t":"n"}`,
	`{"t":"only.type"}`,
	`{"t":"t","p":{"late":true},"c":-5}`,
	`{"p":{ "spaced" : 1 },"t":"ws"}`,
	// Left to encoding/json: escapes, other keys, white space, duplicates,
	// big or odd numbers, and broken input.
	`{"p":{},"t":"a\u0062"}`,
	`{"p":{},"t":"t","e":"boom","h":{"k":"v"}}`,
	`{"pb":"AAEC","t":"raw"}`,
	`{ "p":{},"t":"t"}`,
	`{"p":{},"t":"t","t":"u"}`,
	`{"p":{},"t":"t","r":1e2}`,
	`{"p":{},"t":"t","c":012}`,
	`{"p":{},"t":"t","c":12345678901234567890}`,
	`{"p":{"a":},"t":"t"}`,
	`{"p":{"a":1},"t":"t"`,
	`{"p":{"a":1}}},"t":"t"}`,
	`{"p":,"t":"t"}`,
	`{"t":"é"}`,
	`{}`,
	``,
}

// decodeCommon must agree with encoding/json wherever it answers.
func FuzzDecodeCommonMatchesEncodingJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast wire
		if !fast.decodeCommon(data) {
			return
		}
		var slow wire
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast path decoded %q as %+v, encoding/json as %+v", data, fast, slow)
		}
	})
}

func TestDecodeCommonTakesTheUsualBodies(t *testing.T) {
	t.Parallel()
	for _, s := range decodeSeeds[:9] {
		var w wire
		if !w.decodeCommon([]byte(s)) {
			t.Errorf("fast path declined %s", s)
		}
	}
	for _, s := range decodeSeeds[9:] {
		var w wire
		if w.decodeCommon([]byte(s)) {
			t.Errorf("fast path took %q, which is for encoding/json", s)
		}
	}
}
