package broker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/redistest"
)

// TestACLRecipesOnTheChannelDefaultOf62: Redis 6.2 starts a new user with
// every channel (acl-pubsub-default allchannels; 7.0 changed the default to
// none) and refuses a channel pattern after that. On a server with 6.2's
// default, the namespace users of admin.ACLRules and
// admin.FunctionsACLRules (`delayq acl`, docs/security.md) are accepted, and each may
// publish on its namespace's channels only.
func TestACLRecipesOnTheChannelDefaultOf62(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, "--acl-pubsub-default", "allchannels")
	admin := srv.Client(t)
	setUser := func(name string, rules ...string) error {
		args := []any{"ACL", "SETUSER", name}
		for _, r := range rules {
			args = append(args, r)
		}
		return admin.Do(ctx, args...).Err()
	}
	// The server has 6.2's default: a pattern without resetchannels is refused.
	if err := setUser("no-reset", "reset", "on", ">pw", "~acl62:*", "&acl62:*"); err == nil || !strings.Contains(err.Error(), "allchannels") {
		t.Fatalf("a channel pattern after the default allchannels: %v; want it refused, as on 6.2", err)
	}

	for _, tt := range []struct {
		name, ns string
		rules    []string
	}{
		{"ACLRules", "acl62", append([]string{"reset", "on", ">s3cret"}, strings.Fields(dqadmin.ACLRules("acl62"))...)},
		{"FunctionsACLRules", "acl62f", append([]string{"reset", "on", ">s3cret"}, strings.Fields(dqadmin.FunctionsACLRules("acl62f"))...)},
	} {
		user := "u-" + tt.ns
		if err := setUser(user, tt.rules...); err != nil {
			t.Fatalf("%s: ACL SETUSER %s %s: %v", tt.name, user, strings.Join(tt.rules, " "), err)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "s3cret"})
		t.Cleanup(func() { _ = c.Close() })
		if err := c.Publish(ctx, tt.ns+":wake", "x").Err(); err != nil {
			t.Errorf("%s: PUBLISH on the namespace's channel: %v", tt.name, err)
		}
		if err := c.Publish(ctx, "other:wake", "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: PUBLISH on another channel: %v; want NOPERM", tt.name, err)
		}
	}
}
