package outbox_test

import (
	"testing"

	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
)

// The outbox's behavioural tests run on PostgreSQL and SQLite in the
// module outbox/sqltest; here are the example and the tests that need no
// database.

func TestMain(m *testing.M) { redistest.MainCleanup(m, nil) }

// Order is the payload of the example's job type.
type Order struct {
	ID string `json:"id"`
}

var cancelUnpaid = job.New[Order]("order.cancel_unpaid", job.Queue("orders"), job.MaxRetries(3))
