package job_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/job"
)

var benchEnvelope = &job.Envelope{
	Type: "order.cancel", Payload: []byte(`{"order_id":"ord-000123","amount_cents":4599}`),
	MaxRetries: 10, CreatedAt: time.UnixMilli(1_800_000_000_000),
}

func BenchmarkEnvelopeEncode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := benchEnvelope.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	data, _ := benchEnvelope.MarshalBinary()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := job.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
